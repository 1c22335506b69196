#include "tune/measured_cost.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/stats.h"

namespace seqto::tune {

namespace {

// Median latency of each set: `rounds` rounds, each timing every set once in turn.
// `spread` (if given) receives the first set's highest less lowest time over the rounds.
Expected<std::vector<double>> InterleavedMedians(const std::vector<std::set<std::string>>& sets,
                                                 const TimeExcluded& time, int rounds, size_t& timings,
                                                 double* spread = nullptr) {
  std::vector<std::vector<double>> samples(sets.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < sets.size(); ++i) {
      SEQTO_ASSIGN_OR_RETURN(double ms, time(sets[i]));
      samples[i].push_back(ms);
      ++timings;
    }
  std::vector<double> medians;
  for (const auto& s : samples) {
    const LatencyStats stats = Summarize(s);
    medians.push_back(stats.p50);
    if (spread && medians.size() == 1) *spread = stats.max - stats.min;
  }
  return medians;
}

}  // namespace

Expected<MeasuredCostResult> MeasuredParetoOrder(const std::vector<std::string>& names,
                                                 const std::vector<double>& recovered,
                                                 const std::vector<double>& size_share,
                                                 const std::vector<std::string>& fallback_order,
                                                 const TimeExcluded& time, const MeasuredCostOptions& o) {
  const size_t n = names.size();
  if (recovered.size() != n || size_share.size() != n)
    return InternalError("measured costs: recovered loss and size shares must have one value per group");
  if (o.rounds < 1) return InternalError("measured costs: rounds must be >= 1");
  if (fallback_order.size() != n || std::set<std::string>(fallback_order.begin(), fallback_order.end()) !=
                                        std::set<std::string>(names.begin(), names.end()))
    return InternalError("measured costs: the fallback order does not name every group once");
  if (!(o.cost_latency >= 0 && o.cost_size >= 0 && o.cost_latency + o.cost_size > 0))
    return InternalError("measured costs: the cost weights must be non-negative and not both 0");
  MeasuredCostResult res;
  // Shortlist: the groups with the most recovered loss (a group that recovers nothing
  // is never worth its cost); ties in the groups' order.
  std::vector<size_t> shortlist;
  for (size_t i = 0; i < n; ++i)
    if (recovered[i] > 0) shortlist.push_back(i);
  std::stable_sort(shortlist.begin(), shortlist.end(), [&](size_t a, size_t b) { return recovered[a] > recovered[b]; });
  if (shortlist.size() > o.groups) shortlist.resize(o.groups);
  if (shortlist.empty()) {
    res.order = fallback_order;
    return res;
  }
  // Isolated deltas, with the fully quantized and the float model in the same rounds.
  std::vector<std::set<std::string>> sets = {{}, std::set<std::string>(names.begin(), names.end())};
  for (size_t i : shortlist) sets.push_back({names[i]});
  double int8_spread = 0;
  SEQTO_ASSIGN_OR_RETURN(std::vector<double> t, InterleavedMedians(sets, time, o.rounds, res.timings, &int8_spread));
  res.int8_ms = t[0];
  res.float_ms = t[1];
  // Latency as a share of what the whole model gains from int8 (as size is a share of
  // the weights), so the two weights compare like quantities.
  const double span = std::max(res.float_ms - res.int8_ms, 1e-9);
  // What a timing resolves: the fully quantized model's own spread over the rounds, and
  // never less than 1% of the span. A delta below it cannot be told from noise, so it
  // costs the resolution, not nothing: otherwise a group that recovers little but
  // times at or below 0 by chance jumps ahead of the groups that matter (MobileNetV2-12
  // on a loaded machine: Conv_18, 7% of the recoverable loss, came second), while
  // among groups at the floor the order falls back on the accuracy they recover.
  res.resolution_ms = std::max(int8_spread, 0.01 * span);
  std::map<size_t, double> isolated, estimate;
  for (size_t s = 0; s < shortlist.size(); ++s) isolated[shortlist[s]] = estimate[shortlist[s]] = t[2 + s] - t[0];
  // Recovered loss per cost; a delta below the resolution (noise, or a border removed)
  // costs the resolution.
  auto ratio = [&](size_t i) {
    const double cost = o.cost_latency * std::max(estimate[i], res.resolution_ms) / span + o.cost_size * size_share[i];
    return cost > 0 ? recovered[i] / cost : INFINITY;
  };
  auto better = [&](size_t a, size_t b) {
    const double ra = ratio(a), rb = ratio(b);
    if (ra != rb) return ra > rb;
    return a < b;
  };
  std::vector<size_t> remaining = shortlist;
  std::set<std::string> chosen;
  while (!remaining.empty()) {
    std::stable_sort(remaining.begin(), remaining.end(), better);
    const size_t look = std::min(std::max<size_t>(o.lookahead, 1), remaining.size());
    if (!chosen.empty()) {  // the first step's costs are the isolated ones, just timed
      std::vector<std::set<std::string>> step_sets = {chosen};
      for (size_t j = 0; j < look; ++j) {
        step_sets.push_back(chosen);
        step_sets.back().insert(names[remaining[j]]);
      }
      SEQTO_ASSIGN_OR_RETURN(std::vector<double> st, InterleavedMedians(step_sets, time, o.rounds, res.timings));
      for (size_t j = 0; j < look; ++j) estimate[remaining[j]] = st[1 + j] - st[0];
    }
    const auto best = std::min_element(remaining.begin(), remaining.begin() + static_cast<long>(look), better);
    const size_t i = *best;
    res.steps.push_back({names[i], recovered[i], isolated[i], estimate[i], size_share[i]});
    chosen.insert(names[i]);
    remaining.erase(best);
  }
  for (const auto& s : res.steps) res.order.push_back(s.group);
  for (const auto& g : fallback_order)
    if (!chosen.count(g)) res.order.push_back(g);
  if (res.order.size() != n) return InternalError("measured costs: the fallback order does not name every group once");
  return res;
}

}  // namespace seqto::tune
