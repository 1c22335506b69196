// Cost-aware order: the most accuracy recovered per unit of cost first, so that the
// tuner's candidates (prefixes of the order) trace the accuracy/latency and
// accuracy/size fronts, as AIMET's and Quark's mixed-precision searches do with
// bit-ops.
//
// Accuracy recovered: for the groups of `damage`'s interaction search (the first
// positions), the output loss that search measured each one to remove, after those
// before it were reverted; for the others their isolated output loss (the loss with
// only this group quantized). The isolated loss alone underrates groups whose damage
// shows once others are reverted: on MobileNetV2-12 per-tensor, Conv_90's isolated
// loss is 0.0066 while the search's third step removes 0.0060 of 0.044 with it, and
// an order on isolated losses alone deferred it behind cheap depthwise groups that
// recover little (its front did not reach damage's: 0.5 pt at 5.07 MB against 4.52).
//
// Cost of leaving the group unquantized, as shares of the whole model's:
//   latency: its MAC share, plus a fixed 1% per excluded group for the Q/DQ at the
//            borders of the float island it opens. Per-group latency deltas are not
//            measured: one group's delta (MobileNetV2: 54 groups share 4.5 ms between
//            float and int8 on ONNX Runtime, 0.08 ms each on average) is below what
//            a latency measurement resolves on a machine shared with other work,
//            while MACs are exact and what the latency bound of a selective model
//            (int8_ms + (float_ms - int8_ms) x MAC share) assumes. The tuner's
//            float and fully quantized measurements scale the share to milliseconds
//            (the report shows the bound); the order does not depend on the scale.
//   size:    its share of the quantized weight elements (each becomes float again).
// weighted by RankOptions::cost_latency and cost_size (search.cost in a tune config).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "quant/rank/ranker.h"

namespace seqto::quant {

namespace {

// Fixed latency cost of one excluded group (a share of float_ms - int8_ms): the
// dequantize/quantize pair at each border of the float island.
constexpr double kBorderCost = 0.01;

}  // namespace

std::vector<double> ExclusionCosts(const std::vector<GroupAnalysis>& groups, const RankOptions& options) {
  double macs = 0, weights = 0, known_macs = 0;
  size_t known = 0;
  for (const auto& g : groups) {
    if (g.macs >= 0) known_macs += double(g.macs), ++known;
    weights += double(std::max<int64_t>(g.weight_elements, 0));
  }
  // A group whose MACs are unknown counts as an average one.
  const double unknown_macs = known > 0 ? known_macs / double(known) : 0;
  for (const auto& g : groups) macs += g.macs >= 0 ? double(g.macs) : unknown_macs;
  std::vector<double> costs;
  for (const auto& g : groups) {
    const double m = g.macs >= 0 ? double(g.macs) : unknown_macs;
    const double latency = (macs > 0 ? m / macs : 0) + kBorderCost;
    const double size = weights > 0 ? double(std::max<int64_t>(g.weight_elements, 0)) / weights : 0;
    costs.push_back(options.cost_latency * latency + options.cost_size * size);
  }
  return costs;
}

Expected<std::vector<double>> RecoveredLoss(const AnalysisResult& a) {
  std::vector<double> recovered;
  for (const auto& g : a.groups) recovered.push_back(std::max(g.sensitivity_isolated, 0.0));
  if (const std::vector<SearchStep>* search = BetterSearch(a)) {
    // Each measured step: the loss before it (the full quantization's for the
    // first) less the loss after it.
    double before = a.sensitivity_full_loss;
    for (const SearchStep& step : *search) {
      if (!std::isfinite(step.loss) || !std::isfinite(before)) break;
      auto it =
          std::find_if(a.groups.begin(), a.groups.end(), [&](const GroupAnalysis& g) { return g.name == step.group; });
      if (it == a.groups.end()) return InternalError("search step '" + step.group + "' is not a group of the analysis");
      recovered[static_cast<size_t>(it - a.groups.begin())] = std::max(before - step.loss, 0.0);
      before = step.loss;
    }
  }
  return recovered;
}

Ranker MakeParetoRanker() {
  Ranker r;
  r.name = "pareto";
  r.description =
      "most accuracy recovered per unit of cost first: loss removed (search steps, else isolated) over MAC and size "
      "share";
  r.needs_sensitivity = true;
  r.needs_search = true;
  r.rank = [](const AnalysisResult& a, const RankOptions& o) -> Expected<std::vector<std::string>> {
    for (const auto& g : a.groups)
      if (std::isnan(g.sensitivity_isolated))
        return UserError("ranker 'pareto' needs the sensitivity analysis, which did not run");
    if (!(o.cost_latency >= 0 && o.cost_size >= 0 && o.cost_latency + o.cost_size > 0))
      return InternalError("ranker 'pareto': the cost weights must be non-negative and not both 0");
    const std::vector<double> cost = ExclusionCosts(a.groups, o);
    SEQTO_ASSIGN_OR_RETURN(const std::vector<double> recovered, RecoveredLoss(a));
    std::vector<size_t> idx(a.groups.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto benefit = [&](size_t i) { return recovered[i]; };
    // Descending benefit per cost (a group that costs nothing and helps comes first);
    // ties: the cheaper, then execution order.
    std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
      const double bx = benefit(x), by = benefit(y);
      const double rx = cost[x] > 0 ? bx / cost[x] : (bx > 0 ? INFINITY : 0);
      const double ry = cost[y] > 0 ? by / cost[y] : (by > 0 ? INFINITY : 0);
      if (rx != ry) return rx > ry;
      if (cost[x] != cost[y]) return cost[x] < cost[y];
      return a.groups[x].order < a.groups[y].order;
    });
    std::vector<std::string> names;
    for (size_t i : idx) names.push_back(a.groups[i].name);
    return names;
  };
  return r;
}

}  // namespace seqto::quant
