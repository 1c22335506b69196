// Entropy (ORT's HistogramCollector.get_entropy_threshold): on a histogram of
// entropy_num_bins bins over [-T, T] (T = max |x|), try every threshold window
// around the zero bin from num_quantized_bins bins wide to the whole histogram;
// keep the window whose quantized distribution q is closest (KL divergence) to the
// clipped reference p (outliers folded into its end bins). ORT's details are kept:
// the window is one bin wider on the right of the zero bin, q is built from the
// window without the outliers and spread (truncated to integers) over every
// position of each merged block, both are smoothed with eps = 1e-4, and the first
// minimum wins. The result is clamped to the tensor's min/max.
//
// Note: with ORT's defaults (128 bins, 128 quantized bins) there is only one window,
// the whole histogram, so Entropy then gives the same range as MinMax (as in ORT).
#include <cmath>
#include <limits>
#include <tuple>

#include "quant/calib/stats.h"

namespace seqto::quant::calib {
namespace {

// ORT's smooth_distribution: zeros become eps, the mass is taken evenly off the
// non-zero entries. False where ORT gives None or would fail its assertions (the
// divergence is then infinite).
bool Smooth(std::vector<double>& p) {
  constexpr double kEps = 0.0001;
  size_t zeros = 0;
  for (double v : p) zeros += v == 0;
  const size_t nonzeros = p.size() - zeros;
  if (nonzeros == 0) return false;
  const double eps1 = kEps * static_cast<double>(zeros) / static_cast<double>(nonzeros);
  if (eps1 >= 1.0) return false;
  for (double& v : p) {
    v = v == 0 ? kEps : v - eps1;
    if (v <= 0) return false;
  }
  return true;
}

// scipy.stats.entropy(p, q): both normalized, sum p log(p / q).
double KlDivergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sp += p[i];
    sq += q[i];
  }
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double pi = p[i] / sp, qi = q[i] / sq;
    if (pi > 0) kl += pi * std::log(pi / qi);
  }
  return kl;
}

}  // namespace

std::pair<double, double> EntropyThreshold(const Histogram& hist, int num_quantized_bins) {
  const std::vector<double>& h = hist.counts;
  const size_t nb = h.size();
  const size_t zero = nb / 2;
  const size_t qbins = static_cast<size_t>(num_quantized_bins);
  const size_t half_q = qbins / 2;
  std::vector<double> prefix(nb + 1, 0.0);
  for (size_t i = 0; i < nb; ++i) prefix[i + 1] = prefix[i] + h[i];

  double best = std::numeric_limits<double>::infinity();
  std::pair<double, double> best_threshold{hist.edge(0), hist.edge(nb)};
  bool first = true;
  std::vector<double> p, q, quantized(qbins);
  for (size_t i = half_q; i <= zero; ++i) {
    const size_t start = zero - i, end = std::min(zero + i + 1, nb);
    const size_t size = end - start;
    // Reference p: the window, with everything outside it added to its end bins.
    p.assign(h.begin() + static_cast<std::ptrdiff_t>(start), h.begin() + static_cast<std::ptrdiff_t>(end));
    p.front() += prefix[start];
    p.back() += prefix[nb] - prefix[end];
    // Candidate q: the window (without outliers) merged into qbins bins, each spread
    // evenly (integer division, as ORT's int64 array) over the block's positions.
    const size_t merged = size / qbins;
    for (size_t k = 0; k < qbins; ++k) quantized[k] = prefix[start + (k + 1) * merged] - prefix[start + k * merged];
    quantized[qbins - 1] += prefix[end] - prefix[start + qbins * merged];
    q.assign(size, 0.0);
    for (size_t k = 0; k < qbins; ++k) {
      size_t norm = 0;
      for (size_t j = k * merged; j < (k + 1) * merged; ++j) norm += p[j] != 0;
      if (norm == 0) continue;
      const double value = std::trunc(quantized[k] / static_cast<double>(norm));
      for (size_t j = k * merged; j < (k + 1) * merged; ++j) q[j] = value;
    }
    double kl = std::numeric_limits<double>::infinity();
    if (Smooth(p) && Smooth(q)) kl = KlDivergence(p, q);
    if (first || kl < best) {  // np.argmin: the first minimum
      best = kl;
      best_threshold = {hist.edge(start), hist.edge(end)};
      first = false;
    }
  }
  return best_threshold;
}

Expected<TensorRange> EntropyRange(const TensorStats& stats, const CalibrationOptions& options) {
  const int bins = options.entropy_num_bins, qbins = options.entropy_num_quantized_bins;
  if (bins < 1 || qbins < 1 || qbins / 2 > bins / 2)
    return UserError(
        "entropy needs num_bins >= 1 and 1 <= num_quantized_bins with num_quantized_bins / 2 <= "
        "num_bins / 2, got " +
        std::to_string(bins) + " and " + std::to_string(qbins));
  TensorRange r;
  if (stats.count == 0) return r;
  const double t = stats.abs_max();
  Histogram h = stats.hist.Rebin(static_cast<size_t>(bins), -t, t, /*absolute=*/false);
  // ORT's histogram holds integer counts; round the re-binned ones to match.
  for (double& c : h.counts) c = std::nearbyint(c);
  std::tie(r.min, r.max) = EntropyThreshold(h, qbins);
  r.min = std::max(r.min, stats.min);
  r.max = std::min(r.max, stats.max);
  return r;
}

}  // namespace seqto::quant::calib
