// The bundled Fashion-MNIST CNNs (examples/fashion-mnist) quantized by quant/ the
// way several unit tests need them: static, per-channel, MinMax ranges from the 8
// sample images.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "quant/quantize.h"

namespace seqto::testing {

// examples/fashion-mnist/sample_input.npy: 8 preprocessed test images.
Expected<Tensor> ExampleSampleInput();
// examples/fashion-mnist/<name>.onnx ("resnet", "mobilenetv2") as a QDQ model,
// calibrated on `x`.
Expected<ir::Model> QuantizedExample(const std::string& name, const Tensor& x);
// `model` (one input) quantized the same way, calibrated on `x`, with the groups
// whose order (position in the plan) is in `excluded_orders` left in float: a
// selectively quantized model with float islands between int8 regions.
// `fallback`: what the excluded groups run in (float, int16 or float16).
Expected<ir::Model> QuantizeForTest(const ir::Model& model, const Tensor& x,
                                    const std::set<size_t>& excluded_orders = {},
                                    quant::Fallback fallback = quant::Fallback::kFloat);
// The bundled ResNet prepared and planned for static quantization with the default
// options (per-tensor MinMax ranges from the 8 sample images), built once per test
// process: what the analysis tests start from.
struct CalibratedResnet {
  ir::Model prepared;
  std::unique_ptr<quant::QuantPlan> plan;
  Tensor input;  // the sample images, [8, 1, 28, 28]
};
const CalibratedResnet& DefaultResnetPlan();
// The smallest non-zero gap between two of `values` (the quantum of dequantized
// 8-bit logits).
double SmallestGap(std::vector<double> values);

}  // namespace seqto::testing
