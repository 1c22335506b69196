#include <algorithm>
#include <cmath>
#include <numeric>

#include "quant/rank/ranker.h"

namespace seqto::quant {

const std::vector<Ranker>& Rankers() {
  // One line per ranker; the first is listed first in help texts.
  static const std::vector<Ranker> rankers = {
      MakeDamageRanker(),  MakeSeqtoPublishedRanker(), MakeSensitivityRanker(),
      MakeWeightsRanker(), MakeRandomRanker(),         MakeParetoRanker(),
  };
  return rankers;
}

const Ranker* FindRanker(const std::string& name) {
  for (const auto& r : Rankers())
    if (r.name == name) return &r;
  return nullptr;
}

Expected<const Ranker*> GetRanker(const std::string& name) {
  if (const Ranker* r = FindRanker(name)) return r;
  std::string known;
  for (const auto& r : Rankers()) known += (known.empty() ? "" : ", ") + r.name;
  return UserError("unknown ranker '" + name + "' (known: " + known + ")");
}

std::vector<std::string> OrderBy(const std::vector<GroupAnalysis>& groups,
                                 const std::function<double(const GroupAnalysis&)>& key) {
  std::vector<size_t> idx(groups.size());
  std::iota(idx.begin(), idx.end(), 0);
  // NaN keys (a group the metric cannot judge) go last, in execution order.
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const double ka = key(groups[a]), kb = key(groups[b]);
    const bool na = std::isnan(ka), nb = std::isnan(kb);
    if (na != nb) return nb;
    if (!na && ka != kb) return ka < kb;
    return groups[a].order < groups[b].order;
  });
  std::vector<std::string> names;
  for (size_t i : idx) names.push_back(groups[i].name);
  return names;
}

}  // namespace seqto::quant
