#include "onnxio/proto_convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace seqto::onnxio {

namespace fs = std::filesystem;

namespace {

// Resolves an external-data location and refuses any that leaves the model's folder
// (absolute paths, "..", or symlinks pointing outside): a model file must not be
// able to make seqto read arbitrary files.
Expected<std::string> ResolveExternalPath(const std::string& base_dir, const std::string& location,
                                          const std::string& tensor_name) {
  const std::string where = "initializer '" + tensor_name + "': external data location '" + location + "'";
  if (base_dir.empty()) return UserError(where + " cannot be resolved: the model was not loaded from a file");
  fs::path rel(location);
  if (location.empty() || rel.is_absolute())
    return UserError(where + " must be a relative path inside the model's folder");
  for (const auto& part : rel.lexically_normal())
    if (part == "..") return UserError(where + " leaves the model's folder");
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
  const fs::path full = fs::weakly_canonical(fs::path(base_dir) / rel, ec);
  if (ec) return UserError(where + ": " + ec.message());
  const auto mismatch = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (mismatch.first != base.end()) return UserError(where + " leaves the model's folder (through a link)");
  return full.string();
}

// Opens the external data of `proto`, checks that [offset, offset + length) lies in
// the file and that length is what the tensor's type and shape need, and reads it
// into `dst` (nbytes bytes).
Status ReadExternalData(const onnx::TensorProto& proto, const std::string& base_dir, void* dst, size_t nbytes) {
  const std::string what = "tensor '" + proto.name() + "'";
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      size_t used = 0;
      if (kv.key() == "location") {
        location = kv.value();
      } else if (kv.key() == "offset") {
        offset = std::stoll(kv.value(), &used);
        if (used != kv.value().size()) throw std::invalid_argument(kv.value());
      } else if (kv.key() == "length") {
        length = std::stoll(kv.value(), &used);
        if (used != kv.value().size()) throw std::invalid_argument(kv.value());
      }
    } catch (...) {
      return UserError(what + ": bad external data field " + kv.key() + "='" + kv.value() + "'");
    }
  }
  SEQTO_ASSIGN_OR_RETURN(std::string path, ResolveExternalPath(base_dir, location, proto.name()));
  if (offset < 0) return UserError(what + ": negative external data offset " + std::to_string(offset));
  if (length >= 0 && static_cast<uint64_t>(length) != nbytes)
    return UserError(what + ": external data length " + std::to_string(length) + " does not match the " +
                     std::to_string(nbytes) + " bytes its type and shape need");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return UserError(what + ": external data file " + path +
                     (fs::exists(path, ec) ? " is not a regular file" : " does not exist"));
  const uintmax_t file_size = fs::file_size(path, ec);
  if (ec) return UserError(what + ": cannot read external data file " + path + ": " + ec.message());
  if (static_cast<uint64_t>(offset) > file_size || nbytes > file_size - static_cast<uint64_t>(offset))
    return UserError(what + ": external data file " + path + " is too short (needs " + std::to_string(nbytes) +
                     " bytes from byte " + std::to_string(offset) + ", file is " + std::to_string(file_size) +
                     " bytes)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(what + ": cannot open external data file " + path);
  in.seekg(offset);
  if (nbytes && !in.read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes)))
    return UserError(what + ": cannot read " + std::to_string(nbytes) + " bytes at byte " + std::to_string(offset) +
                     " of external data file " + path);
  return Status::Ok();
}

template <typename Src, typename Dst>
void CopyField(const google::protobuf::RepeatedField<Src>& field, Dst* out) {
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

// Largest tensor a model may declare (protects against corrupt sizes).
constexpr uint64_t kMaxTensorBytes = 64ull << 30;

}  // namespace

Expected<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir) {
  const DType dtype = static_cast<DType>(proto.data_type());
  const std::string what = "tensor '" + proto.name() + "'";
  if (!IsSupportedDType(dtype)) return UserError(what + ": unsupported data type " + DTypeName(dtype));
  if (proto.has_segment()) return UserError(what + ": segmented tensors are not supported");
  Shape shape(proto.dims().begin(), proto.dims().end());
  // Validate the declared size before allocating anything: a corrupt file must
  // neither overflow the arithmetic nor make us allocate what it does not contain.
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return UserError(what + ": negative dimension " + std::to_string(d));
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(dtype)), &nbytes);
  // Empty only if an extent is 0 (a product that overflowed may wrap to 0: found by fuzzing).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) overflow = false, numel = 0, nbytes = 0;
  if (overflow || nbytes > kMaxTensorBytes) return UserError(what + ": declared size exceeds 64 GiB");
  const std::string describe = DTypeName(dtype) + "[" + ShapeToString(shape) + "]";

  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    Tensor t(dtype, shape, std::make_shared<Storage>(nbytes));
    SEQTO_RETURN_IF_ERROR(ReadExternalData(proto, base_dir, t.raw(), nbytes));
    return t;
  }
  if (proto.has_raw_data()) {
    const std::string& bytes = proto.raw_data();
    if (bytes.size() != nbytes)
      return UserError(what + ": has " + std::to_string(bytes.size()) + " bytes of data, expected " +
                       std::to_string(nbytes) + " for " + describe);
    Tensor t(dtype, shape, std::make_shared<Storage>(nbytes));
    if (nbytes) std::memcpy(t.raw(), bytes.data(), nbytes);
    return t;
  }
  auto check_count = [&](int count) -> Status {
    if (static_cast<uint64_t>(count) != numel)
      return UserError(what + ": has " + std::to_string(count) + " values, expected " + std::to_string(numel) +
                       " for " + describe);
    return Status::Ok();
  };
  int count = 0;
  switch (dtype) {
    case DType::kFloat32:
      count = proto.float_data_size();
      break;
    case DType::kFloat64:
      count = proto.double_data_size();
      break;
    case DType::kInt64:
      count = proto.int64_data_size();
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      count = proto.uint64_data_size();
      break;
    default:
      count = proto.int32_data_size();
      break;
  }
  SEQTO_RETURN_IF_ERROR(check_count(count));
  Tensor t(dtype, shape, std::make_shared<Storage>(nbytes));
  switch (dtype) {
    case DType::kFloat32:
      CopyField(proto.float_data(), t.data<float>());
      break;
    case DType::kFloat64:
      CopyField(proto.double_data(), t.data<double>());
      break;
    case DType::kInt64:
      CopyField(proto.int64_data(), t.data<int64_t>());
      break;
    case DType::kUInt32:
      CopyField(proto.uint64_data(), t.data<uint32_t>());
      break;
    case DType::kUInt64:
      CopyField(proto.uint64_data(), t.data<uint64_t>());
      break;
    case DType::kInt32:
      CopyField(proto.int32_data(), t.data<int32_t>());
      break;
    case DType::kInt16:
      CopyField(proto.int32_data(), t.data<int16_t>());
      break;
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      CopyField(proto.int32_data(), t.data<uint16_t>());
      break;
    case DType::kInt8:
      CopyField(proto.int32_data(), t.data<int8_t>());
      break;
    case DType::kUInt8:
      CopyField(proto.int32_data(), t.data<uint8_t>());
      break;
    case DType::kBool: {
      bool* out = t.data<bool>();
      for (int i = 0; i < proto.int32_data_size(); ++i) out[i] = proto.int32_data(i) != 0;
      break;
    }
    default:
      return UserError(what + ": unsupported data type " + DTypeName(dtype));
  }
  return t;
}

void TensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto) {
  proto->set_name(name);
  proto->set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  proto->set_raw_data(std::string(static_cast<const char*>(tensor.raw()), tensor.nbytes()));
}

namespace {

// A readable name for a type: "float32[2x3]", "sequence(float32[?])", ...
std::string TypeText(const onnx::TypeProto& t, int depth = 0) {
  if (depth > 16) return "...";
  auto elem = [](int32_t e) { return DTypeName(static_cast<DType>(e)); };
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType: {
      std::string s = elem(t.tensor_type().elem_type());
      if (!t.tensor_type().has_shape()) return s + "[?]";
      s += "[";
      for (int i = 0; i < t.tensor_type().shape().dim_size(); ++i) {
        const auto& d = t.tensor_type().shape().dim(i);
        if (i) s += "x";
        s += d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?";
      }
      return s + "]";
    }
    case onnx::TypeProto::kSequenceType:
      return "sequence(" + TypeText(t.sequence_type().elem_type(), depth + 1) + ")";
    case onnx::TypeProto::kMapType:
      return "map(" + elem(t.map_type().key_type()) + ", " + TypeText(t.map_type().value_type(), depth + 1) + ")";
    case onnx::TypeProto::kOptionalType:
      return "optional(" + TypeText(t.optional_type().elem_type(), depth + 1) + ")";
    case onnx::TypeProto::kSparseTensorType:
      return "sparse_tensor(" + elem(t.sparse_tensor_type().elem_type()) + ")";
    default:
      return "unknown type";
  }
}

}  // namespace

Expected<ir::ValueInfo> ValueInfoFromProto(const onnx::ValueInfoProto& p) {
  ir::ValueInfo v;
  v.name = p.name();
  if (!p.has_type()) return v;
  if (!p.type().has_tensor_type()) {
    // Sequences, maps, optionals, ...: kept verbatim (seqto does not compute on them).
    v.other_type = TypeText(p.type());
    v.raw_type_proto = p.type().SerializeAsString();
    return v;
  }
  const auto& tt = p.type().tensor_type();
  v.dtype = static_cast<DType>(tt.elem_type());
  if (tt.has_shape()) {
    std::vector<ir::Dim> dims;
    for (const auto& d : tt.shape().dim()) {
      ir::Dim dim;
      if (d.has_dim_value() && d.dim_value() >= 0)
        dim.value = d.dim_value();
      else if (d.has_dim_param())
        dim.param = d.dim_param();
      dims.push_back(dim);
    }
    v.shape = std::move(dims);
  }
  return v;
}

namespace {

void ValueInfoToProto(const ir::ValueInfo& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  if (!v.is_tensor()) {
    p->mutable_type()->ParseFromString(v.raw_type_proto);
    return;
  }
  if (v.dtype == DType::kUndefined && !v.shape) return;  // no type information
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (v.shape) {
    auto* shape = tt->mutable_shape();
    for (const auto& d : *v.shape) {
      auto* dim = shape->add_dim();
      if (d.known())
        dim->set_dim_value(d.value);
      else if (!d.param.empty())
        dim->set_dim_param(d.param);
    }
  }
}

// The attribute's type; old files (IR version 1-2) may leave it unset, so it is then
// inferred from which field holds a value.
onnx::AttributeProto::AttributeType AttributeTypeOf(const onnx::AttributeProto& a) {
  if (a.type() != onnx::AttributeProto::UNDEFINED) return a.type();
  if (a.has_f()) return onnx::AttributeProto::FLOAT;
  if (a.has_i()) return onnx::AttributeProto::INT;
  if (a.has_s()) return onnx::AttributeProto::STRING;
  if (a.has_t()) return onnx::AttributeProto::TENSOR;
  if (a.has_g()) return onnx::AttributeProto::GRAPH;
  if (a.floats_size()) return onnx::AttributeProto::FLOATS;
  if (a.ints_size()) return onnx::AttributeProto::INTS;
  if (a.strings_size()) return onnx::AttributeProto::STRINGS;
  return onnx::AttributeProto::UNDEFINED;
}

}  // namespace

void FillAttributeTypes(onnx::GraphProto* graph, int depth) {
  if (depth > 64) return;
  for (auto& node : *graph->mutable_node())
    for (auto& a : *node.mutable_attribute()) {
      if (a.type() == onnx::AttributeProto::UNDEFINED) a.set_type(AttributeTypeOf(a));
      if (a.has_g()) FillAttributeTypes(a.mutable_g(), depth + 1);
      for (auto& g : *a.mutable_graphs()) FillAttributeTypes(&g, depth + 1);
    }
}

namespace {

Expected<ir::Attribute> AttributeFromProto(const onnx::AttributeProto& a, const std::string& base_dir) {
  ir::Attribute out;
  using T = ir::Attribute::Type;
  switch (AttributeTypeOf(a)) {
    case onnx::AttributeProto::FLOAT:
      out.type = T::kFloat;
      out.f = a.f();
      break;
    case onnx::AttributeProto::INT:
      out.type = T::kInt;
      out.i = a.i();
      break;
    case onnx::AttributeProto::STRING:
      out.type = T::kString;
      out.s = a.s();
      break;
    case onnx::AttributeProto::TENSOR: {
      if (!IsSupportedDType(static_cast<DType>(a.t().data_type()))) {
        out.type = T::kOther;  // e.g. a string tensor: kept verbatim, an op that needs it will say so
        break;
      }
      out.type = T::kTensor;
      SEQTO_ASSIGN_OR_RETURN(out.t, TensorFromProto(a.t(), base_dir));
      break;
    }
    case onnx::AttributeProto::FLOATS:
      out.type = T::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      out.type = T::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      out.type = T::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::GRAPH:
      out.type = T::kGraph;
      break;
    default:
      // Graph lists, sparse tensors, type protos: kept verbatim so a model round-trips.
      out.type = T::kOther;
      break;
  }
  out.raw_proto = a.SerializeAsString();
  return out;
}

void AttributeToProto(const std::string& name, const ir::Attribute& attr, onnx::AttributeProto* a) {
  using T = ir::Attribute::Type;
  if (attr.type == T::kGraph || attr.type == T::kOther) {
    a->ParseFromString(attr.raw_proto);
    a->set_name(name);
    return;
  }
  a->set_name(name);
  switch (attr.type) {
    case T::kFloat:
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(attr.f);
      break;
    case T::kInt:
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(attr.i);
      break;
    case T::kString:
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(attr.s);
      break;
    case T::kTensor:
      a->set_type(onnx::AttributeProto::TENSOR);
      TensorToProto(attr.t, "", a->mutable_t());
      break;
    case T::kFloats:
      a->set_type(onnx::AttributeProto::FLOATS);
      for (float f : attr.floats) a->add_floats(f);
      break;
    case T::kInts:
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t i : attr.ints) a->add_ints(i);
      break;
    case T::kStrings:
      a->set_type(onnx::AttributeProto::STRINGS);
      for (const auto& s : attr.strings) a->add_strings(s);
      break;
    default:
      break;
  }
}

}  // namespace

Expected<ir::Model> ModelFromProto(const onnx::ModelProto& proto, const std::string& base_dir) {
  ir::Model m;
  m.ir_version = proto.ir_version();
  m.producer_name = proto.producer_name();
  m.producer_version = proto.producer_version();
  for (const auto& op : proto.opset_import()) {
    const std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    if (op.version() < 1)
      return UserError("opset_import: version " + std::to_string(op.version()) + " of domain '" +
                       (domain.empty() ? "ai.onnx" : domain) + "' is not a valid opset");
    if (m.opsets.count(domain))
      return UserError("opset_import: domain '" + (domain.empty() ? "ai.onnx" : domain) + "' is imported twice");
    m.opsets[domain] = op.version();
  }
  for (const auto& kv : proto.metadata_props()) m.metadata[kv.key()] = kv.value();
  if (proto.functions_size() > 0) return UserError("model-local functions are not supported");
  const auto& g = proto.graph();
  ir::Graph& graph = m.graph;
  graph.name = g.name();
  if (g.sparse_initializer_size() > 0) return UserError("sparse initializers are not supported");
  for (const auto& init : g.initializer()) {
    if (init.name().empty()) return UserError("an initializer has no name");
    if (graph.initializers.count(init.name())) return UserError("initializer '" + init.name() + "' is defined twice");
    auto t = TensorFromProto(init, base_dir);
    if (!t) return UserError("initializer" + t.error().message.substr(t.error().message.find(' ')));
    graph.initializers[init.name()] = std::move(*t);
  }
  for (const auto& in : g.input()) {
    if (graph.initializers.count(in.name())) continue;  // old-style: initializers listed as inputs
    SEQTO_ASSIGN_OR_RETURN(ir::ValueInfo v, ValueInfoFromProto(in));
    graph.inputs.push_back(std::move(v));
  }
  for (const auto& out : g.output()) {
    SEQTO_ASSIGN_OR_RETURN(ir::ValueInfo v, ValueInfoFromProto(out));
    graph.outputs.push_back(std::move(v));
  }
  for (const auto& vi : g.value_info()) {
    SEQTO_ASSIGN_OR_RETURN(ir::ValueInfo v, ValueInfoFromProto(vi));
    graph.value_infos.push_back(std::move(v));
  }
  for (const auto& np : g.node()) {
    ir::Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      auto attr = AttributeFromProto(a, base_dir);
      if (!attr)
        return UserError("node '" + n.name + "' (" + n.op_type + "): attribute '" + a.name() +
                         "': " + attr.error().message);
      n.attributes[a.name()] = std::move(*attr);
    }
    graph.nodes.push_back(std::move(n));
  }
  return m;
}

void ModelToProto(const ir::Model& model, onnx::ModelProto* proto, size_t external_threshold,
                  const std::string& data_file, std::string* data_bytes) {
  proto->set_ir_version(model.ir_version);
  proto->set_producer_name(model.producer_name.empty() ? "seqto" : model.producer_name);
  proto->set_producer_version(model.producer_version);
  for (const auto& [domain, version] : model.opsets) {
    auto* op = proto->add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  for (const auto& [k, v] : model.metadata) {
    auto* kv = proto->add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  const ir::Graph& graph = model.graph;
  auto* g = proto->mutable_graph();
  g->set_name(graph.name.empty() ? "main" : graph.name);
  for (const auto& [name, t] : graph.initializers) {
    auto* tp = g->add_initializer();
    if (external_threshold > 0 && data_bytes && t.nbytes() >= external_threshold) {
      tp->set_name(name);
      tp->set_data_type(static_cast<int32_t>(t.dtype()));
      for (int64_t d : t.shape()) tp->add_dims(d);
      tp->set_data_location(onnx::TensorProto::EXTERNAL);
      auto add_kv = [&](const char* k, const std::string& v) {
        auto* kv = tp->add_external_data();
        kv->set_key(k);
        kv->set_value(v);
      };
      add_kv("location", data_file);
      add_kv("offset", std::to_string(data_bytes->size()));
      add_kv("length", std::to_string(t.nbytes()));
      data_bytes->append(static_cast<const char*>(t.raw()), t.nbytes());
      data_bytes->resize((data_bytes->size() + 63) / 64 * 64, '\0');  // keep offsets aligned
    } else {
      TensorToProto(t, name, tp);
    }
  }
  for (const auto& v : graph.inputs) ValueInfoToProto(v, g->add_input());
  if (model.ir_version < 4) {
    // Before IR version 4 every initializer must also be listed as a graph input.
    for (const auto& [name, t] : graph.initializers) {
      const std::string& init_name = name;  // (structured bindings cannot be captured before C++20 compilers catch up)
      if (std::any_of(graph.inputs.begin(), graph.inputs.end(),
                      [&](const ir::ValueInfo& in) { return in.name == init_name; }))
        continue;  // already listed
      ir::ValueInfo v;
      v.name = name;
      v.dtype = t.dtype();
      v.shape.emplace();
      for (int64_t d : t.shape()) v.shape->push_back(ir::Dim{d, ""});
      ValueInfoToProto(v, g->add_input());
    }
  }
  for (const auto& v : graph.outputs) ValueInfoToProto(v, g->add_output());
  for (const auto& v : graph.value_infos) ValueInfoToProto(v, g->add_value_info());
  for (const auto& n : graph.nodes) {
    auto* np = g->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    for (const auto& in : n.inputs) np->add_input(in);
    for (const auto& out : n.outputs) np->add_output(out);
    for (const auto& [name, attr] : n.attributes) AttributeToProto(name, attr, np->add_attribute());
  }
}

}  // namespace seqto::onnxio
