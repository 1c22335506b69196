// Helpers shared by the reduce family (Reduce*, ArgMax/ArgMin, TopK, Softmax):
// axis lists, the [outer, axis, inner] view of a tensor, and 16-bit float inputs,
// which the kernels compute in float32.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/op.h"

namespace seqto::ops::reduce {

// A tensor seen as [outer, axis, inner] around one axis (row-major).
struct AxisView {
  int64_t outer = 1, axis = 1, inner = 1;
};
inline AxisView ViewAround(const Shape& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis)
      v.outer *= shape[d];
    else if (d == axis)
      v.axis = shape[d];
    else
      v.inner *= shape[d];
  }
  return v;
}

// Normalizes a list of axes (each in [-rank, rank), none repeated) into a mask.
// `what` names the list in messages ("attribute 'axes'", "input 1 (axes)").
inline Expected<std::vector<bool>> AxesMask(const std::vector<int64_t>& axes, int64_t rank, const std::string& what) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return UserError(what + ": axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    const int64_t n = a < 0 ? a + rank : a;
    if (mask[n]) return UserError(what + ": axis " + std::to_string(a) + " is repeated");
    mask[n] = true;
  }
  return mask;
}

// Reads a single axis attribute and normalizes it against `rank`.
inline Expected<int64_t> CheckAxis(int64_t axis, int64_t rank, const std::string& what) {
  if (axis < -rank || axis >= rank)
    return UserError(what + " " + std::to_string(axis) + " is out of range for an input of rank " +
                     std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

inline bool IsHalfType(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

// A float32 copy of a float16/bfloat16 tensor.
inline Tensor HalfToFloat32(const Tensor& t) {
  Tensor out(DType::kFloat32, t.shape());
  const uint16_t* in = t.data<uint16_t>();
  float* o = out.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) o[i] = HalfToFloat(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = BFloat16ToFloat(in[i]);
  }
  return out;
}

// Writes a float32 tensor into `out`, a float16/bfloat16 tensor of the same size.
inline void Float32ToHalf(const Tensor& f, Tensor& out) {
  const float* in = f.data<float>();
  uint16_t* o = out.data<uint16_t>();
  const int64_t n = f.numel();
  if (out.dtype() == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) o[i] = FloatToHalf(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = FloatToBFloat16(in[i]);
  }
}

// Output i if the node wants it, else `scratch` (for outputs a kernel computes anyway).
inline Tensor& OutputOrScratch(KernelContext& ctx, int i, DType dtype, Shape shape, Tensor& scratch) {
  if (ctx.wants_output(i)) return ctx.Allocate(i, dtype, std::move(shape));
  scratch = Tensor(dtype, std::move(shape));
  return scratch;
}

// NaN test that also compiles (to false) for integer types.
template <typename T>
inline bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// double -> T: plain for floating types; for integers NaN gives 0 and values
// outside T's range saturate (a bare cast would be undefined).
template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (v != v) return T(0);
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

}  // namespace seqto::ops::reduce
