// Search strategies: which candidate to evaluate next. Candidate k is the full
// quantization with the first k ranked groups excluded (k = 0: fully quantized,
// k = n: nothing quantized). A strategy is a pure function of the results so far,
// so an interrupted run resumes exactly where it stopped.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace seqto::tune {

// What a strategy sees of an evaluated candidate.
struct CandidateOutcome {
  double accuracy_loss = 0;  // points; lower is better
  double size_bytes = 0;
  double latency_ms = 0;
};

struct SearchOptions {
  size_t groups = 0;          // n
  double threshold = 1.0;     // accuracy loss (points) a candidate must reach
  size_t max_candidates = 0;  // 0: no limit beyond the strategy's own
  // front: stop splitting an interval whose accuracy loss changes by less than this
  // fraction of its range over the evaluated candidates.
  double front_resolution = 0.05;
  // front: loss changes smaller than this (points) count as noise.
  double front_min_change = 0.25;
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;
  // The next k to evaluate, or nullopt when the search is done.
  virtual std::optional<size_t> Next(const std::map<size_t, CandidateOutcome>& done) const = 0;
};

// linear (SeQTO): k = 0, 1, 2, ... until the loss meets the threshold or k = n.
// bisect: the smallest k meeting the threshold, assuming the loss falls as k grows,
//         in O(log n) evaluations.
// front:  k = 0 and k = n, then the midpoint of the interval whose accuracy loss
//         changes most (wide intervals count a little too), until every interval
//         changes little: the trade-off curve in far fewer than n evaluations.
Expected<std::unique_ptr<SearchStrategy>> MakeSearchStrategy(const std::string& name, const SearchOptions& options);
std::vector<std::string> SearchStrategyNames();

}  // namespace seqto::tune
