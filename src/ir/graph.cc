#include "ir/graph.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace seqto::ir {

std::string ValueInfo::Describe() const {
  if (!other_type.empty()) return other_type;
  if (dtype == DType::kUndefined && !shape) return "unknown type";
  std::string s = (dtype == DType::kUndefined ? std::string("?") : DTypeName(dtype)) + "[";
  if (!shape) return s + "?]";
  for (size_t i = 0; i < shape->size(); ++i) {
    if (i) s += "x";
    const Dim& d = (*shape)[i];
    s += d.known() ? std::to_string(d.value) : (d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

std::string Node::Describe() const { return "node '" + name + "' (" + op_type + ")"; }

size_t Node::num_present_inputs() const {
  size_t n = inputs.size();
  while (n > 0 && inputs[n - 1].empty()) --n;
  return n;
}

namespace {
const char* TypeName(Attribute::Type t) {
  switch (t) {
    case Attribute::Type::kFloat:
      return "float";
    case Attribute::Type::kInt:
      return "int";
    case Attribute::Type::kString:
      return "string";
    case Attribute::Type::kTensor:
      return "tensor";
    case Attribute::Type::kFloats:
      return "floats";
    case Attribute::Type::kInts:
      return "ints";
    case Attribute::Type::kStrings:
      return "strings";
    case Attribute::Type::kGraph:
      return "graph";
    default:
      return "other";
  }
}
}  // namespace

#define SEQTO_ATTR_GETTER(Ret, Method, TypeEnum, field)                                                  \
  Expected<Ret> Node::Method(const std::string& attr, Ret def) const {                                   \
    auto it = attributes.find(attr);                                                                     \
    if (it == attributes.end()) return def;                                                              \
    if (it->second.type != Attribute::Type::TypeEnum)                                                    \
      return UserError(Describe() + ": attribute '" + attr + "' has type " + TypeName(it->second.type) + \
                       ", expected " + TypeName(Attribute::Type::TypeEnum));                             \
    return it->second.field;                                                                             \
  }

SEQTO_ATTR_GETTER(int64_t, attr_int, kInt, i)
SEQTO_ATTR_GETTER(float, attr_float, kFloat, f)
SEQTO_ATTR_GETTER(std::string, attr_string, kString, s)
SEQTO_ATTR_GETTER(std::vector<int64_t>, attr_ints, kInts, ints)
SEQTO_ATTR_GETTER(std::vector<float>, attr_floats, kFloats, floats)
#undef SEQTO_ATTR_GETTER

Status Graph::Verify() const {
  std::unordered_set<std::string> defined;
  for (const auto& v : inputs) defined.insert(v.name);
  for (const auto& [name, t] : initializers) defined.insert(name);
  std::unordered_set<std::string> node_names;
  for (const Node& n : nodes) {
    if (n.name.empty()) return InternalError("graph: a " + n.op_type + " node has no name");
    if (!node_names.insert(n.name).second) return UserError("graph: node name '" + n.name + "' is used twice");
    for (const auto& in : n.inputs)
      if (!in.empty() && !defined.count(in))
        return UserError(n.Describe() + ": input '" + in +
                         "' is not produced by any earlier node, input or initializer");
    for (const auto& out : n.outputs) {
      if (out.empty()) continue;
      if (!defined.insert(out).second)
        return UserError(n.Describe() + ": output '" + out + "' is already produced elsewhere");
    }
  }
  for (const auto& o : outputs)
    if (!defined.count(o.name)) return UserError("graph: output '" + o.name + "' is never produced");
  return Status::Ok();
}

void Graph::NameNodes() {
  std::unordered_set<std::string> used;
  for (const Node& n : nodes)
    if (!n.name.empty()) used.insert(n.name);
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (!n.name.empty() && seen.insert(n.name).second) continue;  // keep first use of a name
    // Unnamed or duplicate: derive from op type and position, stable across loads.
    std::string base = n.name.empty() ? n.op_type + "_" + std::to_string(i) : n.name + "_" + std::to_string(i);
    std::string candidate = base;
    for (int k = 1; used.count(candidate); ++k) candidate = base + "_" + std::to_string(k);
    n.name = candidate;
    used.insert(candidate);
    seen.insert(candidate);
  }
}

Status Graph::TopologicalSort() {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::vector<int> state(nodes.size(), 0);  // 0 new, 1 in progress, 2 done
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  // Iterative DFS keeps the original order where dependencies allow it.
  for (size_t root = 0; root < nodes.size(); ++root) {
    if (state[root] == 2) continue;
    std::vector<std::pair<size_t, size_t>> stack{{root, 0}};
    state[root] = 1;
    while (!stack.empty()) {
      auto& [idx, next_input] = stack.back();
      const Node& n = nodes[idx];
      if (next_input < n.inputs.size()) {
        const std::string& in = n.inputs[next_input++];
        auto it = producer.find(in);
        if (in.empty() || it == producer.end()) continue;
        if (state[it->second] == 1) return UserError(n.Describe() + ": the graph has a cycle through '" + in + "'");
        if (state[it->second] == 0) {
          state[it->second] = 1;
          stack.push_back({it->second, 0});
        }
        continue;
      }
      state[idx] = 2;
      sorted.push_back(std::move(nodes[idx]));
      stack.pop_back();
    }
  }
  nodes = std::move(sorted);
  return Status::Ok();
}

const ValueInfo* Graph::FindValueInfo(const std::string& name) const {
  for (const auto* list : {&inputs, &outputs, &value_infos})
    for (const auto& v : *list)
      if (v.name == name) return &v;
  return nullptr;
}

}  // namespace seqto::ir
