#include "tune/data_split.h"

#include <algorithm>
#include <iterator>

#include "data/sampling.h"

namespace seqto::tune {

namespace {

// `k` of `pool` (0 or >= its size: all), seeded, ascending.
std::vector<int64_t> Subset(const std::vector<int64_t>& pool, size_t k, uint64_t seed) {
  std::vector<int64_t> out;
  for (int64_t i : data::SampleIndices(static_cast<int64_t>(pool.size()), static_cast<int64_t>(k), seed))
    out.push_back(pool[static_cast<size_t>(i)]);
  return out;
}

size_t Overlap(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> common;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
  return common.size();
}

}  // namespace

Expected<DataSplit> SplitData(int64_t eval_size, size_t eval_samples, const SetRequest& calibration,
                              const SetRequest& ranking, uint64_t seed) {
  DataSplit split;
  const size_t n = static_cast<size_t>(std::max<int64_t>(eval_size, 0));
  // The held-out pool: as large as the larger set drawn from it, at most half the data.
  size_t want = 0;
  for (const SetRequest* r : {&calibration, &ranking})
    if (r->from_eval) want = std::max(want, r->samples == 0 ? n : r->samples);
  if (want > 0 && n < 2)
    return UserError("the evaluation data has " + std::to_string(n) +
                     " sample(s): too few to hold out calibration/ranking samples from it (give data.calibration "
                     "and data.ranking their own path)");
  split.held_out = std::min(want, n / 2);
  const std::vector<int64_t> all = data::SampleIndices(static_cast<int64_t>(n), 0, seed);
  const std::vector<int64_t> held =
      data::SampleIndices(static_cast<int64_t>(n), static_cast<int64_t>(split.held_out), seed);
  std::vector<int64_t> rest;
  std::set_difference(all.begin(), all.end(), held.begin(), held.end(), std::back_inserter(rest));
  if (split.held_out == 0) rest = all;
  split.eval = Subset(rest, eval_samples, seed);

  for (auto [request, out] : {std::pair{&calibration, &split.calibration}, std::pair{&ranking, &split.ranking}}) {
    if (request->from_eval) {
      out->indices = Subset(held, request->samples, seed);
      out->held_out = true;
    } else {
      out->indices = data::SampleIndices(request->size, static_cast<int64_t>(request->samples), seed);
      if (request->same_file_as_eval) out->overlap = Overlap(out->indices, split.eval);
    }
  }
  return split;
}

std::string DataSplit::Describe(int64_t eval_size, size_t eval_samples_asked) const {
  std::string s;
  if (held_out > 0) {
    std::string sets;
    if (calibration.held_out) sets = "calibration (" + std::to_string(calibration.indices.size()) + ")";
    if (ranking.held_out)
      sets += (sets.empty() ? "" : " and ") + std::string("ranking (") + std::to_string(ranking.indices.size()) + ")";
    s = std::to_string(held_out) + " of the evaluation data's " + std::to_string(eval_size) +
        " samples are held out for " + sets + "; evaluation uses " + std::to_string(eval.size()) + " of the other " +
        std::to_string(eval_size - static_cast<int64_t>(held_out));
    if (eval_samples_asked > eval.size()) s += " (fewer than the " + std::to_string(eval_samples_asked) + " asked)";
  }
  return s;
}

}  // namespace seqto::tune
