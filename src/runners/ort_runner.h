// The ort runner: ONNX Runtime through its official Node.js binding (onnxruntime-node
// from npm), run as a child process: `node tools/ort/ort_run.js`. Tensors travel as
// .npy files in a temporary folder that is removed afterwards. One child process
// handles one call (all batches of a Run, or all runs of a Latency), so process
// start-up and model loading are paid once per call, and never timed.
//
// Finding the pieces:
//   node       $SEQTO_NODE, else `node` (or `nodejs`) on PATH (Debian package nodejs)
//   tools/ort  $SEQTO_ORT_DIR, else <seqto executable>/../share/seqto/tools/ort, else
//              the source tree's tools/ort (compiled in)
// The npm packages are installed with
//   npm ci --ignore-scripts --prefix tools/ort
//
// A child that crashes, or runs longer than RunnerOptions::timeout_s (it is then
// killed), is an error; errors from ONNX Runtime (a model it rejects) come back as
// one line naming the model and ORT's message.
#pragma once

#include <string>

#include "runners/runner.h"

namespace seqto::runners {

// Where Node.js and tools/ort/ort_run.js were found.
struct OrtTool {
  std::string node;    // the node executable
  std::string script;  // .../tools/ort/ort_run.js (onnxruntime-node installed next to it)
};

// The first executable `name` on PATH, or "".
std::string FindOnPath(const std::string& name);
// Node.js: $SEQTO_NODE, else `node` or `nodejs` on PATH; an error says how to get it.
// (Also used by `seqto report`, whose renderer is a Node.js tool.)
Expected<std::string> FindNode();

// The tool, or one error saying what is missing and how to install it.
Expected<OrtTool> FindOrtTool();
// Ok if FindOrtTool() succeeds.
Status OrtAvailable();

class OrtRunner : public Runner {
 public:
  explicit OrtRunner(const RunnerOptions& options) : options_(options) {}

  std::string name() const override { return "ort"; }
  Expected<runtime::TensorMap> Run(const std::string& model_path,
                                   const std::vector<runtime::TensorMap>& batches) override;
  Expected<LatencyStats> Latency(const std::string& model_path, const runtime::TensorMap& batch,
                                 const LatencyOptions& options) override;
  // One child process for both.
  Expected<Measurement> Measure(const std::string& model_path, const std::vector<runtime::TensorMap>& batches,
                                const runtime::TensorMap& latency_batch, const LatencyOptions& options) override;

 private:
  // One child process: outputs over `batches` (if given) and the latency of
  // `latency_batch` (if given; `batches`' first one when null).
  Expected<Measurement> Invoke(const std::string& model_path, const std::vector<runtime::TensorMap>* batches,
                               const runtime::TensorMap* latency_batch, const LatencyOptions* latency);

  RunnerOptions options_;
};

}  // namespace seqto::runners
