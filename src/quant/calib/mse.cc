// MSE: the range [lo, hi] that minimizes the expected mean squared error of
// quantize-dequantize over the calibration data, for the integer grid the tensor
// will get (mse_num_levels levels, asymmetric or mse_symmetric, with the scheme's
// scale/zero-point math: 0 <= hi, lo <= 0, zero point rounded, so the grid is the
// multiples of the scale from -zp * s to (levels - 1 - zp) * s).
//
// Error model, on the one-pass histogram's fine bins (not re-binned: they are finer
// than any method's bins, and their counts are exact), each bin's values spread
// uniformly over the bin clipped to the tensor's exact [min, max]:
//   clipping:  sum over values beyond the grid's ends of (x - end)^2, exact for the
//              uniform bins (prefix sums of the bins' moments, the bin holding the
//              end split), so each candidate costs O(log bins);
//   rounding:  s^2 / 12 per value inside the grid (the usual uniform-noise model),
//              except the two bins touching 0: 0 is always on the grid, and Relu-like
//              tensors hold many exact zeros there, so those bins count their exact
//              error (uniform in the bin, rounded to the multiples of s) instead.
//
// Search (on bin edges, as the histogram MSE calibrator of NVIDIA's
// pytorch-quantization for TensorRT sweeps its thresholds): candidate bounds are the
// fine bin edges inside [min, max] plus min and max themselves, so MinMax's range is
// always a candidate.
//   symmetric: every threshold t, range [-t, t] (TensorRT's 1-D sweep);
//   asymmetric: lower bound in [min, 0], upper in [0, max], both searched: every
//     pair on a coarse grid of at most 256 candidates per side (the ends always
//     included), then every pair within one coarse step of the best. The error
//     is smooth in (lo, hi) at the coarse step, so this finds the optimum a full
//     search would without its bins^2 cost (~70k evaluations per tensor).
// Ties keep the first (widest) candidate. The histogram and min/max do not depend on
// the order of the batches, so neither does the range. The result is clamped to the
// tensor's [min, max] like Percentile and Entropy.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "quant/calib/stats.h"

namespace seqto::quant::calib {
namespace {

// The grid the scheme builds for [lo, hi] (ComputeScaleZeroPoint with qmin = 0,
// qmax = levels - 1: zero point from the double scale, the grid from its float).
struct Grid {
  double scale = 0;
  double lo = 0, hi = 0;  // the first and last grid points
};

bool MakeGrid(double lo, double hi, int levels, bool symmetric, Grid* g) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  if (symmetric) {
    const double a = std::max(-lo, hi);
    lo = -a;
    hi = a;
  }
  const double qmax = static_cast<double>(levels - 1);
  const double ds = (hi - lo) / qmax;
  if (!(ds >= FLT_MIN)) return false;  // the scheme's scale-1 fallback: all zero
  const double zp = std::clamp(symmetric ? std::nearbyint(qmax / 2) : std::nearbyint(-lo / ds), 0.0, qmax);
  const double s = static_cast<double>(static_cast<float>(ds));  // the stored scale
  g->scale = s;
  g->lo = -zp * s;
  g->hi = (qmax - zp) * s;
  return true;
}

// Mean squared rounding error of x uniform in [0, w) rounded to the multiples of s.
double UniformRoundingError(double w, double s) {
  if (w <= 0) return 0;
  const double m = std::floor(w / s), r = w - m * s;
  // One period [0, s): error x below s/2, s - x above; the integral over [0, r).
  const double part = r <= s / 2 ? r * r * r / 3 : s * s * s / 12 - (s - r) * (s - r) * (s - r) / 3;
  return (m * s * s * s / 12 + part) / w;
}

// The non-empty fine bins as uniform pieces [u, v] within [min, max], with prefix
// sums of their count, first and second moments.
class Pieces {
 public:
  explicit Pieces(const TensorStats& st) {
    const std::vector<double>& counts = st.hist.counts();
    const size_t k = counts.size();
    const double r = st.hist.range(), w = 2 * r / static_cast<double>(k);
    s0_.push_back(0);
    s1_.push_back(0);
    s2_.push_back(0);
    for (size_t i = 0; i < k; ++i) {
      const double n = counts[i];
      if (n == 0) continue;
      // Bin k/2 starts and bin k/2 - 1 ends exactly at 0 (whatever the edge formula rounds to).
      const double e0 = i == k / 2 ? 0.0 : -r + w * static_cast<double>(i);
      const double e1 = i + 1 == k / 2 ? 0.0 : -r + w * static_cast<double>(i + 1);
      const double u = std::clamp(e0, st.min, st.max), v = std::clamp(e1, st.min, st.max);
      if (i == k / 2 && u == 0) zero_up_ = n_.size();
      if (i + 1 == k / 2 && v == 0) zero_down_ = n_.size();
      u_.push_back(u);
      v_.push_back(v);
      n_.push_back(n);
      s0_.push_back(s0_.back() + n);
      s1_.push_back(s1_.back() + n * (u + v) / 2);
      s2_.push_back(s2_.back() + n * (u * u + u * v + v * v) / 3);
    }
  }

  double total() const { return s0_.back(); }

  // Expected sum of squared errors on grid g.
  double Error(const Grid& g) const {
    double below_n, below_e, above_n, above_e;
    Below(g.lo, &below_n, &below_e);
    Above(g.hi, &above_n, &above_e);
    const double s = g.scale, noise = s * s / 12;
    double e = below_e + above_e + std::max(0.0, total() - below_n - above_n) * noise;
    if (zero_up_ != kNone && v_[zero_up_] <= g.hi) e += n_[zero_up_] * (UniformRoundingError(v_[zero_up_], s) - noise);
    if (zero_down_ != kNone && u_[zero_down_] >= g.lo)
      e += n_[zero_down_] * (UniformRoundingError(-u_[zero_down_], s) - noise);
    return e;
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // Count below t and the sum of (x - t)^2 over it.
  void Below(double t, double* n, double* e) const {
    const size_t j = static_cast<size_t>(std::upper_bound(v_.begin(), v_.end(), t) - v_.begin());  // v > t from j
    *n = s0_[j];
    *e = std::max(0.0, s2_[j] - 2 * t * s1_[j] + t * t * s0_[j]);
    if (j < n_.size() && u_[j] < t) {
      const double d = t - u_[j], c = n_[j] * d / (v_[j] - u_[j]);
      *n += c;
      *e += c * d * d / 3;
    }
  }
  // Count above t and the sum of (x - t)^2 over it.
  void Above(double t, double* n, double* e) const {
    const size_t j = static_cast<size_t>(std::lower_bound(u_.begin(), u_.end(), t) - u_.begin());  // u >= t from j
    const size_t last = n_.size();
    *n = s0_[last] - s0_[j];
    *e = std::max(0.0, (s2_[last] - s2_[j]) - 2 * t * (s1_[last] - s1_[j]) + t * t * *n);
    if (j > 0 && v_[j - 1] > t) {
      const double d = v_[j - 1] - t, c = n_[j - 1] * d / (v_[j - 1] - u_[j - 1]);
      *n += c;
      *e += c * d * d / 3;
    }
  }

  std::vector<double> u_, v_, n_, s0_, s1_, s2_;
  size_t zero_up_ = kNone, zero_down_ = kNone;
};

// Candidate bounds: the fine bin edges strictly inside (from, to), plus from and to;
// ascending.
std::vector<double> Candidates(const TensorStats& st, double from, double to) {
  std::vector<double> c{from};
  const size_t k = st.hist.bins();
  const double r = st.hist.range(), w = 2 * r / static_cast<double>(k);
  for (size_t i = 0; i <= k; ++i) {
    const double e = i == k / 2 ? 0.0 : -r + w * static_cast<double>(i);
    if (e > from && e < to) c.push_back(e);
  }
  if (to > from) c.push_back(to);
  return c;
}

Status CheckOptions(const CalibrationOptions& o) {
  if (o.mse_num_levels < 2)
    return UserError("mse needs at least 2 quantization levels, got " + std::to_string(o.mse_num_levels));
  return Status::Ok();
}

}  // namespace

Expected<double> MseExpectedError(const TensorStats& stats, double lo, double hi, const CalibrationOptions& options) {
  SEQTO_RETURN_IF_ERROR(CheckOptions(options));
  if (stats.count == 0 || stats.hist.range() == 0) return UserError("mse: no non-zero values observed");
  Grid g;
  if (!(lo <= hi) || !MakeGrid(lo, hi, options.mse_num_levels, options.mse_symmetric, &g))
    return UserError("mse: range [" + std::to_string(lo) + ", " + std::to_string(hi) + "] is empty");
  const Pieces pieces(stats);
  return pieces.Error(g) / pieces.total();
}

Expected<TensorRange> MseRange(const TensorStats& stats, const CalibrationOptions& options) {
  SEQTO_RETURN_IF_ERROR(CheckOptions(options));
  TensorRange r;
  r.min = stats.min;
  r.max = stats.max;
  if (stats.count == 0 || stats.hist.range() == 0) return r;  // nothing or all zero: MinMax
  const Pieces pieces(stats);
  const int levels = options.mse_num_levels;
  const bool symmetric = options.mse_symmetric;
  // Error of [lo, hi]; infinite where the scheme would fall back to scale 1.
  auto error = [&](double lo, double hi) {
    Grid g;
    return MakeGrid(lo, hi, levels, symmetric, &g) ? pieces.Error(g) : INFINITY;
  };
  double best_lo = std::min(stats.min, 0.0), best_hi = std::max(stats.max, 0.0);
  double best = error(best_lo, best_hi);
  if (symmetric) {
    const std::vector<double> ts = Candidates(stats, 0.0, stats.abs_max());
    for (size_t i = ts.size(); i-- > 0;) {  // widest first
      const double e = error(-ts[i], ts[i]);
      if (e < best) {
        best = e;
        best_lo = -ts[i];
        best_hi = ts[i];
      }
    }
  } else {
    const std::vector<double> los = Candidates(stats, std::min(stats.min, 0.0), 0.0);
    const std::vector<double> his = Candidates(stats, 0.0, std::max(stats.max, 0.0));
    // his descending and los ascending: the widest ranges first.
    auto try_pairs = [&](size_t a0, size_t a1, size_t b0, size_t b1, size_t sa, size_t sb) {
      for (size_t a = a0;; a = std::min(a + sa, a1)) {
        for (size_t b = b1;; b = b - std::min(sb, b - b0)) {
          const double e = error(los[a], his[b]);
          if (e < best) {
            best = e;
            best_lo = los[a];
            best_hi = his[b];
          }
          if (b == b0) break;
        }
        if (a == a1) break;
      }
    };
    constexpr size_t kCoarse = 256;
    const size_t sa = (los.size() + kCoarse - 1) / kCoarse, sb = (his.size() + kCoarse - 1) / kCoarse;
    try_pairs(0, los.size() - 1, 0, his.size() - 1, sa, sb);
    if (sa > 1 || sb > 1) {
      const size_t ia = static_cast<size_t>(std::lower_bound(los.begin(), los.end(), best_lo) - los.begin());
      const size_t ib = static_cast<size_t>(std::lower_bound(his.begin(), his.end(), best_hi) - his.begin());
      try_pairs(ia - std::min(ia, sa), std::min(ia + sa, los.size() - 1), ib - std::min(ib, sb),
                std::min(ib + sb, his.size() - 1), 1, 1);
    }
  }
  r.min = std::max(best_lo, stats.min);
  r.max = std::min(best_hi, stats.max);
  return r;
}

}  // namespace seqto::quant::calib
