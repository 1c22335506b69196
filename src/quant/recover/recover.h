// The recovery pipeline around calibration (quant/recover/technique.h): what
// `seqto quantize`, `seqto analyze` and the tuner call, so a technique behaves the
// same in all of them.
//
//   prepared = QuantPlan::Prepare(float)
//   rewritten = RewriteFloatModel(prepared, options, ctx, record)   // float stage
//   ranges = Calibrate(rewritten, ...)
//   plan = QuantPlan::Create(rewritten, options, ranges)
//   RefinePlan(plan, ctx, record)                                   // plan stage
//   RefinePlanForInt16Activations(plan, ctx, record)                // tuner, int16_activations fallback
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/quantize.h"
#include "quant/recover/technique.h"

namespace seqto::quant::recover {

// Runs the float-stage techniques of options.recovery in the registry's order.
// `record` (a JSON array) gets one object per technique run: name, options, stage,
// seconds and what it did.
Expected<ir::Model> RewriteFloatModel(const ir::Model& prepared, const QuantOptions& options,
                                      const RecoveryContext& ctx, nlohmann::json& record);

// Runs the plan-stage techniques of plan.options().recovery, then stores `record`
// (with theirs appended) in the plan, so every materialized model carries it as the
// "seqto.recovery" metadata.
Status RefinePlan(QuantPlan& plan, const RecoveryContext& ctx, nlohmann::json& record);

// For a plan whose groups may be given 16-bit activations (the tuner's
// int16_activations fallback): runs, after RefinePlan, the plan-stage techniques
// that refine such groups on their own (Technique::refine_plan_int16_activations),
// appending to `record` (stage "plan_int16_activations") and storing it in the plan.
// Does nothing when no technique of the options does this.
Status RefinePlanForInt16Activations(QuantPlan& plan, const RecoveryContext& ctx, nlohmann::json& record);

// Whether the techniques of the options may read the calibration samples (any that
// needs or can use them): callers then pass them in the context.
bool UsesData(const QuantOptions& options);

}  // namespace seqto::quant::recover
