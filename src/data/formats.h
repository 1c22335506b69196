// Internal to data/: the format readers OpenDataset dispatches to.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/preprocess.h"

namespace seqto::data::internal {

// A .npy file, N x ...
Expected<std::shared_ptr<Dataset>> OpenNpyDataset(const std::string& path, const PreprocessSpec& spec);
// A class list read from a file (DataOptions::classes_path).
struct ClassList {
  std::string path;
  std::vector<std::string> names;  // label = index
};

// A folder of PNG/JPEG images (class sub-folders or flat), or a single image file.
// With a class list, class folders get their names' indices in it.
Expected<std::shared_ptr<Dataset>> OpenImageFolder(const std::string& path, const PreprocessSpec& spec,
                                                   const ClassList* classes = nullptr);
// An MNIST idx data file; its labels file next to it (X-images-idx3-... ->
// X-labels-idx1-...) is used when it exists and `find_labels` is set.
Expected<std::shared_ptr<Dataset>> OpenIdxDataset(const std::string& path, const PreprocessSpec& spec,
                                                  bool find_labels);
// A test_data_set_* folder, or a folder holding several.
Expected<std::shared_ptr<Dataset>> OpenOnnxTestSets(const std::string& path, const PreprocessSpec& spec);

// Prints "seqto: note: <text>" on stderr, once per distinct text in the process
// (the tuner opens the same folder for several data sets).
void NoteOnce(const std::string& text);

// The first bytes of a file, gunzipped if it is gzipped (empty on error).
std::string PeekDecompressed(const std::string& path, size_t n);
// True if the first 4 (decompressed) bytes are an idx magic number.
bool IsIdxHeader(const std::string& head);
// Reads a whole idx file (gzipped or not) into a tensor of its element type.
Expected<Tensor> ReadIdx(const std::string& path);

// Row `index` of a tensor [N, ...], as a tensor [...] (a copy).
Tensor SliceRow(const Tensor& t, int64_t index);

}  // namespace seqto::data::internal
