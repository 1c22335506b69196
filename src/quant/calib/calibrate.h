// Calibration: one float pass over the calibration data collects, for every tensor
// that static quantization needs, the statistics of every method (min/max, moving
// average min/max, an adaptive histogram). Ranges for any method are then computed
// from those statistics without running the model again (docs/design.md, Pipeline:
// calibrate once). Memory is bounded: histograms, never stored activations.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace seqto::quant {

// Calibration methods; each computes a range from the shared statistics. Adding one
// is one file in calib/ plus one registry line (calib/methods.cc).
enum class CalibrationMethod { kMinMax, kEntropy, kPercentile, kDistribution, kMse };
std::string CalibrationMethodName(CalibrationMethod m);                       // "minmax", "entropy", ...
Expected<CalibrationMethod> ParseCalibrationMethod(const std::string& name);  // also ORT's "MinMax", ...

// ORT's calibrator options, with ORT's defaults (onnxruntime/python/tools/quantization/
// calibrate.py, create_calibrator).
struct CalibrationOptions {
  bool moving_average = false;       // MinMax: CalibMovingAverage
  double averaging_constant = 0.01;  // MinMax: CalibMovingAverageConstant
  // MinMax: CalibMaxIntermediateOutputs. ORT averages the per-batch min/max of each
  // chunk of this many batches and merges chunks with averaging_constant
  // (m += c * (chunk_mean - m)); 0 (ORT's None) is one chunk: the plain mean of the
  // per-batch min/max. 1 gives a per-batch exponential moving average.
  int moving_average_chunk = 0;
  int entropy_num_bins = 128;  // Entropy: num_bins
  int entropy_num_quantized_bins = 128;
  int percentile_num_bins = 2048;  // Percentile: num_bins
  double percentile = 99.999;
  bool percentile_symmetric = true;            // Percentile: symmetric (ORT default True)
  int distribution_num_bins = 2048;            // Distribution: num_bins (ORT requires >= 512)
  std::string distribution_scenario = "same";  // "same" or "p3"
  // MSE (not an ORT method): the integer grid the range is chosen for. Pass
  // qmax - qmin + 1 of the activation type's GetQRange (uint8: 256; symmetric uint8:
  // 255; reduce_range: 128) and the scheme's symmetric flag, so the error minimized is
  // the one the quantized model will have.
  int mse_num_levels = 256;
  bool mse_symmetric = false;
  bool operator==(const CalibrationOptions&) const = default;
};

// The real range of one tensor, as a calibration method chose it.
struct TensorRange {
  double min = 0, max = 0;
  // Distribution only: mean and standard deviation of the histogram under the
  // scenario (ORT's TensorData avg/std, which ORT uses for float8 scales only).
  double avg = 0, stddev = 0;
};
using TensorRanges = std::map<std::string, TensorRange>;

// Statistics of every observed tensor; fed one batch at a time.
class CalibrationStats {
 public:
  CalibrationStats(std::set<std::string> tensors, CalibrationOptions options);
  ~CalibrationStats();
  CalibrationStats(CalibrationStats&&) noexcept;
  CalibrationStats& operator=(CalibrationStats&&) noexcept;

  const std::set<std::string>& tensors() const;
  // Adds one batch's value of `name` (ignored if not in tensors()). Float32 only.
  // NaN or Inf is an error naming the tensor.
  Status Observe(const std::string& name, const Tensor& value);
  // Number of batches observed for each tensor (all equal after a full pass).
  size_t batches() const;
  // The range of every tensor under `method`. Error if a tensor was never observed.
  Expected<TensorRanges> Ranges(CalibrationMethod method) const;
  // The same with other method options (percentile, bin counts, ...): the statistics
  // do not depend on them, so trying another setting needs no new calibration pass.
  // (averaging_constant and moving_average_chunk act while observing: the
  // construction's values are used.)
  Expected<TensorRanges> Ranges(CalibrationMethod method, const CalibrationOptions& options) const;
  // The fixed number of histogram bins kept per tensor, and the memory all statistics
  // use (neither grows with the number of batches).
  size_t histogram_bins() const;
  size_t memory_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Yields the next calibration batch (feeds by graph-input name); returns false when
// there are no more batches.
using BatchSource = std::function<Expected<bool>(runtime::TensorMap& feeds)>;

// Runs `model` (float, unoptimized so every tensor is visible) once over all batches
// and observes `tensors`. Progress goes to `progress` if given (batches done).
Expected<CalibrationStats> Calibrate(const ir::Model& model, const std::set<std::string>& tensors,
                                     const BatchSource& next_batch, const CalibrationOptions& options, int threads = 0,
                                     const std::function<void(size_t)>& progress = {});

}  // namespace seqto::quant
