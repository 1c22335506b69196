#include "tune/search.h"

#include <algorithm>
#include <cmath>

namespace seqto::tune {

namespace {

bool Meets(const CandidateOutcome& o, double threshold) { return o.accuracy_loss <= threshold; }

bool BudgetLeft(const std::map<size_t, CandidateOutcome>& done, const SearchOptions& options) {
  return options.max_candidates == 0 || done.size() < options.max_candidates;
}

class LinearSearch : public SearchStrategy {
 public:
  explicit LinearSearch(SearchOptions options) : options_(options) {}
  std::string name() const override { return "linear"; }
  std::optional<size_t> Next(const std::map<size_t, CandidateOutcome>& done) const override {
    for (const auto& [k, o] : done)
      if (Meets(o, options_.threshold)) return std::nullopt;
    if (!BudgetLeft(done, options_)) return std::nullopt;
    for (size_t k = 0; k <= options_.groups; ++k)
      if (!done.count(k)) return k;
    return std::nullopt;
  }

 private:
  SearchOptions options_;
};

class BisectSearch : public SearchStrategy {
 public:
  explicit BisectSearch(SearchOptions options) : options_(options) {}
  std::string name() const override { return "bisect"; }
  std::optional<size_t> Next(const std::map<size_t, CandidateOutcome>& done) const override {
    if (!BudgetLeft(done, options_)) return std::nullopt;
    if (!done.count(0)) return size_t{0};
    if (Meets(done.at(0), options_.threshold)) return std::nullopt;
    const size_t n = options_.groups;
    if (!done.count(n)) return n;
    // lo: the largest k known to fail; hi: the smallest passing k above it.
    size_t lo = 0;
    for (const auto& [k, o] : done)
      if (!Meets(o, options_.threshold)) lo = std::max(lo, k);
    std::optional<size_t> hi;
    for (const auto& [k, o] : done)
      if (k > lo && Meets(o, options_.threshold) && (!hi || k < *hi)) hi = k;
    if (!hi) return std::nullopt;  // even k = n fails (the threshold cannot be met)
    if (*hi - lo <= 1) return std::nullopt;
    return lo + (*hi - lo) / 2;
  }

 private:
  SearchOptions options_;
};

class FrontSearch : public SearchStrategy {
 public:
  explicit FrontSearch(SearchOptions options) : options_(options) {}
  std::string name() const override { return "front"; }
  std::optional<size_t> Next(const std::map<size_t, CandidateOutcome>& done) const override {
    if (!BudgetLeft(done, options_)) return std::nullopt;
    const size_t n = options_.groups;
    if (!done.count(0)) return size_t{0};
    if (!done.count(n)) return n;
    // An interval's change is how much the accuracy loss changes across it, relative
    // to the loss's range over the evaluated candidates. Size and latency are not
    // used: size grows steadily with k (every exclusion adds float weights) and
    // latency is noisy; where the trade-off bends is decided by the loss.
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& [k, o] : done) lo = std::min(lo, o.accuracy_loss), hi = std::max(hi, o.accuracy_loss);
    const double r_loss = hi > lo ? hi - lo : 0.0;
    // Changes below the measurement's resolution (a few samples' worth) are noise:
    // splitting on them would evaluate nearly every k of a flat curve.
    auto change = [&](const CandidateOutcome& a, const CandidateOutcome& b) {
      const double d = std::abs(a.accuracy_loss - b.accuracy_loss);
      if (d < options_.front_min_change) return 0.0;
      return r_loss > 0 ? d / r_loss : 0.0;
    };
    // The widest-changing interval that can still be split; ties: the earlier one.
    double best = options_.front_resolution;
    std::optional<size_t> next;
    for (auto it = done.begin(); std::next(it) != done.end(); ++it) {
      auto nx = std::next(it);
      if (nx->first - it->first <= 1) continue;
      // Weight by the interval's width so a long flat-looking stretch is still probed.
      const double width = double(nx->first - it->first) / double(std::max<size_t>(n, 1));
      const double score = change(it->second, nx->second) + 0.25 * width;
      if (score > best) {
        best = score;
        next = it->first + (nx->first - it->first) / 2;
      }
    }
    return next;
  }

 private:
  SearchOptions options_;
};

}  // namespace

std::vector<std::string> SearchStrategyNames() { return {"linear", "bisect", "front"}; }

Expected<std::unique_ptr<SearchStrategy>> MakeSearchStrategy(const std::string& name, const SearchOptions& options) {
  if (name == "linear") return std::unique_ptr<SearchStrategy>(new LinearSearch(options));
  if (name == "bisect") return std::unique_ptr<SearchStrategy>(new BisectSearch(options));
  if (name == "front") return std::unique_ptr<SearchStrategy>(new FrontSearch(options));
  return UserError("unknown search strategy '" + name + "' (known: linear, bisect, front)");
}

}  // namespace seqto::tune
