#include "support/fashion_data.h"

#include "data/open_dataset.h"
#include "data/preprocess.h"
#include "data/sampling.h"

namespace seqto::testing {

Expected<FashionSamples> LoadFashionSamples(const std::string& images, int64_t samples, uint64_t seed) {
  data::DataOptions options;
  SEQTO_ASSIGN_OR_RETURN(options.preprocess, data::ParsePreprocessSpec("scale=0.00392157,mean=0.2860,std=0.3530"));
  options.input_shape = Shape{-1, 1, 28, 28};
  SEQTO_ASSIGN_OR_RETURN(auto ds, data::OpenDataset("/usr/share/datasets/fashion-mnist/" + images, options));
  const std::vector<int64_t> indices = data::SampleIndices(ds->size(), samples, seed);
  std::vector<data::TargetInput> targets = {{"input", DType::kFloat32, Shape{-1, 1, 28, 28}}};
  SEQTO_ASSIGN_OR_RETURN(auto it,
                         data::BatchIterator::Create(ds, indices, static_cast<int64_t>(indices.size()), targets));
  data::Batch batch;
  SEQTO_ASSIGN_OR_RETURN(bool more, it->Next(batch));
  if (!more) return UserError("no samples");
  return FashionSamples{batch.feeds.at("input"), batch.labels};
}

}  // namespace seqto::testing
