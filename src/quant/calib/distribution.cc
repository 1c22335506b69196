// Distribution (ORT's DistributionCalibrater / HistogramCollector.compute_distribution):
// a histogram of x over [-T, T]; the range is its edges, [-T, T] (not clamped to the
// tensor's min/max, as in ORT), and avg/stddev are the histogram's mean and standard
// deviation over bin centres, of x (scenario "same") or of sign(x) |x|^(1/3) ("p3").
//
// What is not done: ORT uses avg/std only to compute float8 (E4M3FN) scales
// (scale = std / std of the float8 values, compute_scale_zp_float8). seqto has no
// float8 quantization type, so for the integer types the method gives ORT's integer
// behaviour (the [-T, T] range); avg/stddev are reported for a future float8 type.
#include <cmath>

#include "quant/calib/stats.h"

namespace seqto::quant::calib {

Expected<TensorRange> DistributionRange(const TensorStats& stats, const CalibrationOptions& options) {
  if (options.distribution_num_bins < 512)
    return UserError("distribution needs num_bins >= 512 (as ONNX Runtime), got " +
                     std::to_string(options.distribution_num_bins));
  double power;
  if (options.distribution_scenario == "same")
    power = 1.0;
  else if (options.distribution_scenario == "p3")
    power = 1.0 / 3.0;
  else
    return UserError("unknown distribution scenario '" + options.distribution_scenario + "' (expected same or p3)");
  const double t = stats.count == 0 ? 0.0 : stats.abs_max();
  const Histogram h = stats.hist.Rebin(static_cast<size_t>(options.distribution_num_bins), -t, t, false);
  double n = 0, s1 = 0, s2 = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    const double centre = (h.edge(i) + h.edge(i + 1)) * 0.5;
    const double v = power == 1.0 ? centre : std::copysign(std::pow(std::fabs(centre), power), centre);
    n += h.counts[i];
    s1 += h.counts[i] * v;
    s2 += h.counts[i] * v * v;
  }
  TensorRange r;
  r.min = h.lo;
  r.max = h.hi;
  if (n > 0) {
    r.avg = s1 / n;
    r.stddev = std::sqrt(std::max(0.0, s2 / n - r.avg * r.avg));
  }
  return r;
}

}  // namespace seqto::quant::calib
