#include "support/ort_oracle.h"

#include <algorithm>

#include "runners/ort_runner.h"

namespace seqto::testing {

namespace {

runners::OrtRunner MakeOrt(const OrtOptions& options) {
  runners::RunnerOptions runner_options;
  runner_options.threads = options.threads;
  return runners::OrtRunner(runner_options);
}

}  // namespace

Status OrtAvailable() { return runners::OrtAvailable(); }

Expected<OrtTensors> OrtRun(const std::string& model_path, const OrtTensors& inputs, const OrtOptions& options) {
  return MakeOrt(options).Run(model_path, {inputs});
}

Expected<LatencyStats> OrtBenchmark(const std::string& model_path, const OrtTensors& inputs, int runs, int warmup,
                                    const OrtOptions& options) {
  if (runs < 1) return UserError("ONNX Runtime benchmark: runs must be >= 1");
  return MakeOrt(options).Latency(model_path, inputs, {.warmup = std::max(warmup, 0), .runs = runs});
}

}  // namespace seqto::testing
