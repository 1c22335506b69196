// The default ranker: most damaged group first, where damage is measured at the
// model's output.
//
// SeQTO's combined score (normalized xmodel and qdq SQNR) read the right way round
// (lowest = most damaged) was the first design, and is still the fallback when the
// sensitivity passes did not run. The analysis of the bundled MobileNetV2 showed why
// it is not enough on its own: the SQNRs are local. The first convolution (and the
// quantized model input it owns) has the *best* SQNR score of all groups, yet
// reverting it removes 4x more output noise than any other group, because its small
// error is amplified by every layer after it; meanwhile the lowest scores belong to
// the linear-bottleneck projections, whose xmodel SQNR is low mostly because error
// has accumulated upstream. Ranked by score alone, excluding the first 1-8 groups
// left the top-1 disagreement with the float model at 0.9% (random: 0.5-0.7%).
//
// So damage is measured at the output, on the ranking subset. Per group, the
// isolated sensitivity (output loss with only this group quantized) captures
// amplification; groups whose measured damage is equal fall back to SeQTO's score.
//
// Per-group numbers miss how groups interact, and the first positions of the order
// are sets, not groups: what the tuner's k-th candidate loses is the loss with the
// first k groups reverted. The analysis therefore searches for those sets at the
// output (analyze.h): greedy forward selection from the full quantization and
// backward elimination from the float model. Neither is right on both bundled
// models (Fashion-MNIST, SeQTO's settings, 256 ranking samples):
//   - forward is myopic. On ResNet, reverting the stem alone *raises* the output
//     loss by 23% (its error partly cancels later ones) and layer1's two convolutions
//     remove 10% and 1% alone but 24% together; forward takes fc first and reaches
//     the early-layer chain only at steps 6-8, leaving 63% of the full noise after 4
//     reversions where backward (layer1.conv1, layer1.conv2, fc, stem) leaves 45%;
//   - on MobileNetV2, forward leaves less than backward at most of the first 8
//     positions (mean 17.4% against 18.6% of the full noise).
// Both measure the one objective the ranking serves, so damage takes the search
// whose order leaves the lower mean loss over the positions both measured (the
// forward steps), then the other groups by isolated damage. On the 10000 test
// images the chosen search also gives the higher output SQNR at K = 4 and 8 on both
// models, K = 1, 2, 4, 8: ResNet backward 36.3/37.1/39.5/43.4 dB, forward
// 36.7/37.3/38.1/42.7; MobileNetV2 forward 30.4/31.0/32.3/33.8, backward
// 30.4/30.8/32.1/33.1.
//
// Top-1 disagreement after excluding the first K = 1, 2, 4, 8 groups (%, 10000 test
// images): ResNet damage 0.30/0.25/0.23/0.18, seqto-published 0.32/0.44/0.36/0.23,
// random 0.33/0.27/0.29/0.23; MobileNetV2 damage 0.66/0.64/0.47/0.44, published
// 0.66/0.49/0.56/0.57, random 0.66/0.65/0.52/0.55. At these levels the disagreement
// is a count of a few dozen borderline samples and tracks any smooth loss loosely:
// over 655 edited plans of the two models, its rank correlation with the output loss
// among plans of one or two reversions is 0.2-0.5 (ResNet) and 0.55-0.77
// (MobileNetV2), even with the loss taken on all 10000 images.
// MobileNetV2's K = 2 cell is such a case: published's pair (features.0,
// features.3.conv.0) is the best of all 351 pairs on the test set, yet no output
// measure (noise or KL, on the subset or on all 10000 images) prefers it to
// damage's pair, and the two differ on 59 samples, 37 against 22 (McNemar p = 0.07).
#include <algorithm>
#include <cmath>
#include <set>

#include "quant/rank/ranker.h"

namespace seqto::quant {

// Of the two interaction searches, the one whose order leaves the lower mean output
// loss over the first positions both measured (the forward steps); the forward one
// on a tie, whichever ran when only one did, nullptr when neither did.
const std::vector<SearchStep>* BetterSearch(const AnalysisResult& a) {
  if (a.backward.empty()) return a.greedy.empty() ? nullptr : &a.greedy;
  if (a.greedy.empty()) return &a.backward;
  size_t common = 0;
  while (common < a.greedy.size() && common < a.backward.size() && std::isfinite(a.greedy[common].loss) &&
         std::isfinite(a.backward[common].loss))
    ++common;
  if (common == 0) return &a.greedy;
  double forward = 0, backward = 0;
  for (size_t i = 0; i < common; ++i) forward += a.greedy[i].loss, backward += a.backward[i].loss;
  return backward < forward ? &a.backward : &a.greedy;
}

Ranker MakeDamageRanker() {
  Ranker r;
  r.name = "damage";
  r.description =
      "most damaged first: the better of the forward/backward searches at the output, then isolated output loss";
  r.needs_sensitivity = true;
  r.needs_search = true;
  r.rank = [](const AnalysisResult& a, const RankOptions&) -> Expected<std::vector<std::string>> {
    bool measured = !a.groups.empty();
    for (const auto& g : a.groups)
      if (std::isnan(g.sensitivity_isolated)) measured = false;
    if (!measured) return OrderBy(a.groups, [](const GroupAnalysis& g) { return g.seqto_score; });
    // Descending isolated loss; OrderBy sorts ascending and breaks exact ties by
    // execution order, so equal losses are ordered by the score explicitly.
    std::vector<GroupAnalysis> sorted = a.groups;
    std::stable_sort(sorted.begin(), sorted.end(), [](const GroupAnalysis& x, const GroupAnalysis& y) {
      if (x.sensitivity_isolated != y.sensitivity_isolated) return x.sensitivity_isolated > y.sensitivity_isolated;
      const double sx = std::isnan(x.seqto_score) ? 2 : x.seqto_score,
                   sy = std::isnan(y.seqto_score) ? 2 : y.seqto_score;
      if (sx != sy) return sx < sy;
      return x.order < y.order;
    });
    // The interaction search whose order leaves the lower output loss, then the
    // other groups by isolated damage.
    const std::vector<SearchStep>* search = BetterSearch(a);
    std::set<std::string> known, taken;
    for (const auto& g : a.groups) known.insert(g.name);
    std::vector<std::string> names;
    if (search) {
      for (const auto& step : *search) {
        if (!known.count(step.group))
          return InternalError("search step '" + step.group + "' is not a group of the analysis");
        if (!taken.insert(step.group).second) return InternalError("search step '" + step.group + "' appears twice");
        names.push_back(step.group);
      }
    }
    for (const auto& g : sorted)
      if (!taken.count(g.name)) names.push_back(g.name);
    return names;
  };
  return r;
}

}  // namespace seqto::quant
