// The one include/exclude filter for nodes (and for anything else named, such as
// quantization groups): op types, names and globs. The CLI, the QDQ rewriter and the
// tuner all select through it, so a pattern means the same everywhere.
//
// Patterns are exact names or globs ('*' any run of characters, '?' one character,
// '[abc]' / '[a-z]' / '[!a]' one character of a set; '\' escapes the next character).
// A pattern that matches nothing is a user error naming it: a misspelt exclusion must
// not silently quantize the layer the user meant to keep in float.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace seqto::quant {

// True if `text` matches the glob `pattern` as a whole.
bool GlobMatch(std::string_view pattern, std::string_view text);
// True if `pattern` has glob characters (else it is matched as an exact name).
bool IsGlob(std::string_view pattern);

struct NodeFilterSpec {
  std::vector<std::string> op_types;  // empty: every op type (of `supported_op_types`, if given)
  std::vector<std::string> include;   // names or globs; empty: every node
  std::vector<std::string> exclude;   // names or globs
  // How each list is called in error messages (ORT's option names by default; the
  // CLI passes its flags).
  std::string op_types_label = "op_types_to_quantize";
  std::string include_label = "nodes_to_quantize";
  std::string exclude_label = "nodes_to_exclude";
};

class NodeFilter {
 public:
  // One thing the filter can select: a name and its op type.
  struct Item {
    std::string name;
    std::string op_type;
  };

  // Checks the spec against `items`: every include/exclude pattern must match at
  // least one item's name, and every op type must be in `supported_op_types` (when
  // that is not empty). `what` names the items in messages ("node", "group").
  static Expected<NodeFilter> Create(const std::vector<Item>& items, NodeFilterSpec spec,
                                     const std::set<std::string>& supported_op_types = {},
                                     const std::string& what = "node");
  // The items are the graph's nodes.
  static Expected<NodeFilter> ForGraph(const ir::Graph& graph, NodeFilterSpec spec,
                                       const std::set<std::string>& supported_op_types = {});

  // Op type selected (listed, or no list and supported), name included (or no include
  // list) and not excluded.
  bool Selects(const std::string& name, const std::string& op_type) const;
  bool Selects(const ir::Node& node) const { return Selects(node.name, node.op_type); }
  // Only the name lists: included and not excluded (op type not considered).
  bool SelectsName(const std::string& name) const;
  // The op type passes the op-type list (ignoring names).
  bool SelectsOpType(const std::string& op_type) const;
  bool Excludes(const std::string& name) const;

  const NodeFilterSpec& spec() const { return spec_; }

 private:
  static bool MatchesAny(const std::vector<std::string>& patterns, const std::string& name);
  NodeFilterSpec spec_;
  std::set<std::string> op_types_;  // effective op types (empty: any)
};

}  // namespace seqto::quant
