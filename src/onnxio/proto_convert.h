// Conversion between ONNX protobuf messages and seqto's ir types.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/status.h"
#include "ir/graph.h"

namespace seqto::onnxio {

// `base_dir` resolves external data; empty refuses it. `what` names the tensor's
// owner for messages.
Expected<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir);
void TensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);

Expected<ir::ValueInfo> ValueInfoFromProto(const onnx::ValueInfoProto& proto);

// Old files (IR versions 1-2) may leave AttributeProto.type unset; this sets it from
// the field that holds the value, in the graph and its subgraphs.
void FillAttributeTypes(onnx::GraphProto* graph, int depth = 0);

Expected<ir::Model> ModelFromProto(const onnx::ModelProto& proto, const std::string& base_dir);
// external_threshold/data_file: initializers of at least that many bytes are
// written to `data_file` (a name relative to the model) and appended to `data_bytes`.
void ModelToProto(const ir::Model& model, onnx::ModelProto* proto, size_t external_threshold = 0,
                  const std::string& data_file = "", std::string* data_bytes = nullptr);

}  // namespace seqto::onnxio
