// Summary statistics of repeated measurements (latencies).
#pragma once

#include <vector>

namespace seqto {

struct LatencyStats {
  double mean = 0, p50 = 0, p95 = 0, min = 0, max = 0, stddev = 0;
  int runs = 0;
};

// Percentiles use linear interpolation between order statistics (numpy's default).
LatencyStats Summarize(std::vector<double> samples_ms);

}  // namespace seqto
