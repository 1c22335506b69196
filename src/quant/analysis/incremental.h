// Incremental evaluation of edited plans (the analysis's sensitivity passes and
// searches): a plan that differs from a base plan in one group computes the same
// values as the base upstream of that group, so only the part downstream of the
// change is run again, fed with the base's values where the two parts meet.
//
// Each round of the analysis (the isolated pass, a forward step, a backward round)
// evaluates many plans that all differ from one base by one group. The base runs once
// per chunk of samples with the meeting values kept; every plan then runs only its
// downstream part on them. On MobileNetV2 the parts average about half the model.
//
// Numbers: the base runs as it would alone (no value is kept for the parts, so no
// fusion is stopped) and hands over the values its kernels materialize; where a fused
// kernel computed a needed value internally, the part also recomputes its producer.
// With the reference kernels and no graph optimization the part's outputs are
// bit-identical to the whole plan's; with the engine's kernels the output losses agree
// within 1e-6 relative (tests/unit/incremental_test.cc), the analysis's own tolerance.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/quantize.h"
#include "runtime/session.h"

namespace seqto::quant {

// Rows `rows` (indices along dimension 0) of every tensor of a batch (rank-0 tensors
// are kept whole): the analysis's samples and chunks.
runtime::TensorMap SelectRows(const runtime::TensorMap& batch, const std::vector<int64_t>& rows);

// Sums of squares of the reference outputs and of their differences from a
// candidate's (float outputs of the same size, in double): the output loss of the
// analysis is noise / signal. Shared by the full and the incremental evaluation,
// so both measure the same thing.
struct LossSums {
  double signal = 0, noise = 0;
  void Add(const runtime::TensorMap& ref, const runtime::TensorMap& cand) {
    for (const auto& [name, r] : ref) {
      auto it = cand.find(name);
      if (it == cand.end() || r.dtype() != DType::kFloat32 || it->second.numel() != r.numel()) continue;
      const float* x = r.data<float>();
      const float* y = it->second.data<float>();
      for (int64_t i = 0; i < r.numel(); ++i) {
        signal += double(x[i]) * x[i];
        noise += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      }
    }
  }
};

// The part of `trial` that may compute something `base` does not: every node that is
// not in `base` identically (same op, attributes, inputs, outputs and initializer
// contents), every node downstream of one, and the constant nodes (weights'
// DequantizeLinear) those read. Its inputs (`cut`) are values both models compute
// the same way; `outputs_from_base` are trial outputs the part does not produce
// (equal to the base's).
struct DownstreamPart {
  ir::Model model;
  std::vector<std::string> cut;
  std::vector<std::string> outputs_from_base;
  size_t nodes = 0;  // nodes of the part, of trial.graph.nodes.size()
};
// `available` (optional) says which values of the base can be handed over (a fused
// kernel may compute a value internally, then the part also recomputes its producer);
// empty: all.
Expected<DownstreamPart> CutDownstream(const ir::Model& base, const ir::Model& trial,
                                       const std::function<bool(const std::string&)>& available = {});

struct IncrementalOptions {
  int workers = 1;                  // plans evaluated in parallel, single-threaded each
  runtime::SessionOptions session;  // for every session (threads is set to 1)
  Fallback fallback = Fallback::kFloat;
  // Called after each chunk of samples with the chunks done and the losses so far;
  // returning true stops there (the losses then cover those chunks only).
  std::function<bool(size_t chunks_done, const std::vector<double>& losses)> after_chunk;
  // Called after each plan's sub-session is built and after each chunk (for progress).
  std::function<void()> tick;
};

// Output losses (OutputLoss of the outputs against `refs`, over the chunks used) of
// the plans `trials`, each an excluded set, all evaluated against the base plan
// `base` (the excluded set they are edits of). `chunks` are the samples and `refs`
// the float model's outputs for them. `chunks_used` (optional) receives how many
// chunks were evaluated.
Expected<std::vector<double>> IncrementalLosses(const QuantPlan& plan, const std::set<std::string>& base,
                                                const std::vector<std::set<std::string>>& trials,
                                                const std::vector<runtime::TensorMap>& chunks,
                                                const std::vector<runtime::TensorMap>& refs,
                                                const IncrementalOptions& options, size_t* chunks_used = nullptr);

// Splits batches into chunks of at most `rows` samples (the incremental evaluator's
// memory is one chunk's kept values).
std::vector<runtime::TensorMap> Rechunk(const std::vector<runtime::TensorMap>& batches, int64_t rows);

}  // namespace seqto::quant
