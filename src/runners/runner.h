// Runners: what executes a candidate model for the tuner, `eval` and `bench`. Every
// runner is given the same .onnx file and the same data and returns the model's
// outputs and its latency, so candidates can be measured on the runtime they will
// ship on. Two exist:
//   engine  seqto's own runtime::Session (the default)
//   ort     ONNX Runtime through onnxruntime-node, a Node.js child process
//           running tools/ort/ort_run.js (see ort_runner.h)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/stats.h"
#include "core/status.h"
#include "core/tensor.h"
#include "runtime/session.h"

namespace seqto::runners {

struct RunnerOptions {
  int threads = 0;         // intra-op threads (0: all cores)
  double timeout_s = 600;  // ort: longest one child process may take before it is killed
};

struct LatencyOptions {
  int warmup = 3;  // untimed runs first
  int runs = 20;   // timed runs (>= 1)
};

// Outputs over all batches plus the latency of one batch (Runner::Measure).
struct Measurement {
  runtime::TensorMap outputs;
  LatencyStats latency;
};

// A Runner is used by one thread at a time.
class Runner {
 public:
  virtual ~Runner();
  // "engine", "ort".
  virtual std::string name() const = 0;

  // Runs the model on every batch (inputs by graph-input name; batches may differ in
  // size, every batch names the same inputs) and returns each graph output
  // concatenated over the batches along dimension 0. A scalar output can only come
  // from a single batch.
  virtual Expected<runtime::TensorMap> Run(const std::string& model_path,
                                           const std::vector<runtime::TensorMap>& batches) = 0;

  // Latency of one batch: `warmup` untimed runs, then `runs` timed runs, timed inside
  // the runner (process start and model loading do not count).
  virtual Expected<LatencyStats> Latency(const std::string& model_path, const runtime::TensorMap& batch,
                                         const LatencyOptions& options) = 0;

  // Run(model_path, batches) and Latency(model_path, latency_batch, options) in one
  // go. The ort runner does both in one child process, which halves its per-model
  // overhead (Node.js start-up and model loading); the default calls the two.
  virtual Expected<Measurement> Measure(const std::string& model_path, const std::vector<runtime::TensorMap>& batches,
                                        const runtime::TensorMap& latency_batch, const LatencyOptions& options);
};

// The known runner names, the default ("engine") first.
std::vector<std::string> RunnerNames();

// A runner by name; an unknown name is a UserError listing the known ones. Creating
// the ort runner checks that Node.js and onnxruntime-node can be found, so a missing
// installation is reported before any work is done.
Expected<std::unique_ptr<Runner>> MakeRunner(const std::string& name, const RunnerOptions& options = {});

// ---------------------------------------------------------------------------
// Batch helpers (shared by the runners; useful to callers that split data).

// Concatenates tensors along dimension 0. All parts must have the same dtype, the
// same rank (>= 1) and the same extents after dimension 0; a single part is returned
// as is (a scalar too). Errors say which part differs.
Expected<Tensor> ConcatDim0(const std::vector<Tensor>& parts);

// Rows [begin, end) of dimension 0, copied.
Expected<Tensor> SliceDim0(const Tensor& t, int64_t begin, int64_t end);

// Checks what Run needs: at least one batch, every batch naming the same inputs.
Status CheckBatches(const std::vector<runtime::TensorMap>& batches);

// Per output name, the outputs of all batches concatenated (ConcatDim0), with the
// output name in errors.
Expected<runtime::TensorMap> ConcatOutputs(const std::vector<runtime::TensorMap>& per_batch);

}  // namespace seqto::runners
