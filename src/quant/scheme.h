// Quantization scheme: integer ranges, scale/zero-point math, and quantizing /
// dequantizing tensors, exactly as ONNX Runtime's quantization tool computes them
// (docs/design.md, Quantization semantics). Everything else in quant/ builds on
// these functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto::quant {

// The integer types a tensor can be quantized to. Values match DType/ONNX where
// ONNX has the type (int4/uint4 are 22/21 in ONNX >= 1.16; seqto stores them
// unpacked in int8/uint8 tensors until written). kInt32 is only the type of a
// quantized bias (QuantizeBias); ParseQuantType does not accept it.
enum class QuantType { kUInt8, kInt8, kUInt16, kInt16, kUInt4, kInt4, kInt32 };

// "uint8", "int8", "uint16", "int16", "uint4", "int4" (also accepted by ParseQuantType,
// with ORT's spellings "QUInt8", "QInt8", ...).
std::string QuantTypeName(QuantType t);
Expected<QuantType> ParseQuantType(const std::string& name);
// The storage dtype of a quantized tensor (int4 -> int8, uint4 -> uint8).
DType StorageDType(QuantType t);
bool IsSigned(QuantType t);

// (qmin, qmax) for a type; reduce_range wins over symmetric (docs/design.md, Integer ranges).
struct QRange {
  int64_t qmin = 0, qmax = 0;
};
QRange GetQRange(QuantType t, bool symmetric, bool reduce_range);

// Scale and zero point of one tensor (per-tensor) or of each channel along `axis`.
struct QuantParams {
  QuantType type = QuantType::kUInt8;
  std::vector<float> scale;         // one per tensor, or one per channel
  std::vector<int64_t> zero_point;  // same length as scale
  std::optional<int64_t> axis;      // set for per-channel
  bool per_channel() const { return axis.has_value(); }
};

struct RangeOptions {
  QuantType type = QuantType::kUInt8;
  bool symmetric = false;
  bool reduce_range = false;
  bool power_of_two = false;  // scale = 2^e (ESP-DL style), rounded up so the range fits
};

// Scale/zero point for the real range [rmin, rmax] (computed in double;
// docs/design.md, Scale and zero point). `what` starts every error message
// ("tensor 'x'"). NaN/Inf bounds, or rmin > rmax, are a user error. power_of_two
// needs int8/int16 and is always symmetric (zero point 0).
struct ScaleZeroPoint {
  float scale = 1.0f;
  int64_t zero_point = 0;
};
Expected<ScaleZeroPoint> ComputeScaleZeroPoint(double rmin, double rmax, const RangeOptions& options,
                                               const std::string& what = "tensor");

// Parameters for a float weight: per-tensor (axis = nullopt) or per-channel along
// `axis`, using each channel's min/max. NaN/Inf in the weight is an error naming it.
Expected<QuantParams> ComputeWeightParams(const Tensor& weight, const RangeOptions& options,
                                          std::optional<int64_t> axis, const std::string& name);

// q = clamp(round_half_even(x / scale) + zp, type range); returns a tensor of
// StorageDType(params.type). Per-channel params broadcast along params.axis.
// x must be float32 and finite (NaN/Inf is an error naming the element).
Expected<Tensor> QuantizeTensor(const Tensor& x, const QuantParams& params);
// x = (q - zp) * scale, float32.
Expected<Tensor> DequantizeTensor(const Tensor& q, const QuantParams& params);

// Bias for Conv/Gemm/MatMul: int32 with scale = input_scale * weight_scale[c], zp 0
// (per channel when the weight is: then bias has one element per channel). Values
// beyond the int32 range saturate, as in ORT. `bias_params` (optional) receives
// type kInt32, the scales, zero points 0 and axis 0 when per channel.
Expected<Tensor> QuantizeBias(const Tensor& bias, float input_scale, const QuantParams& weight_params,
                              QuantParams* bias_params);

// Per scale of `weight_params` (one for the whole bias, or one per channel), the
// smallest k >= 0 such that QuantizeBias, with that scale multiplied by 2^k, gives
// values within [-limit, limit]. Found from the ratio |bias| / (input_scale * scale)
// and checked with QuantizeBias's own float32 arithmetic, so it is exact however
// small the scale (weights of a dead channel, 16-bit types). A channel whose bias
// no finite float32 scale holds is an error naming the channel.
Expected<std::vector<int>> BiasScaleExponents(const Tensor& bias, float input_scale, const QuantParams& weight_params,
                                              int32_t limit);

}  // namespace seqto::quant
