// Runs a model: the planner (value ids, lifetimes, constant folding) and the
// executor (kernels in order, recycled buffers, hooks on every value).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/op.h"
#include "ops/registry.h"

namespace seqto::runtime {

struct SessionOptions {
  int threads = 0;              // 0: all cores
  bool reference_only = false;  // only the simple reference kernels
  bool fold_constants = true;   // run nodes whose inputs are all constant once, at creation
  // Graph optimizations for inference (BatchNormalization folding, fusion). They may
  // remove intermediate values; list the ones hooks must see in keep_values.
  bool optimize = true;
  // With optimize: run 2-D conv chains channels-last (rewrite/channels_last.cc).
  // Values keep their names and NCHW shapes either way; off is for comparisons.
  bool channels_last = true;
  // Values hooks must see or may override. They are also never constant-folded, so
  // an override of one reaches every consumer (a folded value is computed once at
  // creation, and kernels may pre-pack it).
  std::set<std::string> keep_values;
  // The ops to use; nullptr means ops::OpRegistry::Global() (tests add their own).
  const ops::OpRegistry* registry = nullptr;
  // Largest tensor a kernel may allocate; a bigger request fails the run with an
  // error naming the node (a corrupt model must not exhaust memory).
  size_t max_tensor_bytes = size_t{64} << 30;
};

// Hooks called while a model runs; both are optional.
struct RunHooks {
  // Sees every value right after it is produced (after any override): graph inputs,
  // then values constant-folded at creation, then node outputs in execution order.
  // Initializers are not observed. The tensor is only valid during the call: keep a
  // Tensor copy (which keeps its memory from being recycled) or Clone() it.
  std::function<void(const std::string& name, const Tensor& value)> observe;
  // May replace a value: return a tensor to use instead, or nullopt to keep it.
  // Called for graph inputs, folded values and node outputs (this is how fake
  // quantization works); consumers of the value then read the replacement.
  // Replacing a constant-folded value is an error: list it in keep_values.
  std::function<std::optional<Tensor>(const std::string& name, const Tensor& value)> override_value;
};

using TensorMap = std::map<std::string, Tensor>;

class Session {
 public:
  static Expected<std::unique_ptr<Session>> Create(const ir::Model& model, const SessionOptions& options = {});
  ~Session();

  // Runs the model. Inputs by graph-input name; returns the graph outputs.
  // The first dimension of every input is free (any batch size).
  // One Run at a time per Session (calls are serialized).
  Expected<TensorMap> Run(const TensorMap& inputs, const RunHooks* hooks = nullptr);

  // Frees the buffers a session keeps between runs for reuse. For callers that hold
  // many sessions at once (the analysis's incremental evaluation keeps one per edited
  // plan), which would otherwise each keep a run's worth of activations.
  void ReleaseBuffers();

  const std::vector<ir::ValueInfo>& inputs() const { return inputs_; }
  const std::vector<ir::ValueInfo>& outputs() const { return outputs_; }
  const SessionOptions& options() const { return options_; }

  // Per-node timing (`seqto bench --profile`): after EnableProfiling(true), every
  // Run adds each step's wall time to its entry. Steps are the optimized graph's
  // nodes in execution order (internal ops included), so the profile shows what
  // really ran: fused kernels, layout Transposes, float islands.
  struct StepProfile {
    std::string name, domain, op_type;
    double total_ms = 0;
    int64_t runs = 0;
  };
  void EnableProfiling(bool on);
  std::vector<StepProfile> Profile() const;

 private:
  Session() = default;
  struct Step;
  class Context;
  class BufferPool;

  Status Plan(const ir::Model& model);
  Status CheckInput(const ir::ValueInfo& info, const Tensor& t) const;
  // Runs one kernel, turning exceptions (allocation failures, bugs) into errors.
  static Status RunKernel(ops::Kernel& kernel, Context& ctx);

  SessionOptions options_;
  std::vector<ir::Node> nodes_;  // the graph's nodes; steps point into this
  // Before the inference passes: node name -> (domain, op type), so errors in a node
  // a pass rewrote name the user's op and opset, not the internal one.
  std::map<std::string, std::pair<std::string, std::string>> origins_;
  std::vector<ir::ValueInfo> inputs_, outputs_;
  std::vector<std::string> value_names_;  // value id -> name
  std::map<std::string, int> value_ids_;
  std::vector<Tensor> constants_;      // by value id (undefined if not constant)
  bool constants_non_finite_ = false;  // some constant holds NaN or infinity
  std::vector<int> input_ids_, output_ids_;
  std::vector<int> folded_ids_;  // values computed by constant folding, in order
  std::vector<Step> steps_;
  std::unique_ptr<BufferPool> pool_;
  std::mutex run_mutex_;
  bool profiling_ = false;
  std::vector<double> step_ms_;  // by step, while profiling
  int64_t profiled_runs_ = 0;
};

}  // namespace seqto::runtime
