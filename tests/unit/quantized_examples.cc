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

}  // namespace seqto::testing
