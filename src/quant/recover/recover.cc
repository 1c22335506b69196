#include "quant/recover/recover.h"

#include <chrono>
#include <cmath>
#include <map>

#include "quant/analysis/incremental.h"
#include "runtime/session.h"

namespace seqto::quant::recover {

using nlohmann::json;

namespace {

// The specs of `options`, in the registry's order (the order they run).
std::vector<std::pair<const Technique*, const RecoverySpec*>> InRunOrder(const QuantOptions& options) {
  std::vector<std::pair<const Technique*, const RecoverySpec*>> out;
  for (const auto& t : Techniques())
    for (const auto& spec : options.recovery)
      if (spec.name == t.name) out.push_back({&t, &spec});
  return out;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

Status CheckData(const Technique& t, const RecoveryContext& ctx) {
  if (t.needs_data && (!ctx.calibration || ctx.calibration->num_batches == 0))
    return UserError("recovery technique '" + t.name + "' needs calibration data");
  return Status::Ok();
}

}  // namespace

bool UsesData(const QuantOptions& options) {
  for (const auto& [t, spec] : InRunOrder(options))
    if (t->needs_data || t->uses_data) return true;
  return false;
}

Expected<ir::Model> RewriteFloatModel(const ir::Model& prepared, const QuantOptions& options,
                                      const RecoveryContext& ctx, json& record) {
  SEQTO_RETURN_IF_ERROR(CheckRecoverySpecs(options));
  if (!record.is_array()) record = json::array();
  ir::Model model = prepared;
  RecoveryContext with_options = ctx;
  with_options.options = &options;
  for (const auto& [t, spec] : InRunOrder(options)) {
    if (!t->rewrite_float) continue;
    SEQTO_RETURN_IF_ERROR(CheckData(*t, ctx));
    const auto start = std::chrono::steady_clock::now();
    json what = json::object();
    SEQTO_ASSIGN_OR_RETURN(model, t->rewrite_float(model, *spec, with_options, what));
    json entry = RecoverySpecToJson(*spec);
    entry["stage"] = "float";
    entry["seconds"] = Seconds(start);
    entry["result"] = std::move(what);
    record.push_back(std::move(entry));
  }
  return model;
}

namespace {

// Runs one plan-stage hook (`which`) of every technique of the plan's options that
// has it, recording each under `stage`, then stores the record in the plan.
Status RunPlanStage(QuantPlan& plan, const RecoveryContext& ctx, json& record,
                    Technique::RefinePlanFn Technique::*which, const char* stage) {
  SEQTO_RETURN_IF_ERROR(CheckRecoverySpecs(plan.options()));
  if (!record.is_array()) record = json::array();
  RecoveryContext with_options = ctx;
  with_options.options = &plan.options();
  for (const auto& [t, spec] : InRunOrder(plan.options())) {
    const Technique::RefinePlanFn& refine = t->*which;
    if (!refine) continue;
    SEQTO_RETURN_IF_ERROR(CheckData(*t, ctx));
    const auto start = std::chrono::steady_clock::now();
    json what = json::object();
    SEQTO_RETURN_IF_ERROR(refine(plan, *spec, with_options, what));
    json entry = RecoverySpecToJson(*spec);
    entry["stage"] = stage;
    entry["seconds"] = Seconds(start);
    entry["result"] = std::move(what);
    record.push_back(std::move(entry));
  }
  // The model's metadata has everything but the times, so the same plan always
  // gives the same bytes (a resumed run's candidates equal a straight run's).
  json timeless = record;
  for (auto& entry : timeless) entry.erase("seconds");
  plan.SetRecoveryRecord(timeless.empty() ? std::string() : timeless.dump());
  return Status::Ok();
}

}  // namespace

Status RefinePlan(QuantPlan& plan, const RecoveryContext& ctx, json& record) {
  return RunPlanStage(plan, ctx, record, &Technique::refine_plan, "plan");
}

Status RefinePlanForInt16Activations(QuantPlan& plan, const RecoveryContext& ctx, json& record) {
  return RunPlanStage(plan, ctx, record, &Technique::refine_plan_int16_activations, "plan_int16_activations");
}

Expected<double> FloatOutputSqnr(const ir::Model& original, const ir::Model& changed, const RecoveryContext& ctx) {
  runtime::SessionOptions so;
  so.threads = ctx.threads;
  SEQTO_ASSIGN_OR_RETURN(auto s0, runtime::Session::Create(original, so));
  SEQTO_ASSIGN_OR_RETURN(auto s1, runtime::Session::Create(changed, so));
  LossSums sums;  // the analysis's output loss sums, so both measure alike
  for (size_t i = 0; ctx.calibration && i < ctx.calibration->num_batches; ++i) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap feeds, ctx.calibration->get(i));
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap y0, s0->Run(feeds));
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap y1, s1->Run(feeds));
    sums.Add(y0, y1);
  }
  if (sums.noise == 0) return INFINITY;
  return 10.0 * std::log10(sums.signal / sums.noise);
}

}  // namespace seqto::quant::recover
