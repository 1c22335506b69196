// Measured output sensitivity: the groups whose reversion to float removes the most
// output loss come first (revert-one, on the ranking subset or its worst samples as
// NNCF does). The most direct measure of damage, at the price of two model runs per
// group over the subset.
#include <cmath>

#include "quant/rank/ranker.h"

namespace seqto::quant {

Ranker MakeSensitivityRanker() {
  Ranker r;
  r.name = "sensitivity";
  r.description = "revert-one output loss: the group whose reversion helps most first";
  r.needs_sensitivity = true;
  r.needs_revert_one = true;
  r.rank = [](const AnalysisResult& a, const RankOptions&) -> Expected<std::vector<std::string>> {
    for (const auto& g : a.groups)
      if (std::isnan(g.sensitivity_revert_one))
        return UserError("ranker 'sensitivity' needs the sensitivity analysis, which did not run");
    return OrderBy(a.groups, [](const GroupAnalysis& g) { return -g.sensitivity_revert_one; });
  };
  return r;
}

}  // namespace seqto::quant
