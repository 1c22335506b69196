#include "eval/pareto.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace seqto {
namespace {

Status Validate(const std::vector<std::vector<double>>& objectives) {
  if (objectives.empty()) return Status::Ok();
  const size_t m = objectives[0].size();
  if (m == 0) return UserError("Pareto: candidate 0 has no objectives");
  for (size_t i = 0; i < objectives.size(); ++i) {
    if (objectives[i].size() != m)
      return UserError("Pareto: candidate " + std::to_string(i) + " has " + std::to_string(objectives[i].size()) +
                       " objectives, candidate 0 has " + std::to_string(m));
    for (size_t j = 0; j < m; ++j) {
      if (!std::isfinite(objectives[i][j]))
        return UserError("Pareto: objective " + std::to_string(j) + " of candidate " + std::to_string(i) +
                         " is not finite");
    }
  }
  return Status::Ok();
}

}  // namespace

bool Dominates(const std::vector<double>& a, const std::vector<double>& b) {
  bool strictly = false;
  for (size_t j = 0; j < a.size() && j < b.size(); ++j) {
    if (a[j] > b[j]) return false;
    if (a[j] < b[j]) strictly = true;
  }
  return strictly;
}

Expected<std::vector<size_t>> ParetoFront(const std::vector<std::vector<double>>& objectives) {
  SEQTO_RETURN_IF_ERROR(Validate(objectives));
  // O(n^2 m): a sweep has at most a few dozen candidates.
  std::vector<size_t> front;
  for (size_t i = 0; i < objectives.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < objectives.size() && !dominated; ++j)
      dominated = j != i && Dominates(objectives[j], objectives[i]);
    if (!dominated) front.push_back(i);
  }
  return front;
}

Expected<std::vector<ParetoEntry>> RankPareto(const std::vector<std::vector<double>>& objectives, size_t top_k) {
  SEQTO_ASSIGN_OR_RETURN(std::vector<size_t> front, ParetoFront(objectives));
  if (objectives.empty()) return std::vector<ParetoEntry>{};
  const size_t m = objectives[0].size();

  // Normalization spans all candidates, not only the front, so a front member's
  // numbers stay comparable with the dominated cycles shown beside it in the report.
  std::vector<double> lo(m), hi(m);
  for (size_t j = 0; j < m; ++j) {
    lo[j] = hi[j] = objectives[0][j];
    for (const auto& o : objectives) {
      lo[j] = std::min(lo[j], o[j]);
      hi[j] = std::max(hi[j], o[j]);
    }
  }

  std::vector<ParetoEntry> entries;
  entries.reserve(front.size());
  for (size_t i : front) {
    ParetoEntry e;
    e.candidate = i;
    e.normalized.resize(m);
    double sumsq = 0;
    for (size_t j = 0; j < m; ++j) {
      const double range = hi[j] - lo[j];
      // The ideal point is the per-objective minimum, which normalizes to 0, so the
      // distance is the norm of the normalized vector.
      e.normalized[j] = range > 0 ? 100.0 * (objectives[i][j] - lo[j]) / range : 0.0;
      sumsq += e.normalized[j] * e.normalized[j];
    }
    e.distance = std::sqrt(sumsq);
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const ParetoEntry& a, const ParetoEntry& b) {
    return a.distance < b.distance || (a.distance == b.distance && a.candidate < b.candidate);
  });
  if (top_k != 0 && entries.size() > top_k) entries.resize(top_k);
  for (size_t r = 0; r < entries.size(); ++r) entries[r].rank = static_cast<int>(r + 1);
  return entries;
}

}  // namespace seqto
