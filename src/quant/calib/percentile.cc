// Percentile (ORT's HistogramCollector.compute_percentile): symmetric (ORT's default)
// takes a histogram of |x| over [min |x|, max |x|] and returns [-t, t], t the left
// edge of the bin where the cumulative distribution reaches `percentile`; otherwise a
// histogram of x over [-T, T] is cut by (100 - percentile) / 2 % on each side. As in
// ORT, the bound is a bin edge (so within one bin width of the exact percentile) and
// the range is clamped to the tensor's min/max.
#include <algorithm>
#include <tuple>

#include "quant/calib/stats.h"

namespace seqto::quant::calib {

std::pair<double, double> PercentileThreshold(const Histogram& hist, double percentile, bool symmetric) {
  const size_t n = hist.size();
  const double total = hist.total();
  std::vector<double> cdf(n);
  double run = 0;
  for (size_t i = 0; i < n; ++i) cdf[i] = run += hist.counts[i] / total;
  // np.searchsorted(cdf, v): the first index with cdf[i] >= v (n if none).
  auto search = [&](double v) {
    return static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), v) - cdf.begin());
  };
  if (symmetric) {
    const double t = hist.edge(search(percentile / 100.0));
    return {-t, t};
  }
  const double cut = (100.0 - percentile) / 200.0;
  return {hist.edge(search(cut)), hist.edge(search(1.0 - cut))};
}

Expected<TensorRange> PercentileRange(const TensorStats& stats, const CalibrationOptions& options) {
  if (!(options.percentile >= 0 && options.percentile <= 100))
    return UserError("percentile " + std::to_string(options.percentile) + " is not in [0, 100]");
  if (options.percentile_num_bins < 1)
    return UserError("percentile needs num_bins >= 1, got " + std::to_string(options.percentile_num_bins));
  TensorRange r;
  if (stats.count == 0) return r;
  const size_t bins = static_cast<size_t>(options.percentile_num_bins);
  const double t = stats.abs_max();
  const Histogram h = options.percentile_symmetric ? stats.hist.Rebin(bins, stats.abs_min, t, /*absolute=*/true)
                                                   : stats.hist.Rebin(bins, -t, t, /*absolute=*/false);
  std::tie(r.min, r.max) = PercentileThreshold(h, options.percentile, options.percentile_symmetric);
  r.min = std::max(r.min, stats.min);
  r.max = std::min(r.max, stats.max);
  return r;
}

}  // namespace seqto::quant::calib
