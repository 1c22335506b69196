#include "data/model_feed.h"

namespace seqto::data {

TargetInput TargetFor(const ir::ValueInfo& input) {
  TargetInput t;
  t.name = input.name;
  t.dtype = input.dtype;
  if (input.shape) {
    Shape s;
    for (const auto& d : *input.shape) s.push_back(d.known() ? d.value : -1);
    t.shape = std::move(s);
  }
  return t;
}

std::vector<TargetInput> TargetsFor(const std::vector<ir::ValueInfo>& inputs) {
  std::vector<TargetInput> out;
  for (const auto& in : inputs) out.push_back(TargetFor(in));
  return out;
}

Expected<ModelFeed> OpenModelFeed(const std::string& path, const std::vector<ir::ValueInfo>& inputs,
                                  const FeedOptions& options) {
  if (inputs.empty()) return UserError("the model has no inputs to feed");
  const std::vector<TargetInput> targets = TargetsFor(inputs);
  DataOptions data = options.data;
  data.input_shape = targets[0].shape;
  ModelFeed feed;
  SEQTO_ASSIGN_OR_RETURN(feed.dataset, OpenDataset(path, data));
  feed.indices = SampleIndices(feed.dataset->size(), options.samples, options.seed);
  SEQTO_ASSIGN_OR_RETURN(std::unique_ptr<BatchIterator> it,
                         BatchIterator::Create(feed.dataset, feed.indices, options.batch, targets));
  feed.iterator = std::move(it);
  return feed;
}

}  // namespace seqto::data
