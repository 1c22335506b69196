// Opening a dataset from a path, whatever its format (dataset.h lists them), with
// labels and preprocessing. Shared by `seqto eval`, `seqto quantize --calib-data`
// and the tuner's config files.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/preprocess.h"

namespace seqto::data {

struct DataOptions {
  // A .npy file of class indices ([N] or [N, 1], any integer dtype) or an MNIST idx
  // labels file; replaces labels the format implies. Empty: none.
  std::string labels_path;
  // A class list (text, one class name per line, label = line index, from 0) for an
  // image folder with class sub-folders: each folder's label is its name's line; a
  // folder not in the list is an error. Without one, folders named by integers get
  // those integers and other names their sorted position (a note on stderr says so).
  // Empty: none.
  std::string classes_path;
  PreprocessSpec preprocess;
  // The shape of the model input the data feeds (with the batch dimension; -1 for
  // unknown extents), if known. Resolves color=auto for images: a model input with
  // 1 channel (axis 1 for nchw, the last axis for nhwc) gets gray, 3 channels RGB.
  std::optional<Shape> input_shape;
};

// Detects the format of `path` (a directory, a .npy file, an idx file, a single
// PNG/JPEG) and opens it. Errors are user errors naming the path.
Expected<std::shared_ptr<Dataset>> OpenDataset(const std::string& path, const DataOptions& options = {});

// Reads a class list (see DataOptions::classes_path): names in line order. Errors
// name the file and line (empty line, duplicate name, empty file).
Expected<std::vector<std::string>> ReadClassList(const std::string& path);

// Reads class labels: a .npy file of integers ([N] or [N, 1]) or an MNIST idx labels
// file (gzipped or not). Negative labels are an error naming the sample.
Expected<std::vector<int64_t>> ReadLabelsFile(const std::string& path);

}  // namespace seqto::data
