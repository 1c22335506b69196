// Measured latency costs for the `pareto` ranker: what leaving a group unquantized
// costs on the tuner's own runner, timed rather than modelled.
//
// A MAC share is the wrong latency cost for seqto's engine (measured on MobileNetV2-12
// per-tensor): a float depthwise conv is memory-bound, and each group left float opens
// an island with a dequantize/quantize pair on its (large) border activations, so
// cheap-MAC groups were not cheap. And costs do not add: a group next to an island that
// is already float removes a border instead of adding two.
//
// So the order is built greedily on timings: every shortlisted group alone left float
// (against the fully quantized and the float model) gives its isolated delta; then at
// each step the `lookahead` best groups by recovered loss per cost are re-timed on top
// of the groups already chosen, their marginal delta replaces the isolated one, and the
// best of them is taken. A delta below what the timing resolves (the fully quantized
// model's spread over the rounds, at least 1% of float - int8) counts as that
// resolution, so that noise cannot make a group free. Each set of models is timed in `rounds` interleaved rounds and
// the median counts, so that a slow spell of the machine hits every model alike.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace seqto::tune {

struct MeasuredCostOptions {
  size_t groups = 12;                          // shortlist: the groups with the most recovered loss (0: no timing)
  size_t lookahead = 3;                        // groups re-timed on top of the chosen ones at each step
  int rounds = 3;                              // interleaved timing rounds; the median counts
  double cost_latency = 1.0, cost_size = 1.0;  // weights, as search.cost
};

// Latency in ms (the tuner: the fastest of `runs` runs) of the plan with the named groups left unquantized.
using TimeExcluded = std::function<Expected<double>(const std::set<std::string>& excluded)>;

struct MeasuredStep {
  std::string group;
  double recovered = 0;    // accuracy recovered (RecoveredLoss)
  double isolated_ms = 0;  // alone left float, less the fully quantized model
  double marginal_ms = 0;  // on top of the groups before it (== isolated_ms for the first)
  double size_share = 0;   // share of the quantized weight elements
};

struct MeasuredCostResult {
  double int8_ms = 0, float_ms = 0;  // the fully quantized and the float model (medians)
  double resolution_ms = 0;          // the smallest latency cost counted (see MeasuredParetoOrder)
  std::vector<MeasuredStep> steps;   // the measured greedy order
  std::vector<std::string> order;    // steps, then the rest in the fallback order
  size_t timings = 0;                // models timed (sets x rounds)
};

// `names`, `recovered` and `size_share` are per group, in one order; `fallback_order`
// (every group once, e.g. the MAC-share pareto order) places the groups after the
// measured steps. Errors of `time` are returned as they are.
Expected<MeasuredCostResult> MeasuredParetoOrder(const std::vector<std::string>& names,
                                                 const std::vector<double>& recovered,
                                                 const std::vector<double>& size_share,
                                                 const std::vector<std::string>& fallback_order,
                                                 const TimeExcluded& time, const MeasuredCostOptions& options);

}  // namespace seqto::tune
