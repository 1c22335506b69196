// Cross-layer equalization (work in progress).
#include "quant/recover/technique.h"

namespace seqto::quant::recover {

Technique MakeEqualizeTechnique() {
  Technique t;
  t.name = "cle";
  t.description = "cross-layer equalization (not implemented yet)";
  t.rewrite_float = [](const ir::Model&, const RecoverySpec&, const RecoveryContext&,
                       nlohmann::json&) -> Expected<ir::Model> { return UserError("cle is not implemented yet"); };
  return t;
}

}  // namespace seqto::quant::recover
