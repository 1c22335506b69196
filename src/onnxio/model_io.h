// Reading and writing ONNX files: protobuf <-> ir::Model, external data, the ONNX
// checker and ONNX shape inference (both from Debian's libonnx).
#pragma once

#include <string>

#include "core/status.h"
#include "ir/graph.h"

namespace seqto::onnxio {

struct LoadOptions {
  // Give unnamed (or duplicate-named) nodes stable unique names.
  bool name_nodes = true;
  // Run ONNX shape inference and record the inferred types in graph.value_infos.
  bool infer_shapes = true;
};

// Loads a model file. Errors name the file and, for a malformed file, the byte
// offset where parsing failed. External data must lie inside the model's folder.
Expected<ir::Model> LoadModel(const std::string& path, const LoadOptions& options = {});
// Same, from bytes in memory (external data is resolved against `base_dir`, which
// may be empty to refuse external data altogether).
Expected<ir::Model> LoadModelFromBytes(const std::string& bytes, const std::string& base_dir,
                                       const std::string& display_name, const LoadOptions& options = {});

struct SaveOptions {
  // Initializers of at least this many bytes go into `<file>.data` next to the model.
  // 0 keeps everything inside the .onnx file.
  size_t external_data_threshold = 0;
};
// Writes atomically: a temporary file next to the target, then a rename.
Status SaveModel(const ir::Model& model, const std::string& path, const SaveOptions& options = {});
Expected<std::string> SerializeModel(const ir::Model& model);

// Reads a serialized TensorProto (the input_0.pb files of ONNX test data sets).
// Returns the tensor and its name.
Expected<std::pair<std::string, Tensor>> LoadTensorFile(const std::string& path);

// Runs the ONNX checker on the model (as it would be saved).
Status CheckModel(const ir::Model& model);
// Runs ONNX shape inference and replaces graph.value_infos with the result.
Status InferShapes(ir::Model& model);

}  // namespace seqto::onnxio
