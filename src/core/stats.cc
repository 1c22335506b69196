#include "core/stats.h"

#include <algorithm>
#include <cmath>

namespace seqto {

namespace {
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double pos = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}
}  // namespace

LatencyStats Summarize(std::vector<double> samples) {
  LatencyStats s;
  s.runs = static_cast<int>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / static_cast<double>(samples.size());
  double var = 0;
  for (double v : samples) var += (v - s.mean) * (v - s.mean);
  s.stddev = samples.size() > 1 ? std::sqrt(var / static_cast<double>(samples.size() - 1)) : 0;
  s.min = samples.front();
  s.max = samples.back();
  s.p50 = Percentile(samples, 50);
  s.p95 = Percentile(samples, 95);
  return s;
}

bool LatencyUnstable(const LatencyStats& s) { return s.runs > 0 && s.p95 > kUnstableP95OverP50 * s.p50; }

}  // namespace seqto
