// The data side of running a model over a data set, in one call: open the data for
// the model's inputs (color and layout defaults from the first input's shape), pick
// the seeded subset, and batch it for those inputs. Used by `seqto eval`; the same
// call serves `seqto quantize --calib-data` and the tuner:
//
//   auto feed = data::OpenModelFeed(path, model.graph.inputs, options);
//   quant::BatchSource source = data::AsFeedSource(feed->iterator);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/open_dataset.h"
#include "data/sampling.h"
#include "ir/graph.h"

namespace seqto::data {

// A model input as a batch target: name, dtype, shape (unknown extents -1).
TargetInput TargetFor(const ir::ValueInfo& input);
std::vector<TargetInput> TargetsFor(const std::vector<ir::ValueInfo>& inputs);

struct FeedOptions {
  DataOptions data;     // labels and preprocessing (input_shape is filled in from the model)
  int64_t samples = 0;  // seeded subset of this many samples; 0 (or >= the data size): all
  uint64_t seed = 0;
  int64_t batch = 32;
};

struct ModelFeed {
  std::shared_ptr<Dataset> dataset;
  std::vector<int64_t> indices;             // the samples used, ascending
  std::shared_ptr<BatchIterator> iterator;  // batches of them, bound to the model's inputs
};

// Errors are user errors naming the data path, the sample or the model input.
Expected<ModelFeed> OpenModelFeed(const std::string& path, const std::vector<ir::ValueInfo>& inputs,
                                  const FeedOptions& options);

}  // namespace seqto::data
