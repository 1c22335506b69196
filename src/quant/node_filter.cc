#include "quant/node_filter.h"

namespace seqto::quant {

namespace {

// Matches one character against the set starting at pattern[p] == '['. Sets `end`
// to the index after the closing ']'; returns false for `ok` if the set is not closed
// (then '[' is an ordinary character).
bool MatchClass(std::string_view pattern, size_t p, char c, size_t* end, bool* ok) {
  size_t i = p + 1;
  bool negate = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negate = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i];
    if (lo == '\\' && i + 1 < pattern.size()) lo = pattern[++i];
    char hi = lo;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      hi = pattern[i + 2];
      if (hi == '\\' && i + 3 < pattern.size()) {
        hi = pattern[i + 3];
        ++i;
      }
      i += 2;
    }
    if (lo <= c && c <= hi) matched = true;
    ++i;
  }
  if (i >= pattern.size()) {
    *ok = false;
    return false;
  }
  *ok = true;
  *end = i + 1;
  return matched != negate;
}

// Matches pattern[p..] against a single character of text at t; returns the number of
// pattern characters consumed, or 0 if it does not match.
size_t MatchOne(std::string_view pattern, size_t p, char c) {
  const char pc = pattern[p];
  if (pc == '?') return 1;
  if (pc == '\\' && p + 1 < pattern.size()) return pattern[p + 1] == c ? 2 : 0;
  if (pc == '[') {
    size_t end = 0;
    bool ok = false;
    const bool m = MatchClass(pattern, p, c, &end, &ok);
    if (ok) return m ? end - p : 0;
  }
  return pc == c ? 1 : 0;
}

std::string Join(const std::set<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

}  // namespace

bool IsGlob(std::string_view pattern) { return pattern.find_first_of("*?[\\") != std::string_view::npos; }

bool GlobMatch(std::string_view pattern, std::string_view text) {
  // Classic backtracking over the last '*': linear in practice, never recursive.
  size_t p = 0, t = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = ++p;
      star_t = t;
      continue;
    }
    if (p < pattern.size()) {
      const size_t n = MatchOne(pattern, p, text[t]);
      if (n) {
        p += n;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Expected<NodeFilter> NodeFilter::Create(const std::vector<Item>& items, NodeFilterSpec spec,
                                        const std::set<std::string>& supported_op_types, const std::string& what) {
  NodeFilter f;
  for (const auto& op : spec.op_types) {
    if (op.empty()) return UserError(spec.op_types_label + ": empty op type");
    if (!supported_op_types.empty() && !supported_op_types.count(op))
      return UserError(spec.op_types_label + ": '" + op +
                       "' is not a supported op type (supported: " + Join(supported_op_types) + ")");
    f.op_types_.insert(op);
  }
  if (f.op_types_.empty()) f.op_types_ = supported_op_types;
  auto check = [&](const std::vector<std::string>& patterns, const std::string& label) -> Status {
    for (const auto& pattern : patterns) {
      if (pattern.empty()) return UserError(label + ": empty " + what + " name");
      bool found = false;
      for (const auto& item : items)
        if (item.name == pattern || GlobMatch(pattern, item.name)) {
          found = true;
          break;
        }
      if (!found)
        return UserError(label + ": " +
                         (IsGlob(pattern) ? "pattern '" + pattern + "' matches no " + what
                                          : "no " + what + " is named '" + pattern + "'"));
    }
    return Status::Ok();
  };
  SEQTO_RETURN_IF_ERROR(check(spec.include, spec.include_label));
  SEQTO_RETURN_IF_ERROR(check(spec.exclude, spec.exclude_label));
  f.spec_ = std::move(spec);
  return f;
}

Expected<NodeFilter> NodeFilter::ForGraph(const ir::Graph& graph, NodeFilterSpec spec,
                                          const std::set<std::string>& supported_op_types) {
  std::vector<Item> items;
  items.reserve(graph.nodes.size());
  for (const auto& n : graph.nodes) items.push_back({n.name, n.op_type});
  return Create(items, std::move(spec), supported_op_types, "node");
}

bool NodeFilter::MatchesAny(const std::vector<std::string>& patterns, const std::string& name) {
  for (const auto& p : patterns)
    if (p == name || GlobMatch(p, name)) return true;
  return false;
}

bool NodeFilter::SelectsOpType(const std::string& op_type) const {
  return op_types_.empty() || op_types_.count(op_type);
}

bool NodeFilter::Excludes(const std::string& name) const { return MatchesAny(spec_.exclude, name); }

bool NodeFilter::SelectsName(const std::string& name) const {
  if (!spec_.include.empty() && !MatchesAny(spec_.include, name)) return false;
  return !Excludes(name);
}

bool NodeFilter::Selects(const std::string& name, const std::string& op_type) const {
  return SelectsOpType(op_type) && SelectsName(name);
}

}  // namespace seqto::quant
