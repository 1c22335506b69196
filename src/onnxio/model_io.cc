#include "onnxio/model_io.h"

#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "onnxio/proto_convert.h"
#include "onnxio/wire_scan.h"

namespace seqto::onnxio {

namespace fs = std::filesystem;

Expected<ir::Model> LoadModelFromBytes(const std::string& bytes, const std::string& base_dir,
                                       const std::string& display_name, const LoadOptions& options) {
  onnx::ModelProto proto;
  if (bytes.empty()) return UserError(display_name + ": file is empty");
  if (!proto.ParseFromString(bytes)) {
    const WireProblem problem = FindWireProblem(bytes);
    if (problem.found)
      return UserError(display_name + ": not a valid ONNX model: " + problem.what + " at byte offset " +
                       std::to_string(problem.offset) + " (file is " + std::to_string(bytes.size()) + " bytes)");
    return UserError(display_name + ": not a valid ONNX model (protobuf parsing failed; file is " +
                     std::to_string(bytes.size()) + " bytes)");
  }
  if (!proto.has_graph()) return UserError(display_name + ": not an ONNX model (no graph)");
  auto model = ModelFromProto(proto, base_dir);
  if (!model) return std::move(model).WithContext(display_name);
  model->path = display_name;
  if (options.name_nodes) model->graph.NameNodes();
  if (options.infer_shapes) {
    if (Status s = InferShapes(*model); !s.ok()) return std::move(s).WithContext(display_name);
  }
  return model;
}

Expected<ir::Model> LoadModel(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return UserError(path + ": is a directory, expected an .onnx file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string base = fs::path(path).parent_path().string();
  return LoadModelFromBytes(ss.str(), base.empty() ? "." : base, path, options);
}

Expected<std::string> SerializeModel(const ir::Model& model) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  std::string out;
  if (!proto.SerializeToString(&out))
    return UserError("cannot serialize the model (protobuf refuses messages over 2 GiB; save with external data)");
  return out;
}

namespace {
Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return UserError(path + ": cannot write file");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return UserError(path + ": write failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return UserError(path + ": cannot rename temporary file into place");
  return Status::Ok();
}
}  // namespace

Status SaveModel(const ir::Model& model, const std::string& path, const SaveOptions& options) {
  onnx::ModelProto proto;
  std::string data_bytes;
  const std::string data_file = fs::path(path).filename().string() + ".data";
  ModelToProto(model, &proto, options.external_data_threshold, data_file, &data_bytes);
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    return UserError(path + ": cannot serialize the model (over 2 GiB: set an external data threshold)");
  if (!data_bytes.empty()) {
    const std::string data_path = (fs::path(path).parent_path() / data_file).string();
    SEQTO_RETURN_IF_ERROR(WriteFileAtomic(data_path, data_bytes));
  }
  return WriteFileAtomic(path, bytes);
}

Expected<std::pair<std::string, Tensor>> LoadTensorFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(ss.str())) return UserError(path + ": not a serialized ONNX TensorProto");
  auto t = TensorFromProto(proto, "");
  if (!t) return std::move(t).WithContext(path).error();
  return std::make_pair(proto.name(), std::move(*t));
}

Status CheckModel(const ir::Model& model) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    return UserError(std::string("ONNX checker: ") + e.what());
  }
  return Status::Ok();
}

Status InferShapes(ir::Model& model) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  try {
    onnx::shape_inference::InferShapes(proto);
  } catch (const std::exception& e) {
    return UserError(std::string("ONNX shape inference: ") + e.what());
  }
  std::vector<ir::ValueInfo> infos;
  for (const auto& vi : proto.graph().value_info()) {
    SEQTO_ASSIGN_OR_RETURN(ir::ValueInfo v, ValueInfoFromProto(vi));
    infos.push_back(std::move(v));
  }
  model.graph.value_infos = std::move(infos);
  return Status::Ok();
}

}  // namespace seqto::onnxio
