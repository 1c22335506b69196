// Calibration: one float pass over the calibration data collects, for every tensor
// that static quantization needs, the statistics of every method (min/max, moving
// average min/max, an adaptive histogram). Ranges for any method are then computed
// from those statistics without running the model again (DESIGN.md section 2:
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
enum class CalibrationMethod { kMinMax, kEntropy, kPercentile, kDistribution };
std::string CalibrationMethodName(CalibrationMethod m);  // "minmax", "entropy", ...
Expected<CalibrationMethod> ParseCalibrationMethod(const std::string& name);  // also ORT's "MinMax", ...

// ORT's calibrator options, with ORT's defaults.
struct CalibrationOptions {
  bool moving_average = false;       // MinMax: CalibMovingAverage
  double averaging_constant = 0.01;  // MinMax: CalibMovingAverageConstant
  int entropy_num_bins = 128;        // Entropy: num_bins
  int entropy_num_quantized_bins = 128;
  int percentile_num_bins = 2048;    // Percentile: num_bins
  double percentile = 99.999;
  bool percentile_symmetric = true;  // Percentile: symmetric (ORT default True)
  int distribution_num_bins = 128;   // Distribution: num_bins
  std::string distribution_scenario = "same";  // "same" or "p3"
};

// The real range of one tensor, as a calibration method chose it.
struct TensorRange {
  double min = 0, max = 0;
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
                                     const BatchSource& next_batch, const CalibrationOptions& options,
                                     int threads = 0, const std::function<void(size_t)>& progress = {});

}  // namespace seqto::quant
