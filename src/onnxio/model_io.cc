#include "onnxio/model_io.h"

#include <google/protobuf/stubs/logging.h>
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/file_util.h"
#include "onnxio/infer_guard.h"
#include "onnxio/proto_convert.h"
#include "onnxio/wire_scan.h"

namespace seqto::onnxio {

namespace fs = std::filesystem;

namespace {

// protobuf logs some parse problems to stderr itself; seqto reports errors as one
// line of its own, so those logs are dropped.
void SilenceProtobufLogs() {
  static const bool once = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)once;
}

// The newest opset of `domain` that this build's ONNX library knows (0 if none).
int64_t KnownOpsetLimit(const std::string& domain) {
  const auto& map = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = map.find(domain.empty() ? onnx::ONNX_DOMAIN : domain);
  return it == map.end() ? 0 : it->second.second;
}

int64_t OpsetOf(const std::map<std::string, int64_t>& opsets, const std::string& domain) {
  auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
  return it == opsets.end() ? 0 : it->second;
}

// Checks every node whose op ONNX defines (at the model's opset) against its schema:
// input and output counts, required inputs, attribute names and types. Kernels and
// ONNX's shape inference rely on this; ops ONNX does not know are left to the
// runtime, which reports them as unsupported.
Status VerifyNodeSchemas(const onnx::GraphProto& g, const std::map<std::string, int64_t>& opsets,
                         const std::vector<std::string>& names, int depth) {
  if (depth > 32) return UserError("subgraphs are nested more than 32 deep");
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string name = i < static_cast<int>(names.size()) ? names[i] : n.name();
    const int64_t opset = OpsetOf(opsets, n.domain());
    const std::string where = "node '" + name + "' (" + n.op_type() + "), opset " + std::to_string(opset);
    for (const auto& a : n.attribute()) {
      std::vector<const onnx::GraphProto*> subgraphs;
      if (a.has_g()) subgraphs.push_back(&a.g());
      for (const auto& sg : a.graphs()) subgraphs.push_back(&sg);
      for (const auto* sg : subgraphs)
        if (Status s = VerifyNodeSchemas(*sg, opsets, {}, depth + 1); !s.ok())
          return std::move(s).WithContext(where + ": attribute '" + a.name() + "'");
    }
    // Opsets newer than this build's ONNX library knows are checked against the newest
    // it knows: seqto's kernels implement at most that version.
    const int64_t limit = KnownOpsetLimit(n.domain());
    if (opset <= 0 || limit <= 0) continue;
    const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(std::min(opset, limit)),
                                                                  n.domain() == "ai.onnx" ? "" : n.domain());
    if (!schema) continue;
    try {
      schema->Verify(n);
    } catch (const std::exception& e) {
      return UserError(where + ": " + e.what() +
                       (opset > limit ? " (checked against opset " + std::to_string(limit) +
                                            ", the newest this build of seqto knows)"
                                      : ""));
    }
  }
  return Status::Ok();
}

// A model newer than this build knows still loads (most ops keep their semantics
// across versions, and each op is checked and run as the newest version seqto
// knows), but the user hears it once per process: that is where a mismatch would
// come from.
void WarnIfNewerThanKnown(const ir::Model& model, const std::string& display_name) {
  static std::atomic<bool> warned{false};
  std::string what;
  if (model.ir_version > onnx::IR_VERSION)
    what = "ir_version " + std::to_string(model.ir_version) + " is newer than the newest seqto knows (" +
           std::to_string(onnx::IR_VERSION) + ")";
  for (const auto& [domain, version] : model.opsets) {
    if (!domain.empty() && domain != "ai.onnx.ml") continue;
    const int64_t limit = KnownOpsetLimit(domain);
    if (version <= limit) continue;
    what += (what.empty() ? "" : "; ") + std::string("opset ") + std::to_string(version) + " of " +
            (domain.empty() ? "ai.onnx" : domain) + " is newer than the newest seqto knows (" + std::to_string(limit) +
            "): its ops are checked and run as that version's";
  }
  if (what.empty() || warned.exchange(true)) return;
  std::fprintf(stderr, "seqto: warning: %s: %s\n", display_name.c_str(), what.c_str());
}

bool KnowsAllOpsets(const ir::Model& model) {
  for (const auto& [domain, version] : model.opsets)
    if (domain.empty() || domain == "ai.onnx.ml")
      if (version > KnownOpsetLimit(domain)) return false;
  return true;
}

}  // namespace

Expected<ir::Model> LoadModelFromBytes(const std::string& bytes, const std::string& base_dir,
                                       const std::string& display_name, const LoadOptions& options) {
  SilenceProtobufLogs();
  const std::string size_text = std::to_string(bytes.size()) + " bytes";
  if (bytes.empty()) return UserError(display_name + ": file is empty");
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    return UserError(display_name + ": file is " + size_text +
                     "; ONNX files cannot exceed 2 GiB (large weights belong in external data)");
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) {
    const WireProblem problem = FindWireProblem(bytes);
    if (problem.found)
      return UserError(display_name + ": not a valid ONNX model: " + problem.what + " at byte offset " +
                       std::to_string(problem.offset) + " (file is " + size_text + ")");
    return UserError(display_name + ": not a valid ONNX model (protobuf parsing failed; file is " + size_text + ")");
  }
  // A file cut at a field boundary parses; what is missing then tells.
  const std::string end = "byte offset " + std::to_string(bytes.size());
  if (!proto.has_graph())
    return UserError(display_name + ": not a valid ONNX model: it has no graph (the file ends at " + end +
                     ": truncated?)");
  if (proto.opset_import_size() == 0) {
    // The graph is complete here, so the model most likely never had opset_import
    // (opset_import follows the graph in the file, so a cut there looks the same).
    if (proto.ir_version() >= 3)
      return UserError(display_name + ": not a valid ONNX model: it imports no opset (ir_version " +
                       std::to_string(proto.ir_version()) +
                       " requires opset_import, e.g. ai.onnx version 13; the file ends at " + end + ")");
    proto.add_opset_import()->set_version(1);  // IR versions 1-2: ai.onnx opset 1 is implied
  }
  FillAttributeTypes(proto.mutable_graph());
  auto model = ModelFromProto(proto, base_dir);
  if (!model) return std::move(model).WithContext(display_name);
  model->path = display_name;
  if (options.name_nodes) model->graph.NameNodes();
  std::vector<std::string> names;
  for (const auto& n : model->graph.nodes) names.push_back(n.name);
  if (Status s = VerifyNodeSchemas(proto.graph(), model->opsets, names, 0); !s.ok())
    return std::move(s).WithContext(display_name);
  // ONNX requires nodes in topological order; some producers do not quite manage.
  if (Status s = model->graph.TopologicalSort(); !s.ok()) return std::move(s).WithContext(display_name);
  // Every value defined before use, produced once: ONNX's shape inference and every
  // later stage rely on it.
  if (options.name_nodes)
    if (Status s = model->graph.Verify(); !s.ok()) return std::move(s).WithContext(display_name);
  if (options.infer_shapes && KnowsAllOpsets(*model)) {
    if (Status s = InferShapes(*model); !s.ok()) return std::move(s).WithContext(display_name);
  }
  WarnIfNewerThanKnown(*model, display_name);
  return model;
}

Expected<ir::Model> LoadModel(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    return UserError(path + ": " + ec.message());
  if (!fs::exists(st)) return UserError(path + ": no such file");
  if (fs::is_directory(st)) return UserError(path + ": is a directory, expected an .onnx file");
  if (!fs::is_regular_file(st)) return UserError(path + ": not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return UserError(path + ": " + ec.message());
  if (size > static_cast<uintmax_t>(INT32_MAX))
    return UserError(path + ": file is " + std::to_string(size) +
                     " bytes; ONNX files cannot exceed 2 GiB (large weights belong in external data)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file: " + std::strerror(errno));
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size && !in.read(bytes.data(), static_cast<std::streamsize>(size)))
    return UserError(path + ": cannot read file (" + std::to_string(in.gcount()) + " of " + std::to_string(size) +
                     " bytes read)");
  const std::string base = fs::path(path).parent_path().string();
  return LoadModelFromBytes(bytes, base.empty() ? "." : base, path, options);
}

namespace {
// seqto's internal ops (com.seqto: the fused and integer kernels the inference passes
// make) exist only inside a session: no other runtime, nor seqto loading the file
// again, knows their domain. Writing one is a bug.
Status CheckNoInternalOps(const ir::Model& model) {
  for (const ir::Node& n : model.graph.nodes)
    if (n.domain == "com.seqto")
      return InternalError(n.Describe() + ": internal op com.seqto." + n.op_type + " in a model being saved");
  return Status::Ok();
}
}  // namespace

Expected<std::string> SerializeModel(const ir::Model& model) {
  SEQTO_RETURN_IF_ERROR(CheckNoInternalOps(model));
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  std::string out;
  if (!proto.SerializeToString(&out))
    return UserError("cannot serialize the model (protobuf refuses messages over 2 GiB; save with external data)");
  return out;
}

Status SaveModel(const ir::Model& model, const std::string& path, const SaveOptions& options) {
  if (Status s = CheckNoInternalOps(model); !s.ok()) return std::move(s).WithContext(path);
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

namespace {

// After inference, finds the top-level node a guard refused (for the message).
std::string FindRefusedNode(const onnx::ModelProto& proto, const ir::Model& model) {
  std::map<std::string, int64_t> ranks;
  auto add = [&](const onnx::ValueInfoProto& v) {
    if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
      ranks[v.name()] = v.type().tensor_type().shape().dim_size();
  };
  for (const auto& v : proto.graph().input()) add(v);
  for (const auto& v : proto.graph().value_info()) add(v);
  for (const auto& v : proto.graph().output()) add(v);
  for (const auto& t : proto.graph().initializer()) ranks[t.name()] = t.dims_size();
  for (const auto& n : proto.graph().node()) {
    NodeView view;
    view.op_type = n.op_type();
    view.domain = n.domain();
    view.num_inputs = static_cast<size_t>(n.input_size());
    view.attribute = [&n](const std::string& name) -> const onnx::AttributeProto* {
      for (const auto& a : n.attribute())
        if (a.name() == name) return &a;
      return nullptr;
    };
    view.input_rank = [&](size_t i) -> int64_t {
      if (i >= static_cast<size_t>(n.input_size())) return -1;
      auto it = ranks.find(n.input(static_cast<int>(i)));
      return it == ranks.end() ? -1 : it->second;
    };
    const InferenceCheck check = CheckNodeForInference(view);
    if (check.kind == InferenceCheck::Kind::kRefuse) {
      const std::string& problem = check.problem;
      auto opset = model.opsets.find(n.domain() == "ai.onnx" ? "" : n.domain());
      return "node '" + n.name() + "' (" + n.op_type() + "), opset " +
             std::to_string(opset == model.opsets.end() ? 0 : opset->second) + ": " + problem;
    }
  }
  return "";
}

}  // namespace

Status InferShapes(ir::Model& model) {
  onnx::ModelProto proto;
  ModelToProto(model, &proto);
  GuardedSchemaRegistry registry;
  try {
    onnx::shape_inference::InferShapes(proto, &registry);
  } catch (const std::exception& e) {
    return UserError(std::string("ONNX shape inference: ") + e.what());
  }
  if (const auto problems = registry.problems(); !problems.empty()) {
    const std::string where = FindRefusedNode(proto, model);
    return UserError(where.empty() ? "a " + problems.front() + " (in a subgraph)" : where);
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
