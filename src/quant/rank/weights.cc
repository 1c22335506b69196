// STM32's static order (docs/design.md, Error metrics and rankers): total weights
// descending, then weights per output channel ascending, then execution order
// descending. Needs no data. Groups without weights come last.
#include <algorithm>
#include <numeric>

#include "quant/rank/ranker.h"

namespace seqto::quant {

Ranker MakeWeightsRanker() {
  Ranker r;
  r.name = "weights";
  r.description = "STM32's static order: most weights first, then fewest weights per channel, then latest";
  r.rank = [](const AnalysisResult& a, const RankOptions&) -> Expected<std::vector<std::string>> {
    const auto& g = a.groups;
    std::vector<size_t> idx(g.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto per_channel = [&](size_t i) {
      return g[i].output_channels > 0 ? double(g[i].weight_elements) / double(g[i].output_channels)
                                      : double(g[i].weight_elements);
    };
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      if (g[x].weight_elements != g[y].weight_elements) return g[x].weight_elements > g[y].weight_elements;
      if (per_channel(x) != per_channel(y)) return per_channel(x) < per_channel(y);
      return g[x].order > g[y].order;
    });
    std::vector<std::string> names;
    for (size_t i : idx) names.push_back(g[i].name);
    return names;
  };
  return r;
}

}  // namespace seqto::quant
