// Quantizing a model in tests: static, per-channel, MinMax ranges from one batch, as
// the unit and interop tests that check quantized kernels need it.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "quant/quantize.h"
#include "runtime/session.h"

namespace seqto::testing {

// `model` (one input) quantized statically with per-channel weights, calibrated on
// `x`, with the groups whose order (position in the plan) is in `excluded_orders`
// left in float: a selectively quantized model with float islands between int8
// regions. `fallback`: what the excluded groups run in (float, int16 or float16).
Expected<ir::Model> QuantizeForTest(const ir::Model& model, const Tensor& x,
                                    const std::set<size_t>& excluded_orders = {},
                                    quant::Fallback fallback = quant::Fallback::kFloat);

// `model` rewritten by one float-stage recovery technique (`spec_text` as for
// --recover: "cle:relu6=0", "smooth_quant"), with `samples` as the calibration data
// (empty: none).
struct RewrittenForTest {
  ir::Model model;
  nlohmann::json record;  // the technique's record ("result")
};
Expected<RewrittenForTest> RewriteForTest(const ir::Model& model, const std::string& spec_text,
                                          const std::vector<runtime::TensorMap>& samples);

// max |a - b| relative to max |a|; infinity where the sizes differ.
double MaxRelativeDiff(const Tensor& a, const Tensor& b);

// The smallest non-zero gap between two of `values` (the quantum of dequantized
// 8-bit outputs).
double SmallestGap(std::vector<double> values);

}  // namespace seqto::testing
