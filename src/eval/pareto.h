// Pareto selection of candidates (docs/design.md, Pareto ranking): every objective is
// minimized (the caller negates what should be maximized, e.g. passes accuracy
// loss, not accuracy). Candidate i is objectives[i]; all vectors have the same
// length (>= 1) and finite values.
#pragma once

#include <cstddef>
#include <vector>

#include "core/status.h"

namespace seqto {

// a dominates b: a is no worse in every objective and strictly better in one.
// Identical vectors do not dominate each other (both stay on the front).
bool Dominates(const std::vector<double>& a, const std::vector<double>& b);

// Indices of the non-dominated candidates, ascending. Empty input gives an empty
// front. Errors: vectors of different lengths or of length 0, a NaN or infinity
// (naming the candidate and objective).
Expected<std::vector<size_t>> ParetoFront(const std::vector<std::vector<double>>& objectives);

struct ParetoEntry {
  int rank = 0;                    // 1 = best
  size_t candidate = 0;            // index into objectives
  std::vector<double> normalized;  // each objective min-max normalized to [0, 100]
  double distance = 0;             // Euclidean distance of `normalized` to the ideal point
};

// The non-dominated candidates, best first. Each objective is min-max normalized to
// [0, 100] over ALL candidates (an objective with one value everywhere normalizes to
// 0); the ideal point is the per-objective minimum, i.e. 0 after normalization;
// candidates are ordered by distance to it, equal distances by candidate index.
// At most top_k entries (0 = the whole front). Errors as ParetoFront.
Expected<std::vector<ParetoEntry>> RankPareto(const std::vector<std::vector<double>>& objectives, size_t top_k = 3);

}  // namespace seqto
