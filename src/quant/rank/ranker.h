// Rankers order quantization groups for the tuner: the first group is the first to
// get its precision back. One file per ranker (rank/<name>.cc) registers itself with
// one line in rank/registry.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/analysis/analyze.h"

namespace seqto::quant {

struct RankOptions {
  uint64_t seed = 0;  // for `random`
  // For `pareto`: the weights of the two costs of leaving a group unquantized
  // (latency: MAC share; size: weight share). Non-negative, not both 0.
  double cost_latency = 1.0;
  double cost_size = 1.0;
};

struct Ranker {
  std::string name;
  std::string description;
  // Which sensitivity passes of the analysis the ranker needs: isolated
  // (needs_sensitivity) and also revert-one (needs_revert_one).
  bool needs_sensitivity = false;
  bool needs_revert_one = false;
  // Whether the ranker uses the analysis's interaction searches (greedy_steps > 0);
  // a caller that runs only this ranker may set greedy_steps = 0 otherwise.
  bool needs_search = false;
  // Group names, first = first to exclude from quantization.
  std::function<Expected<std::vector<std::string>>(const AnalysisResult&, const RankOptions&)> rank;
};

// All rankers, in a stable order; the default is "damage".
const std::vector<Ranker>& Rankers();
const Ranker* FindRanker(const std::string& name);
constexpr const char* kDefaultRanker = "damage";
// "unknown ranker 'x' (known: damage, seqto-published, ...)" on failure.
Expected<const Ranker*> GetRanker(const std::string& name);

// Ranker factories, one per file.
Ranker MakeSeqtoPublishedRanker();
Ranker MakeDamageRanker();
Ranker MakeSensitivityRanker();
Ranker MakeWeightsRanker();
Ranker MakeRandomRanker();
Ranker MakeParetoRanker();

// Of the analysis's two interaction searches, the one `damage` follows (the lower mean
// output loss over the positions both measured); nullptr when neither ran.
const std::vector<SearchStep>* BetterSearch(const AnalysisResult& a);

// `pareto`'s cost of leaving each group unquantized (rank/pareto.cc), in the groups'
// order: cost_latency x (MAC share + 0.01) + cost_size x weight share.
std::vector<double> ExclusionCosts(const std::vector<GroupAnalysis>& groups, const RankOptions& options);

// `pareto`'s accuracy recovered by leaving each group unquantized, in the groups'
// order: the loss drop damage's interaction search measured for its groups, the
// isolated loss (at least 0) for the others.
Expected<std::vector<double>> RecoveredLoss(const AnalysisResult& analysis);

// Orders `groups` by key ascending, ties by execution order (stable, deterministic).
std::vector<std::string> OrderBy(const std::vector<GroupAnalysis>& groups,
                                 const std::function<double(const GroupAnalysis&)>& key);

}  // namespace seqto::quant
