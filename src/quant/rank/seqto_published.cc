// The order the published SeQTO uses: its combined score (0.5 * normalized xmodel
// SQNR + 0.5 * normalized qdq SQNR) sorted descending. SQNR is quality, so this
// excludes the *least* damaged groups first (docs/design.md, Error metrics and rankers); kept to reproduce
// the paper, not as a good choice.
#include "quant/rank/ranker.h"

namespace seqto::quant {

Ranker MakeSeqtoPublishedRanker() {
  Ranker r;
  r.name = "seqto-published";
  r.description = "SeQTO as published: normalized SQNR score descending (least damaged first)";
  r.rank = [](const AnalysisResult& a, const RankOptions&) -> Expected<std::vector<std::string>> {
    return OrderBy(a.groups, [](const GroupAnalysis& g) { return -g.seqto_score; });
  };
  return r;
}

}  // namespace seqto::quant
