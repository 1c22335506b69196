// Datasets: indexed collections of model inputs, optionally with class labels.
// OpenDataset (open_dataset.h) detects the format of a path and returns one of:
//   - a .npy file, N x ... (any numeric dtype; float32 and uint8 are the usual ones)
//   - an image folder (PNG, JPEG): class sub-folders give labels, a flat folder none
//   - an ONNX test_data_set_* folder (input_0.pb, ...), or a folder of them
//   - MNIST idx files (gzipped or not), with the labels file next to the images
// Samples are produced on demand (Get), so a large image folder is never in memory
// at once; idx files are read row by row (see Prefetch); the npy and test-set formats
// are read into memory when opened.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto::data {

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples.
  virtual int64_t size() const = 0;
  // Names of the model inputs one sample feeds, in order. An empty name means
  // "by position" (every format but ONNX test sets, whose files carry input names).
  virtual std::vector<std::string> input_names() const { return {""}; }

  // The sample's input tensors (one per input_names() entry), without a batch
  // dimension, preprocessed. Thread-safe: samples may be decoded in parallel.
  // Errors name the file (and the sample index when the file holds many samples).
  virtual Expected<std::vector<Tensor>> Get(int64_t index) const = 0;
  // Reads the samples `indices` ahead where the format cannot seek cheaply (a gzipped
  // idx file: one pass, keeping only those); Get works without it. BatchIterator
  // calls it with the samples a run will use.
  virtual Status Prefetch(const std::vector<int64_t>& indices) const {
    (void)indices;
    return Status::Ok();
  }
  // Where sample `index` comes from ("images/3/0042.png", "data.npy[17]"), for messages.
  virtual std::string SampleName(int64_t index) const = 0;

  bool has_labels() const { return !labels_.empty(); }
  // Class index of a sample (valid only if has_labels()).
  int64_t label(int64_t index) const { return labels_[static_cast<size_t>(index)]; }
  const std::vector<int64_t>& labels() const { return labels_; }
  // Class names where the format has them (image class folders), else empty.
  const std::vector<std::string>& class_names() const { return class_names_; }

  // One line: "image folder 'x/' (10000 images, 10 classes)".
  virtual std::string description() const = 0;
  // Where the labels came from ("class folders", "labels.npy"), empty if none.
  const std::string& labels_source() const { return labels_source_; }

  // Replaces the labels (from --labels); size must equal size().
  void SetLabels(std::vector<int64_t> labels, std::string source) {
    labels_ = std::move(labels);
    labels_source_ = std::move(source);
  }

 protected:
  std::vector<int64_t> labels_;
  std::vector<std::string> class_names_;
  std::string labels_source_;
};

}  // namespace seqto::data
