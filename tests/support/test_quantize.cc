#include "support/test_quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "quant/calib/calibrate.h"
#include "quant/recover/recover.h"
#include "quant/recover/technique.h"

namespace seqto::testing {

Expected<ir::Model> QuantizeForTest(const ir::Model& model, const Tensor& x, const std::set<size_t>& excluded_orders,
                                    quant::Fallback fallback) {
  quant::QuantOptions qo;
  qo.per_channel = true;
  SEQTO_ASSIGN_OR_RETURN(ir::Model prepared, quant::QuantPlan::Prepare(model));
  SEQTO_ASSIGN_OR_RETURN(auto tensors, quant::QuantPlan::TensorsToCalibrate(prepared, qo));
  const std::string input = prepared.graph.inputs.at(0).name;
  bool fed = false;
  SEQTO_ASSIGN_OR_RETURN(auto stats, quant::Calibrate(
                                         prepared, tensors,
                                         [&](runtime::TensorMap& feeds) -> Expected<bool> {
                                           if (fed) return false;
                                           feeds[input] = x;
                                           return fed = true;
                                         },
                                         qo.calibration_options));
  SEQTO_ASSIGN_OR_RETURN(auto ranges, stats.Ranges(qo.calibration));
  SEQTO_ASSIGN_OR_RETURN(auto plan, quant::QuantPlan::Create(prepared, qo, &ranges));
  std::set<std::string> excluded;
  for (size_t i = 0; i < plan.groups().size(); ++i)
    if (excluded_orders.count(i)) excluded.insert(plan.groups()[i].name);
  return plan.Materialize(excluded, fallback);
}

double SmallestGap(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  double gap = 1e9;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] - values[i - 1] > 1e-6) gap = std::min(gap, values[i] - values[i - 1]);
  return gap;
}

Expected<RewrittenForTest> RewriteForTest(const ir::Model& model, const std::string& spec_text,
                                          const std::vector<runtime::TensorMap>& samples) {
  SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec, quant::recover::ParseRecoverySpec(spec_text, "test"));
  quant::QuantOptions o;
  o.recovery = {spec};
  quant::BatchList list;
  list.num_batches = samples.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return samples[i]; };
  quant::recover::RecoveryContext ctx;
  ctx.calibration = samples.empty() ? nullptr : &list;
  nlohmann::json record = nlohmann::json::array();
  SEQTO_ASSIGN_OR_RETURN(ir::Model out, quant::recover::RewriteFloatModel(model, o, ctx, record));
  if (record.size() != 1) return InternalError(spec.name + ": expected one record, got " + record.dump());
  return RewrittenForTest{std::move(out), record[0]["result"]};
}

double MaxRelativeDiff(const Tensor& a, const Tensor& b) {
  const auto x = a.ToDoubles(), y = b.ToDoubles();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double m = 0, d = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i])), d = std::max(d, std::fabs(x[i] - y[i]));
  return d / m;
}

}  // namespace seqto::testing
