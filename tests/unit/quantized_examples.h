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
#include "support/test_quantize.h"  // QuantizeForTest, SmallestGap

namespace seqto::testing {

// examples/fashion-mnist/sample_input.npy: 8 preprocessed test images.
Expected<Tensor> ExampleSampleInput();
// examples/fashion-mnist/<name>.onnx ("resnet", "mobilenetv2") as a QDQ model,
// calibrated on `x`.
Expected<ir::Model> QuantizedExample(const std::string& name, const Tensor& x);
// The bundled ResNet prepared and planned for static quantization with the default
// options (per-tensor MinMax ranges from the 8 sample images), built once per test
// process: what the analysis tests start from.
struct CalibratedResnet {
  ir::Model prepared;
  std::unique_ptr<quant::QuantPlan> plan;
  Tensor input;  // the sample images, [8, 1, 28, 28]
};
const CalibratedResnet& DefaultResnetPlan();

}  // namespace seqto::testing
