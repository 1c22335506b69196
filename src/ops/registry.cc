#include "ops/registry.h"

#include <algorithm>

namespace seqto::ops {

void OpRegistry::Register(OpDef def) {
  auto& list = defs_[{def.domain, def.op_type}];
  list.push_back(std::move(def));
  std::sort(list.begin(), list.end(), [](const OpDef& a, const OpDef& b) { return a.since_version > b.since_version; });
}

const OpDef* OpRegistry::Find(const std::string& domain, const std::string& op_type, int64_t opset) const {
  auto it = defs_.find({domain == "ai.onnx" ? "" : domain, op_type});
  if (it == defs_.end()) return nullptr;
  for (const OpDef& def : it->second)  // newest first
    if (def.since_version <= opset) return &def;
  return nullptr;
}

bool OpRegistry::Has(const std::string& domain, const std::string& op_type) const {
  return defs_.count({domain == "ai.onnx" ? "" : domain, op_type}) != 0;
}

std::vector<std::string> OpRegistry::OpTypes() const {
  std::vector<std::string> out;
  for (const auto& [key, defs] : defs_) out.push_back(key.first.empty() ? key.second : key.first + ":" + key.second);
  return out;
}

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterAllOps(*r);
    return r;
  }();
  return *registry;
}

}  // namespace seqto::ops
