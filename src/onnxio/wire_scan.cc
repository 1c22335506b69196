#include "onnxio/wire_scan.h"

#include <cstdint>
#include <map>

namespace seqto::onnxio {

namespace {

// The message types of onnx.proto that can nest, and the fields that hold them.
enum class Msg {
  kModel,
  kGraph,
  kNode,
  kAttribute,
  kTensor,
  kSparseTensor,
  kValueInfo,
  kType,
  kTensorType,
  kSequenceType,
  kMapType,
  kOptionalType,
  kSparseTensorType,
  kShape,
  kDim,
  kOpset,
  kStringString,
  kTrainingInfo,
  kFunction,
  kTensorAnnotation,
  kSegment,
  kNone
};

struct FieldInfo {
  const char* name = nullptr;
  Msg nested = Msg::kNone;     // message type of a length-delimited field
  int packed_elem_bytes = -1;  // packed repeated scalars: 0 varint, 4 or 8 fixed; -1 not packed
  bool repeated = false;       // a repeated message field (messages name the index)
};

FieldInfo Field(Msg m, uint64_t f) {
  switch (m) {
    case Msg::kModel:
      switch (f) {
        case 7:
          return {"graph", Msg::kGraph};
        case 8:
          return {"opset_import", Msg::kOpset, -1, true};
        case 14:
          return {"metadata_props", Msg::kStringString, -1, true};
        case 20:
          return {"training_info", Msg::kTrainingInfo, -1, true};
        case 25:
          return {"functions", Msg::kFunction, -1, true};
        case 1:
          return {"ir_version"};
        case 2:
          return {"producer_name"};
        case 3:
          return {"producer_version"};
        case 4:
          return {"domain"};
        case 5:
          return {"model_version"};
        case 6:
          return {"doc_string"};
      }
      break;
    case Msg::kGraph:
      switch (f) {
        case 1:
          return {"node", Msg::kNode, -1, true};
        case 5:
          return {"initializer", Msg::kTensor, -1, true};
        case 15:
          return {"sparse_initializer", Msg::kSparseTensor, -1, true};
        case 11:
          return {"input", Msg::kValueInfo, -1, true};
        case 12:
          return {"output", Msg::kValueInfo, -1, true};
        case 13:
          return {"value_info", Msg::kValueInfo, -1, true};
        case 14:
          return {"quantization_annotation", Msg::kTensorAnnotation, -1, true};
        case 2:
          return {"name"};
        case 10:
          return {"doc_string"};
      }
      break;
    case Msg::kNode:
      switch (f) {
        case 5:
          return {"attribute", Msg::kAttribute, -1, true};
        case 1:
          return {"input"};
        case 2:
          return {"output"};
        case 3:
          return {"name"};
        case 4:
          return {"op_type"};
        case 7:
          return {"domain"};
      }
      break;
    case Msg::kAttribute:
      switch (f) {
        case 5:
          return {"t", Msg::kTensor};
        case 6:
          return {"g", Msg::kGraph};
        case 22:
          return {"sparse_tensor", Msg::kSparseTensor};
        case 14:
          return {"tp", Msg::kType};
        case 7:
          return {"floats", Msg::kNone, 4};
        case 8:
          return {"ints", Msg::kNone, 0};
        case 10:
          return {"tensors", Msg::kTensor, -1, true};
        case 11:
          return {"graphs", Msg::kGraph, -1, true};
        case 23:
          return {"sparse_tensors", Msg::kSparseTensor, -1, true};
        case 15:
          return {"type_protos", Msg::kType, -1, true};
        case 1:
          return {"name"};
        case 2:
          return {"f"};
        case 3:
          return {"i"};
        case 4:
          return {"s"};
        case 9:
          return {"strings"};
        case 20:
          return {"type"};
      }
      break;
    case Msg::kTensor:
      switch (f) {
        case 1:
          return {"dims", Msg::kNone, 0};
        case 3:
          return {"segment", Msg::kSegment};
        case 4:
          return {"float_data", Msg::kNone, 4};
        case 5:
          return {"int32_data", Msg::kNone, 0};
        case 7:
          return {"int64_data", Msg::kNone, 0};
        case 10:
          return {"double_data", Msg::kNone, 8};
        case 11:
          return {"uint64_data", Msg::kNone, 0};
        case 13:
          return {"external_data", Msg::kStringString, -1, true};
        case 2:
          return {"data_type"};
        case 6:
          return {"string_data"};
        case 8:
          return {"name"};
        case 9:
          return {"raw_data"};
        case 14:
          return {"data_location"};
      }
      break;
    case Msg::kSparseTensor:
      switch (f) {
        case 1:
          return {"values", Msg::kTensor};
        case 2:
          return {"indices", Msg::kTensor};
        case 3:
          return {"dims", Msg::kNone, 0};
      }
      break;
    case Msg::kValueInfo:
      if (f == 1) return {"name"};
      if (f == 2) return {"type", Msg::kType};
      break;
    case Msg::kType:
      switch (f) {
        case 1:
          return {"tensor_type", Msg::kTensorType};
        case 4:
          return {"sequence_type", Msg::kSequenceType};
        case 5:
          return {"map_type", Msg::kMapType};
        case 9:
          return {"optional_type", Msg::kOptionalType};
        case 8:
          return {"sparse_tensor_type", Msg::kSparseTensorType};
      }
      break;
    case Msg::kTensorType:
    case Msg::kSparseTensorType:
      if (f == 2) return {"shape", Msg::kShape};
      break;
    case Msg::kSequenceType:
    case Msg::kOptionalType:
      if (f == 1) return {"elem_type", Msg::kType};
      break;
    case Msg::kMapType:
      if (f == 2) return {"value_type", Msg::kType};
      break;
    case Msg::kShape:
      if (f == 1) return {"dim", Msg::kDim, -1, true};
      break;
    case Msg::kTrainingInfo:
      switch (f) {
        case 1:
          return {"initialization", Msg::kGraph};
        case 2:
          return {"algorithm", Msg::kGraph};
        case 3:
          return {"initialization_binding", Msg::kStringString, -1, true};
        case 4:
          return {"update_binding", Msg::kStringString, -1, true};
      }
      break;
    case Msg::kFunction:
      switch (f) {
        case 7:
          return {"node", Msg::kNode, -1, true};
        case 9:
          return {"opset_import", Msg::kOpset, -1, true};
      }
      break;
    case Msg::kTensorAnnotation:
      if (f == 2) return {"quant_parameter_tensor_names", Msg::kStringString, -1, true};
      break;
    default:
      break;
  }
  return {};
}

// The protobuf library refuses messages nested deeper than this.
constexpr int kMaxDepth = 100;

class Scanner {
 public:
  explicit Scanner(std::string_view b) : b_(b) {}

  // Scans the fields of a message of type `m` in b[begin, end). `end_group` is the
  // field number of an open group (the message then ends at its end-group tag).
  WireProblem Scan(size_t& pos, size_t end, Msg m, const std::string& path, int depth, int64_t end_group = -1) {
    if (depth > kMaxDepth) return {true, pos, "messages nested more than 100 deep in " + path};
    std::map<uint64_t, int> counts;
    while (pos < end) {
      const size_t field_start = pos;
      uint64_t tag;
      if (!ReadVarint(pos, end, tag)) return {true, field_start, "truncated field tag in " + path};
      const uint64_t field = tag >> 3, wire = tag & 7;
      if (field == 0) return {true, field_start, "invalid field number 0 in " + path};
      const FieldInfo info = Field(m, field);
      std::string where = path + "." + (info.name ? std::string(info.name) : "field " + std::to_string(field));
      if (info.repeated) where += "[" + std::to_string(counts[field]++) + "]";
      uint64_t value;
      switch (wire) {
        case 0:
          if (!ReadVarint(pos, end, value)) return {true, field_start, "truncated or overlong integer in " + where};
          break;
        case 1:
        case 5: {
          const size_t n = wire == 1 ? 8 : 4;
          if (end - pos < n) return {true, field_start, "truncated fixed-size value in " + where};
          pos += n;
          break;
        }
        case 2: {
          if (!ReadVarint(pos, end, value)) return {true, field_start, "truncated length in " + where};
          if (value > end - pos)
            return {true, field_start,
                    where + " declares " + std::to_string(value) + " bytes but only " + std::to_string(end - pos) +
                        " remain"};
          const size_t field_end = pos + value;
          if (info.nested != Msg::kNone) {
            WireProblem inner = Scan(pos, field_end, info.nested, where, depth + 1);
            if (inner.found) return inner;
          } else if (info.packed_elem_bytes == 0) {
            while (pos < field_end) {
              const size_t item = pos;
              if (!ReadVarint(pos, field_end, value))
                return {true, item, "truncated or overlong integer in packed " + where};
            }
          } else if (info.packed_elem_bytes > 0 && value % info.packed_elem_bytes != 0) {
            return {true, field_start,
                    "packed " + where + " has " + std::to_string(value) + " bytes, not a multiple of " +
                        std::to_string(info.packed_elem_bytes)};
          }
          pos = field_end;
          break;
        }
        case 3: {  // group (unknown fields only): scan to its end-group tag
          WireProblem inner = Scan(pos, end, Msg::kNone, where, depth + 1, static_cast<int64_t>(field));
          if (inner.found) return inner;
          break;
        }
        case 4:
          if (static_cast<int64_t>(field) == end_group) return {};
          return {true, field_start, "unexpected end-group tag (field " + std::to_string(field) + ") in " + path};
        default:
          return {true, field_start, "invalid wire type " + std::to_string(wire) + " in " + where};
      }
    }
    if (end_group >= 0) return {true, pos, "group " + path + " has no end-group tag"};
    return {};
  }

 private:
  bool ReadVarint(size_t& pos, size_t end, uint64_t& value) const {
    value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos >= end) return false;
      const uint8_t byte = static_cast<uint8_t>(b_[pos++]);
      if (shift < 64) value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;  // more than 10 bytes
  }

  std::string_view b_;
};

}  // namespace

WireProblem FindWireProblem(std::string_view bytes) {
  Scanner scanner(bytes);
  size_t pos = 0;
  return scanner.Scan(pos, bytes.size(), Msg::kModel, "model", 0);
}

}  // namespace seqto::onnxio
