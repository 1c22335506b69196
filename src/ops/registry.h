// The op registry: which ops seqto can run, and how to build their kernels.
// Adding an op = one file under ops/<family>/ plus one line X(<Op>) in that
// family's ops.inc (all_ops.cc includes every ops.inc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ops/op.h"

namespace seqto::ops {

class OpRegistry {
 public:
  void Register(OpDef def);
  // The implementation for (domain, op_type) that handles `opset`, or nullptr.
  const OpDef* Find(const std::string& domain, const std::string& op_type, int64_t opset) const;
  bool Has(const std::string& domain, const std::string& op_type) const;
  // "Conv", "com.microsoft:Foo", ... sorted.
  std::vector<std::string> OpTypes() const;

  // The registry with every built-in op (built on first use).
  static const OpRegistry& Global();

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpDef>> defs_;
};

// Registers every built-in op (defined in all_ops.cc).
void RegisterAllOps(OpRegistry& registry);

}  // namespace seqto::ops
