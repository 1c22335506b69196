// Empirical bias correction (work in progress: registered so the interface builds).
#include "quant/recover/technique.h"

namespace seqto::quant::recover {

Technique MakeBiasCorrectionTechnique() {
  Technique t;
  t.name = "bias_correction";
  t.description = "empirical bias correction (not implemented yet)";
  t.needs_data = true;
  t.static_only = true;
  t.refine_plan = [](QuantPlan&, const RecoverySpec&, const RecoveryContext&, nlohmann::json&) -> Status {
    return UserError("bias_correction is not implemented yet");
  };
  return t;
}

}  // namespace seqto::quant::recover
