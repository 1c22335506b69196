// Small builders for hand-made models in tests: attributes, nodes and random float
// tensors (the same few lines every graph-building test needs).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace seqto::testing {

// Attributes of one type each.
ir::Attribute Int(int64_t v);
ir::Attribute Ints(std::vector<int64_t> v);
ir::Attribute Float(float v);
ir::Attribute String(std::string v);

// A node without attributes; add them to `attributes` afterwards.
ir::Node MakeNode(std::string name, std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                  std::string domain = "");

// A float32 value (graph input, output or intermediate) of the given dims, which may
// be symbolic.
ir::ValueInfo FloatValue(std::string name, std::vector<ir::Dim> dims);

// A float32 tensor of `shape`, uniform in [lo, hi) from `rng`.
Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f);

// A text detector's neck and head as PP-OCR's DB head has them (random weights):
// x [N, 3, 8, 6] -> conv -> Relu = a; a -> conv stride 2 -> Relu = b; a nearest 2x
// Resize of b (+ a), a linear 2x Resize of b, their Concat -> conv -> ConvTranspose
// 2x2/2 -> Add bias -> BatchNormalization -> Relu -> ConvTranspose 2x2/2 to one
// channel (with B) -> Sigmoid = y [N, 1, 32, 24]. Opset 13.
ir::Model DetectorHeadModel(std::mt19937& rng);

// A one-block transformer encoder with outlier activation channels feeding MatMuls,
// as SmoothQuant addresses (random weights from `rng`): x [N, 28, 28] (28 tokens of
// 28 features: a Fashion-MNIST image by rows) -> MatMul + Add embedding to 64 = h ->
// LayerNormalization whose gamma is 30x..100x on four channels = a -> MatMul + Add
// (FFN up, 128) -> Relu -> MatMul + Add (down, 64) -> + h -> ReduceMean over the
// tokens -> MatMul + Add = logits [N, 10]. The FFN-up rows reading the outlier
// channels are divided by only the square root of their factor, so the outliers
// carry real weight in the function (as in LLMs) rather than cancelling out. Opset 17.
ir::Model OutlierTransformerModel(std::mt19937& rng);

}  // namespace seqto::testing
