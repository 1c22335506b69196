// The one-pass histogram. ORT's HistogramCollector sees all calibration outputs at
// once and builds np.histogram(values, num_bins, range=(-T, T)) with T = max |x| over
// every batch (or, for symmetric Percentile, a histogram of |x| over [min |x|, T]).
// A single pass cannot know T in advance, so seqto keeps a finer histogram (8 x the
// largest bin count any method uses) over [-R, R], R the power of two just above the
// running max |x|, and re-bins it to ORT's bins once T is known. The difference from
// ORT: inside one fine bin values are assumed uniform, so a re-binned count can be off
// by part of one fine bin at each of its edges (a fine bin is at most 1/4 of an ORT
// bin of x, 1/2 of an ORT bin of |x|). When the largest |x| is a power of two and the
// bin counts divide the fine count, the bins line up and the re-binning is exact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/parallel.h"
#include "quant/calib/stats.h"

namespace seqto::quant::calib {

double Histogram::total() const {
  double t = 0;
  for (double c : counts) t += c;
  return t;
}

AdaptiveHistogram::AdaptiveHistogram(size_t bins) : counts_(bins, 0.0) {}

double AdaptiveHistogram::total() const {
  double t = zeros_;
  for (double c : counts_) t += c;
  return t;
}

void AdaptiveHistogram::Grow(double absmax) {
  // Smallest power of two >= absmax.
  int e;
  const double m = std::frexp(absmax, &e);  // absmax = m * 2^e, m in [0.5, 1)
  const double target = m == 0.5 ? absmax : std::ldexp(1.0, e);
  const size_t k = counts_.size();
  if (range_ == 0) {
    range_ = target;
    counts_[k / 2] += zeros_;  // 0 lies in bin k/2, [0, w)
    zeros_ = 0;
    return;
  }
  while (range_ < target) {
    // [-R, R] becomes the middle half of [-2R, 2R]: new bin k/4 + i = old 2i + 2i+1.
    std::vector<double> merged(k, 0.0);
    for (size_t i = 0; i < k / 2; ++i) merged[k / 4 + i] = counts_[2 * i] + counts_[2 * i + 1];
    counts_.swap(merged);
    range_ *= 2;
  }
}

void AdaptiveHistogram::Add(const float* x, int64_t n, double absmax) {
  if (n <= 0) return;
  if (absmax > range_) Grow(absmax);
  if (range_ == 0) {  // every value so far is 0
    zeros_ += static_cast<double>(n);
    return;
  }
  const int64_t k = static_cast<int64_t>(counts_.size());
  const double per_unit = static_cast<double>(k) / (2 * range_);
  const double r = range_;
  if (n < 4 * k) {  // small: the per-chunk counters below would cost more than they save
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = static_cast<int64_t>((static_cast<double>(x[i]) + r) * per_unit);
      counts_[static_cast<size_t>(std::min(b, k - 1))] += 1;
    }
    return;
  }
  std::mutex mu;
  // Each chunk computes bin indices a block at a time (a loop the compiler vectorizes:
  // every value is within [-R, R], so the index is in [0, k] and fits int32), then
  // counts them into 4 interleaved integer histograms, so runs of equal values (the
  // zeros after a Relu) do not serialize on one counter; merged once per chunk.
  ParallelFor(n, 4, [&](int64_t begin, int64_t end) {
    constexpr int64_t kBlock = 1024, kWays = 4, kFlushEvery = int64_t{1} << 30;  // uint32 cannot overflow
    std::vector<uint32_t> local(static_cast<size_t>(k * kWays), 0);
    int32_t idx[kBlock];
    auto flush = [&] {
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t j = 0; j < k; ++j) {
        uint64_t c = 0;
        for (int64_t w = 0; w < kWays; ++w) c += local[w * k + j];
        counts_[j] += static_cast<double>(c);
      }
      std::fill(local.begin(), local.end(), 0u);
    };
    const double rr = r, pu = per_unit;  // locals: the vectorized loop must not reload captures
    const int32_t top = static_cast<int32_t>(k - 1);
    int64_t since_flush = 0;
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t m = std::min(kBlock, end - b0);
      const float* xb = x + b0;
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) {
        const int32_t b = static_cast<int32_t>((static_cast<double>(xb[i]) + rr) * pu);
        idx[i] = std::min(b, top);
      }
      for (int64_t i = 0; i < m; ++i) ++local[(i % kWays) * k + idx[i]];
      if ((since_flush += m) >= kFlushEvery) {
        flush();
        since_flush = 0;
      }
    }
    flush();
  });
}

Histogram AdaptiveHistogram::Rebin(size_t bins, double lo, double hi, bool absolute) const {
  Histogram h;
  if (lo == hi) {  // numpy: a degenerate range becomes [lo - 0.5, hi + 0.5]
    lo -= 0.5;
    hi += 0.5;
  }
  h.lo = lo;
  h.hi = hi;
  h.counts.assign(bins, 0.0);
  const double width = (hi - lo) / static_cast<double>(bins);
  auto bin_of = [&](double v) {
    const double f = std::floor((v - lo) / width);
    return f < 0 ? size_t{0} : (f >= static_cast<double>(bins) ? bins - 1 : static_cast<size_t>(f));
  };
  // Spreads count c uniformly over [a, b) clipped to [lo, hi].
  auto spread = [&](double c, double a, double b) {
    if (c == 0) return;
    const double ca = std::max(a, lo), cb = std::min(b, hi);
    if (cb <= ca) {  // outside [lo, hi]: the values sit on its boundary
      h.counts[bin_of(std::min(std::max(a, lo), hi))] += c;
      return;
    }
    const size_t first = bin_of(ca), last = bin_of(cb);
    if (first == last) {
      h.counts[first] += c;
      return;
    }
    for (size_t t = first; t <= last; ++t) {
      const double overlap =
          std::min(cb, lo + width * static_cast<double>(t + 1)) - std::max(ca, lo + width * static_cast<double>(t));
      if (overlap > 0) h.counts[t] += c * overlap / (cb - ca);
    }
  };
  if (range_ == 0) {
    spread(zeros_, 0, 0);
    return h;
  }
  const size_t k = counts_.size();
  const double w = 2 * range_ / static_cast<double>(k);
  if (absolute) {
    // |x| folds bin k/2 - 1 - j, (-(j+1)w, -jw], onto bin k/2 + j, [jw, (j+1)w).
    for (size_t j = 0; j < k / 2; ++j)
      spread(counts_[k / 2 + j] + counts_[k / 2 - 1 - j], w * static_cast<double>(j), w * static_cast<double>(j + 1));
  } else {
    for (size_t i = 0; i < k; ++i)
      spread(counts_[i], -range_ + w * static_cast<double>(i), -range_ + w * static_cast<double>(i + 1));
  }
  return h;
}

}  // namespace seqto::quant::calib
