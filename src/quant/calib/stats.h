// Internal to calib/: the one-pass statistics of one tensor and the histogram the
// methods work on. Tests include it to check the methods on histograms they build.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "quant/calib/calibrate.h"

namespace seqto::quant::calib {

// A histogram with equal-width bins over [lo, hi], numpy's convention: bin i is
// [edge(i), edge(i + 1)), the last bin also holds hi. This is the histogram ORT's
// HistogramCollector builds with np.histogram; counts may be fractional when it was
// re-binned from the one-pass histogram.
struct Histogram {
  std::vector<double> counts;
  double lo = 0, hi = 0;
  size_t size() const { return counts.size(); }
  double edge(size_t i) const { return lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(counts.size()); }
  double total() const;
};

// The values of one tensor over all batches, in a fixed number of bins over [-R, R].
// R is the smallest power of two >= max |x| seen so far: when a batch exceeds it, R
// doubles and adjacent bins merge in pairs (exact), so memory never grows and the
// result does not depend on the order of the batches.
class AdaptiveHistogram {
 public:
  explicit AdaptiveHistogram(size_t bins);  // bins: a positive multiple of 4
  // Adds n finite values whose largest magnitude is absmax.
  void Add(const float* x, int64_t n, double absmax);
  size_t bins() const { return counts_.size(); }
  double range() const { return range_; }  // R (0 while every value was 0)
  // The fine bins: bin i is [-R + 2Ri/bins, -R + 2R(i+1)/bins), the last one also
  // holds R. All 0 while range() == 0.
  const std::vector<double>& counts() const { return counts_; }
  double total() const;
  // ORT's histogram: `bins` equal bins over [lo, hi] (numpy widens lo == hi to
  // [lo - 0.5, hi + 0.5]) of x, or of |x| when `absolute`. Each of this histogram's
  // bins spreads its count uniformly over its part inside [lo, hi]; the caller
  // passes bounds that hold every value (the exact min/max), so no count is lost.
  Histogram Rebin(size_t bins, double lo, double hi, bool absolute) const;

 private:
  void Grow(double absmax);
  std::vector<double> counts_;
  double range_ = 0;
  double zeros_ = 0;  // values added while range_ == 0 (all exactly 0)
};

// Everything calibration keeps of one tensor.
struct TensorStats {
  explicit TensorStats(size_t histogram_bins) : hist(histogram_bins) {}

  // Adds one batch (float32, finite: NaN/Inf is an error naming the element).
  Status Add(const Tensor& value, const CalibrationOptions& options);
  // ORT's moving-average min/max (chunked mean, see CalibrationOptions).
  std::pair<double, double> MovingAverage(const CalibrationOptions& options) const;
  double abs_max() const { return std::max(-min, max); }

  size_t batches = 0;
  int64_t count = 0;        // values seen
  double min = 0, max = 0;  // exact, over all values (0 while count == 0)
  double abs_min = 0;       // smallest |x| (ORT's |x| histogram starts there)
  // Moving average: the merged chunks, and the open chunk's sums of batch min/max.
  bool avg_valid = false;
  double avg_min = 0, avg_max = 0;
  double chunk_min_sum = 0, chunk_max_sum = 0;
  size_t chunk_batches = 0;
  AdaptiveHistogram hist;
};

// A calibration method: the range of one tensor from its statistics.
using MethodFn = Expected<TensorRange> (*)(const TensorStats& stats, const CalibrationOptions& options);

// The registry (methods.cc).
struct MethodInfo {
  CalibrationMethod method;
  const char* name;      // seqto's spelling ("minmax")
  const char* ort_name;  // ORT's CalibrationMethod name ("MinMax")
  MethodFn fn;
};
const std::vector<MethodInfo>& Methods();
const MethodInfo* FindMethod(CalibrationMethod method);

// The methods' cores on a histogram, for tests: ORT's get_entropy_threshold and
// compute_percentile (thresholds before clamping to the tensor's min/max).
std::pair<double, double> EntropyThreshold(const Histogram& hist, int num_quantized_bins);
std::pair<double, double> PercentileThreshold(const Histogram& hist, double percentile, bool symmetric);
// MSE's error model (mse.cc): the expected squared quantize-dequantize error per value
// when the range is [lo, hi] on options' grid (mse_num_levels, mse_symmetric), as
// estimated from the histogram. Error on a bad option or an empty/degenerate range.
Expected<double> MseExpectedError(const TensorStats& stats, double lo, double hi, const CalibrationOptions& options);

}  // namespace seqto::quant::calib
