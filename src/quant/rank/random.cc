// A seeded random order: the baseline every ranker must beat. The shuffle is
// Fisher-Yates over std::mt19937_64 (whose output the standard fixes), so the order
// is the same on every platform for a given seed.
#include <random>

#include "quant/rank/ranker.h"

namespace seqto::quant {

Ranker MakeRandomRanker() {
  Ranker r;
  r.name = "random";
  r.description = "seeded random order (a baseline)";
  r.rank = [](const AnalysisResult& a, const RankOptions& options) -> Expected<std::vector<std::string>> {
    std::vector<std::string> names;
    for (const auto& g : a.groups) names.push_back(g.name);
    std::mt19937_64 rng(options.seed);
    for (size_t i = names.size(); i > 1; --i) {
      const size_t j = static_cast<size_t>(rng() % i);  // bias is negligible for group counts
      std::swap(names[i - 1], names[j]);
    }
    return names;
  };
  return r;
}

}  // namespace seqto::quant
