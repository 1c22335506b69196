// GraphPatch: the only way passes change a graph. A pass inspects a graph and
// returns a patch (nodes to add, remove or replace, values to redirect,
// initializers to set); ApplyPatch executes it, restores topological order and
// verifies the result, so a buggy pass fails loudly at the pass that broke it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace seqto::rewrite {

class GraphPatch {
 public:
  void RemoveNode(const std::string& node_name) { removed_nodes_.insert(node_name); }
  // Replaces the node with the same name.
  void ReplaceNode(ir::Node node) { replaced_nodes_[node.name] = std::move(node); }
  void AddNode(ir::Node node) { added_nodes_.push_back(std::move(node)); }
  // Every reader of `from` (nodes and graph outputs) reads `to` instead.
  void RedirectValue(const std::string& from, const std::string& to) { redirects_[from] = to; }
  void SetInitializer(const std::string& name, Tensor value) { initializers_[name] = std::move(value); }
  void RemoveInitializer(const std::string& name) { removed_initializers_.insert(name); }

  bool empty() const {
    return removed_nodes_.empty() && replaced_nodes_.empty() && added_nodes_.empty() && redirects_.empty() &&
           initializers_.empty() && removed_initializers_.empty();
  }

 private:
  friend Status ApplyPatch(ir::Graph& graph, GraphPatch patch, const std::string& pass_name);
  std::set<std::string> removed_nodes_;
  std::map<std::string, ir::Node> replaced_nodes_;
  std::vector<ir::Node> added_nodes_;
  std::map<std::string, std::string> redirects_;
  std::map<std::string, Tensor> initializers_;
  std::set<std::string> removed_initializers_;
};

// Applies the patch, re-sorts, drops initializers no node reads any more, and
// verifies the graph. Errors name the pass.
Status ApplyPatch(ir::Graph& graph, GraphPatch patch, const std::string& pass_name);

// Who reads each value: consumers by value name (node indices), plus graph outputs.
struct UseMap {
  explicit UseMap(const ir::Graph& graph);
  std::map<std::string, std::vector<size_t>> consumers;
  std::map<std::string, size_t> producer;
  std::set<std::string> graph_outputs;
  // True when `value` is read by exactly one node and is not a graph output.
  bool SingleUse(const std::string& value) const;
};

// The values a graph holds as constants: its initializers and the outputs of its
// ai.onnx Constant nodes (`value`, or `value_float` as a scalar), by value name.
std::map<std::string, Tensor> ConstantValues(const ir::Graph& graph);

}  // namespace seqto::rewrite
