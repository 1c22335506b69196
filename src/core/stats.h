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

// A latency whose p95 is more than this many times its p50 varied too much to be
// compared with others: the runs were disturbed (a busy machine, frequency changes).
constexpr double kUnstableP95OverP50 = 1.5;
bool LatencyUnstable(const LatencyStats& s);

}  // namespace seqto
