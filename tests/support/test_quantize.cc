#include "support/test_quantize.h"

#include <algorithm>
#include <string>

#include "quant/calib/calibrate.h"

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

}  // namespace seqto::testing
