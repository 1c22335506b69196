// The in-memory model: a graph of nodes connected by named values. This is seqto's
// own representation, independent of protobuf; onnxio/ converts to and from ONNX.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto::ir {

struct Attribute {
  enum class Type { kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings, kGraph, kOther };
  Type type = Type::kOther;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  // The serialized AttributeProto, kept so that attributes seqto does not model
  // (graphs, sparse tensors, types) survive a load/save round trip.
  std::string raw_proto;
};

// A dimension is either a known extent or a symbolic name ("batch", "N") or unknown.
struct Dim {
  int64_t value = -1;   // -1 when not known
  std::string param{};  // symbolic name, if any
  bool known() const { return value >= 0; }
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  std::optional<std::vector<Dim>> shape;  // nullopt: rank unknown
  // Values that are not plain tensors (sequences, maps, optionals, sparse tensors):
  // a readable type ("sequence(float32)") and the serialized ONNX TypeProto, kept
  // verbatim so the model round-trips. Both empty for tensors.
  std::string other_type{};
  std::string raw_type_proto{};
  bool is_tensor() const { return other_type.empty(); }
  // "float32[batch x 3 x 224 x 224]"
  std::string Describe() const;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;                // "" for ai.onnx
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::map<std::string, Attribute> attributes;

  bool has_attr(const std::string& name) const { return attributes.count(name) != 0; }
  // Typed attribute access: the default if absent, an error naming the node if the
  // attribute has another type.
  Expected<int64_t> attr_int(const std::string& name, int64_t def) const;
  Expected<float> attr_float(const std::string& name, float def) const;
  Expected<std::string> attr_string(const std::string& name, std::string def) const;
  Expected<std::vector<int64_t>> attr_ints(const std::string& name, std::vector<int64_t> def = {}) const;
  Expected<std::vector<float>> attr_floats(const std::string& name, std::vector<float> def = {}) const;
  // "node 'conv3' (Conv)": the prefix of every error about this node.
  std::string Describe() const;
  // Number of inputs actually present (trailing "" inputs don't count).
  size_t num_present_inputs() const;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;        // topologically sorted (Verify checks)
  std::vector<ValueInfo> inputs;  // graph inputs that are not initializers
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_infos;  // intermediate values with known type/shape
  std::map<std::string, Tensor> initializers;

  // Verifies the structure every pass relies on: unique node names, each value
  // produced once, every input defined before use, outputs produced.
  Status Verify() const;
  // Gives every unnamed node a stable, unique name "<op_type>_<index>".
  void NameNodes();
  // Reorders nodes topologically; error on a cycle.
  Status TopologicalSort();
  const ValueInfo* FindValueInfo(const std::string& name) const;
};

struct Model {
  Graph graph;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  int64_t ir_version = 8;
  std::string producer_name;
  std::string producer_version;
  std::map<std::string, std::string> metadata;
  std::string path;  // file it was loaded from, if any (for messages)

  int64_t onnx_opset() const {
    auto it = opsets.find("");
    if (it == opsets.end()) it = opsets.find("ai.onnx");
    return it == opsets.end() ? 0 : it->second;
  }
};

}  // namespace seqto::ir
