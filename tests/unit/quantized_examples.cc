#include "quantized_examples.h"

#include <algorithm>

#include "core/npy.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"

namespace seqto::testing {

namespace {
std::string ExampleDir() { return std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/"; }
}  // namespace

Expected<Tensor> ExampleSampleInput() { return ReadNpy(ExampleDir() + "sample_input.npy"); }

Expected<ir::Model> QuantizedExample(const std::string& name, const Tensor& x) {
  SEQTO_ASSIGN_OR_RETURN(ir::Model model, onnxio::LoadModel(ExampleDir() + name + ".onnx"));
  return QuantizeForTest(model, x);
}

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

const CalibratedResnet& DefaultResnetPlan() {
  static const CalibratedResnet* r = [] {
    auto* r = new CalibratedResnet;
    auto model = onnxio::LoadModel(ExampleDir() + "resnet.onnx");
    auto input = ExampleSampleInput();
    if (!model.ok() || !input.ok()) return r;  // the tests' own checks then fail
    r->input = *input;
    auto prepared = quant::QuantPlan::Prepare(*model);
    if (!prepared.ok()) return r;
    r->prepared = *prepared;
    quant::QuantOptions o;
    auto tensors = quant::QuantPlan::TensorsToCalibrate(r->prepared, o);
    if (!tensors.ok()) return r;
    bool done = false;
    auto stats = quant::Calibrate(
        r->prepared, *tensors,
        [&](runtime::TensorMap& feeds) -> Expected<bool> {
          if (done) return false;
          feeds = {{r->prepared.graph.inputs.at(0).name, r->input}};
          return done = true;
        },
        o.calibration_options, 1);
    if (!stats.ok()) return r;
    auto ranges = stats->Ranges(o.calibration);
    if (!ranges.ok()) return r;
    auto plan = quant::QuantPlan::Create(r->prepared, o, &*ranges);
    if (plan.ok()) r->plan = std::make_unique<quant::QuantPlan>(std::move(*plan));
    return r;
  }();
  return *r;
}

double SmallestGap(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  double gap = 1e9;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] - values[i - 1] > 1e-6) gap = std::min(gap, values[i] - values[i - 1]);
  return gap;
}

}  // namespace seqto::testing
