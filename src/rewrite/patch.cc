#include "rewrite/patch.h"

namespace seqto::rewrite {

Status ApplyPatch(ir::Graph& graph, GraphPatch patch, const std::string& pass_name) {
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size() + patch.added_nodes_.size());
  for (auto& n : graph.nodes) {
    if (patch.removed_nodes_.count(n.name)) continue;
    auto it = patch.replaced_nodes_.find(n.name);
    nodes.push_back(it != patch.replaced_nodes_.end() ? std::move(it->second) : std::move(n));
  }
  for (auto& n : patch.added_nodes_) nodes.push_back(std::move(n));
  auto redirect = [&](std::string& value) {
    for (int hops = 0; hops < 64; ++hops) {  // follow chains a -> b -> c
      auto it = patch.redirects_.find(value);
      if (it == patch.redirects_.end()) return;
      value = it->second;
    }
  };
  for (auto& n : nodes)
    for (auto& in : n.inputs)
      if (!in.empty()) redirect(in);
  for (auto& out : graph.outputs) {
    std::string name = out.name;
    redirect(name);
    if (name != out.name) {
      // A graph output keeps its name: rename the producer's output instead.
      for (auto& n : nodes) {
        for (auto& o : n.outputs)
          if (o == name) o = out.name;
        for (auto& in : n.inputs)
          if (in == name) in = out.name;
      }
    }
  }
  graph.nodes = std::move(nodes);
  for (const auto& name : patch.removed_initializers_) graph.initializers.erase(name);
  for (auto& [name, t] : patch.initializers_) graph.initializers[name] = std::move(t);

  // Drop initializers nobody reads (e.g. a folded BatchNormalization's statistics).
  std::set<std::string> read;
  for (const auto& n : graph.nodes)
    for (const auto& in : n.inputs) read.insert(in);
  for (const auto& o : graph.outputs) read.insert(o.name);
  for (auto it = graph.initializers.begin(); it != graph.initializers.end();)
    it = read.count(it->first) ? std::next(it) : graph.initializers.erase(it);

  if (Status s = graph.TopologicalSort(); !s.ok()) return std::move(s).WithContext("pass " + pass_name);
  if (Status s = graph.Verify(); !s.ok())
    return Status(InternalError(s.message())).WithContext("pass " + pass_name + " produced an invalid graph");
  return Status::Ok();
}

UseMap::UseMap(const ir::Graph& graph) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& in : graph.nodes[i].inputs)
      if (!in.empty()) consumers[in].push_back(i);
    for (const auto& out : graph.nodes[i].outputs)
      if (!out.empty()) producer[out] = i;
  }
  for (const auto& o : graph.outputs) graph_outputs.insert(o.name);
}

bool UseMap::SingleUse(const std::string& value) const {
  auto it = consumers.find(value);
  return it != consumers.end() && it->second.size() == 1 && !graph_outputs.count(value);
}

std::map<std::string, Tensor> ConstantValues(const ir::Graph& graph) {
  std::map<std::string, Tensor> constants(graph.initializers.begin(), graph.initializers.end());
  for (const auto& n : graph.nodes) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1) continue;
    auto it = n.attributes.find("value");
    if (it != n.attributes.end() && it->second.type == ir::Attribute::Type::kTensor && it->second.t.defined())
      constants[n.outputs[0]] = it->second.t;
    it = n.attributes.find("value_float");
    if (it != n.attributes.end() && it->second.type == ir::Attribute::Type::kFloat)
      constants[n.outputs[0]] = Tensor::Scalar<float>(it->second.f);
  }
  return constants;
}

}  // namespace seqto::rewrite
