// Which samples the tuner evaluates on, calibrates on and ranks with, so that the
// accuracy it reports is measured on samples the quantization never saw.
//
// A calibration or ranking set without its own path draws from the evaluation data,
// from samples held out of evaluation: the held-out pool is a seeded subset of the
// evaluation data as large as the larger of the two sets (at most half the data);
// evaluation uses the other samples (its own `samples` of them, or all). Both sets
// draw from the same pool, so they may share samples with each other, never with
// evaluation. A set with its own path is sampled as given; if it is the evaluation
// data's file, the samples it shares with evaluation are counted (and warned about).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace seqto::tune {

struct SetRequest {
  bool from_eval = false;          // no path of its own: drawn from the evaluation data
  int64_t size = 0;                // samples in its own data (when !from_eval)
  size_t samples = 0;              // how many to use; 0: all
  bool same_file_as_eval = false;  // its own path is the evaluation data's file
};

struct SetSplit {
  std::vector<int64_t> indices;  // ascending
  bool held_out = false;         // drawn from the samples held out of evaluation
  size_t overlap = 0;            // of its samples, how many are also evaluation samples
};

struct DataSplit {
  std::vector<int64_t> eval;
  SetSplit calibration, ranking;
  size_t held_out = 0;  // evaluation-data samples held out for calibration/ranking
  // One line for stderr and report.json: what was held out, what overlaps.
  std::string Describe(int64_t eval_size, size_t eval_samples_asked) const;
};

// `eval_size` samples in the evaluation data, of which `eval_samples` (0: all) are
// wanted. The same inputs give the same split (the seed fixes it).
Expected<DataSplit> SplitData(int64_t eval_size, size_t eval_samples, const SetRequest& calibration,
                              const SetRequest& ranking, uint64_t seed);

}  // namespace seqto::tune
