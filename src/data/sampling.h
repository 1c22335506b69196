// Sampling and batching: a seeded subset of a dataset (the same for every model
// compared) and an iterator that decodes it one batch at a time, stacked into
// [B, ...] tensors ready to feed a model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace seqto::data {

// k distinct indices of [0, n), chosen at random without replacement, in ascending
// order (so a subset is read in dataset order). k <= 0 or k >= n: all of [0, n).
//
// The generator is fully specified so the subset is the same on every platform and
// standard library (std::shuffle and std::uniform_int_distribution are not):
//   rng = std::mt19937_64(seed)          // the standard fixes its output sequence
//   a = [0, 1, ..., n-1]
//   for i in 0 .. k-1:                   // partial Fisher-Yates
//     m = n - i
//     do r = rng() while r < (2^64 - m) mod m   // rejection: r mod m is unbiased
//     j = i + r mod m
//     swap(a[i], a[j])
//   return sorted(a[0 .. k-1])
std::vector<int64_t> SampleIndices(int64_t n, int64_t k, uint64_t seed);

// What a consumer (a model input) expects.
struct TargetInput {
  std::string name;
  DType dtype = DType::kUndefined;  // kUndefined: whatever the data gives
  // The full shape, batch dimension first; -1 for unknown extents. nullopt: any.
  std::optional<Shape> shape;
};

struct Batch {
  std::vector<int64_t> indices;         // dataset indices of the rows
  std::map<std::string, Tensor> feeds;  // [B, ...] by input name
  std::vector<int64_t> labels;          // per row; empty when the data has none
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// Decodes the samples of `indices` batch by batch (in parallel within a batch),
// so memory holds one batch at a time.
//
// Binding to the targets: data with input names (ONNX test sets) feeds the targets
// of those names; unnamed data feeds targets by position. Each sample is fitted to
// its target's per-sample shape where only unit dimensions differ (an idx image
// 28x28 feeds a model input [N,1,28,28]), and converted to float32 when the target
// is float32. Without targets, feeds are named "input_0", "input_1", ... (or by the
// data's names) and samples keep their shape and type. A float sample holding NaN or
// an infinity is an error naming the sample and element: metrics, rankings and
// calibration ranges computed from it would look plausible and mean nothing.
class BatchIterator {
 public:
  // Checks the binding and the first sample up front, so a data set that does not
  // fit the model fails before any long run. `indices` must be valid for `dataset`.
  static Expected<std::unique_ptr<BatchIterator>> Create(std::shared_ptr<const Dataset> dataset,
                                                         std::vector<int64_t> indices, int64_t batch_size,
                                                         std::vector<TargetInput> targets = {});

  // Fills the next batch; false (and an empty batch) after the last one. Errors
  // name the sample ("images/3/0042.png: corrupt PNG: ...").
  Expected<bool> Next(Batch& batch);
  // Back to the first batch.
  void Reset() { position_ = 0; }

  int64_t num_samples() const { return static_cast<int64_t>(indices_.size()); }
  int64_t num_batches() const { return (num_samples() + batch_size_ - 1) / batch_size_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t samples_done() const { return position_; }
  // Feed names, in the dataset's input order.
  const std::vector<std::string>& feed_names() const { return feed_names_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  BatchIterator() = default;
  // One sample's tensors, fitted and converted.
  Expected<std::vector<Tensor>> Load(int64_t index) const;

  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
  int64_t batch_size_ = 1;
  int64_t position_ = 0;
  std::vector<std::string> feed_names_;
  std::vector<TargetInput> targets_;  // per dataset input (empty entries: no target)
};

// The shape a sample of shape `sample` takes to fit `target` (a per-sample shape,
// -1 for unknown extents): `sample` itself if it matches, else the same extents
// with unit dimensions inserted or removed; nullopt if it cannot fit.
std::optional<Shape> FitSampleShape(const Shape& sample, const Shape& target);

// A feeds callback over the iterator, the shape of quant::BatchSource
// (std::function<Expected<bool>(runtime::TensorMap&)>): fills `feeds` with the next
// batch and returns true, or returns false at the end.
using FeedSource = std::function<Expected<bool>(std::map<std::string, Tensor>& feeds)>;
FeedSource AsFeedSource(std::shared_ptr<BatchIterator> iterator);

}  // namespace seqto::data
