// ONNX Runtime as an oracle and benchmark peer for tests and benchmarks: a thin
// wrapper over the ort runner (src/runners/ort_runner.h), which runs
// tools/ort/ort_run.js (onnxruntime-node) with Node.js as a child process.
//
// Needs `node` on PATH (or $SEQTO_NODE) and the npm packages installed with
//   npm ci --ignore-scripts --prefix tools/ort
// The tools/ort folder is $SEQTO_ORT_DIR, else <source dir>/tools/ort.
#pragma once

#include <map>
#include <string>

#include "core/stats.h"
#include "core/status.h"
#include "core/tensor.h"

namespace seqto::testing {

using OrtTensors = std::map<std::string, Tensor>;

struct OrtOptions {
  int threads = 1;  // intraOpNumThreads (0: ORT's default, all cores)
};

// Ok if node and onnxruntime-node can be found; otherwise an error that says what is
// missing and how to install it.
Status OrtAvailable();

// Runs `model_path` once with ONNX Runtime on `inputs` (by graph-input name) and
// returns every graph output by name.
Expected<OrtTensors> OrtRun(const std::string& model_path, const OrtTensors& inputs, const OrtOptions& options = {});

// Latency of ONNX Runtime on `inputs`: `warmup` untimed runs, then `runs` timed runs,
// timed inside the Node.js process (start-up and model loading do not count).
Expected<LatencyStats> OrtBenchmark(const std::string& model_path, const OrtTensors& inputs, int runs, int warmup = 3,
                                    const OrtOptions& options = {});

}  // namespace seqto::testing
