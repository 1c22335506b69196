// Helpers shared by the quantization ops (ops/quant): integer ranges, reading
// scales and zero points, per-axis and per-row/column parameters, and the rounding
// that ONNX Runtime uses (docs/design.md, Quantization semantics):
//   quantize:   q = clamp(round(x / scale) + zp, qmin, qmax)
//   requantize: q = clamp(round(float(acc) * multiplier) + zp, qmin, qmax),
//               multiplier = in_scale * w_scale / out_scale in float
// with round = half to even. Both clamp before rounding (the bounds are integers,
// so this equals clamping after), which keeps the value small enough for the
// magic-number rounding below.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

#ifdef __FAST_MATH__
#error "ops/quant relies on IEEE rounding (RoundHalfEven); do not build it with -ffast-math"
#endif

namespace seqto::ops {
class KernelContext;
}  // namespace seqto::ops

namespace seqto::ops::quant {

// The representable range of an integer element type.
struct IntRange {
  int32_t lo = 0, hi = 0;
};

// uint8, int8, uint16, int16 (the quantized types of QuantizeLinear's output).
bool IsQuantType(DType t);
// uint8 or int8 (the operand types of the integer matrix products).
inline bool Is8Bit(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }
// The range of uint8, int8, uint16, int16, int32.
IntRange RangeOf(DType t);

// Rounds half to even; exact for |v| < 2^22 (callers clamp first). The sum is
// rounded by the FPU in its default round-to-nearest-even mode.
inline float RoundHalfEven(float v) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// The forms below are branch-free (selects of plain values) so that loops over
// them vectorize under `#pragma omp simd` at -O2 (see ops/elementwise/elementwise.h).

// clamp(round(v) + zp, lo + zp, hi + zp) for lo, hi the range minus the zero point
// (integers as floats); NaN gives the zero point.
inline int32_t QuantizeClamped(float v, float lo, float hi, int32_t zp) {
  v = v == v ? v : 0.f;
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return static_cast<int32_t>(RoundHalfEven(v)) + zp;
}

// The clamp bounds of QuantizeClamped for range r and zero point zp.
struct ClampBounds {
  float lo, hi;
  ClampBounds(IntRange r, int32_t zp)
      : lo(static_cast<float>(static_cast<int64_t>(r.lo) - zp)),
        hi(static_cast<float>(static_cast<int64_t>(r.hi) - zp)) {}
};

// clamp(round(v) + zp, r.lo, r.hi); NaN gives the zero point.
inline int32_t QuantizeScaled(float v, int32_t zp, IntRange r) {
  const ClampBounds b(r, zp);
  return QuantizeClamped(v, b.lo, b.hi, zp);
}

// The output of an integer accumulation brought to the output's quantization,
// as ONNX Runtime's MlasRequantizeOutput does.
inline int32_t Requantize(int32_t acc, float multiplier, int32_t zp, IntRange r) {
  return QuantizeScaled(static_cast<float>(acc) * multiplier, zp, r);
}

// Elements of an integer tensor (uint8, int8, uint16, int16, int32) as int32.
std::vector<int32_t> ReadInt32s(const Tensor& t);
// Elements of a float32, float16 or bfloat16 tensor (scales) as float; error naming input
// `index` ('name') for other types.
Expected<std::vector<float>> ReadScales(const Tensor& t, int index, const char* name);

// Checks that zero point input `index` ('name') has the type `expected` (the type
// of the tensor it belongs to) and returns its values as int32.
Expected<std::vector<int32_t>> ReadZeroPoints(const Tensor& zp, DType expected, int index, const char* name);

// Input `index` as one scale (required; a scalar or a 1-element tensor).
Expected<float> ScalarScale(const KernelContext& ctx, int index, const char* name);
// Input `index` as one zero point of `type` (0 when the input is omitted).
Expected<int32_t> ScalarZp(const KernelContext& ctx, int index, DType type, const char* name);

// A parameter (scale or zero point) broadcast over a matrix product's operand:
// per row of A ([..., M, 1] or [M]) or per column of B ([..., 1, N] or [N]), or one
// value for the whole tensor. `values` holds either one value or one per
// (operand batch, row/column), operand batches in row-major order.
template <typename T>
struct MatrixParam {
  std::vector<T> values;
  bool per_tensor() const { return values.size() == 1; }
  // The value for operand batch `batch` (index into the operand's own batch dims)
  // and row/column `i` (of `count`).
  T at(int64_t batch, int64_t i, int64_t count) const {
    return values.size() == 1 ? values[0] : values[static_cast<size_t>(batch * count + i)];
  }
};

// Expands `values` of a parameter tensor of shape `param_shape` for an operand whose
// batch dims are `batch` and whose rows (per_row) or columns (otherwise) number
// `count`. Accepted shapes: one element (per tensor); [count]; batch' + [count, 1]
// (per row) or batch' + [1, count] (per column), where batch' broadcasts to batch.
template <typename T>
Expected<MatrixParam<T>> ExpandMatrixParam(std::vector<T> values, const Shape& param_shape, const Shape& batch,
                                           int64_t count, bool per_row, int index, const char* name);

// The per-axis layout of QuantizeLinear / DequantizeLinear: x viewed as
// [outer, axis_dim, inner]; a per-tensor parameter has axis_dim == 1 and covers all.
struct AxisLayout {
  int64_t outer = 1, axis_dim = 1, inner = 1;
  bool per_axis = false;
  // Calls fn(begin, end, a) for the runs of elements [begin, end) within
  // [start, stop) that share the axis index a (0 when per tensor).
  template <typename F>
  void ForEachRun(int64_t start, int64_t stop, F&& fn) const {
    if (!per_axis) {
      fn(start, stop, int64_t{0});
      return;
    }
    for (int64_t i = start; i < stop;) {
      const int64_t row = i / inner, end = std::min(stop, (row + 1) * inner);
      fn(i, end, row % axis_dim);
      i = end;
    }
  }
};
// Resolves the layout of `x` for a scale of shape `scale_shape` (input
// `scale_index`): a scalar or one-element tensor is per tensor; from opset 13 a
// 1-D tensor of x.shape[axis] elements is per axis.
Expected<AxisLayout> ResolveAxis(const Shape& x, const Shape& scale_shape, int64_t axis, int64_t opset,
                                 int scale_index);

// True when oneDNN's int8 kernels are exact on this CPU: with VNNI (or AMX) the
// u8 x s8 products accumulate in int32; without it they pass through saturating
// int16 pairs (vpmaddubsw) and can differ from the reference, so the fast paths
// are used only with VNNI.
bool ExactInt8Isa();

// How many times a fast (oneDNN) quantized kernel has run in this process: lets
// tests check that a comparison with the reference did exercise the fast path.
void CountFastRun();
int64_t FastRuns();

}  // namespace seqto::ops::quant
