// Shared machinery of the elementwise ops (ops/elementwise and ops/math): type
// dispatch that includes bool and the 16-bit floats, type sets for validation,
// vectorizable compare/select helpers, flat and broadcasting loops, ONNX's
// pre-opset-7 broadcasting, and element conversion (Cast).
//
// Vectorization notes (GCC at -O2, the project's flags):
// - Loops carry `#pragma omp simd`: without it GCC's -O2 cost model does not version
//   loops for possible aliasing, so even `y[i] = a[i] + b[i]` stays scalar.
// - With the default -ftrapping-math, a float `c ? x : y` whose arms compute
//   something is not if-converted (the arithmetic would be speculated), so the loop
//   stays scalar. Select() blends with bit operations instead, and Less()/Greater()
//   use the quiet std::isless family; both keep loops vectorizable.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/op.h"

namespace seqto::ops::ew {

// ---------------------------------------------------------------- types

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;
// The type arithmetic happens in: float for the 16-bit floats, else T itself.
template <typename T>
using Compute = std::conditional_t<kIsHalf<T>, float, T>;

template <typename T>
inline Compute<T> Load(T v) {
  if constexpr (std::is_same_v<T, Float16>)
    return HalfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16ToFloat(v.bits);
  else
    return v;
}
template <typename T>
inline T Store(Compute<T> v) {
  if constexpr (std::is_same_v<T, Float16>)
    return T{FloatToHalf(v)};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return T{FloatToBFloat16(v)};
  else
    return v;
}

// Calls f(T{}) with the C++ type of `t`: every numeric type, bool, Float16 and
// BFloat16. Returns false for types without one (string, undefined).
template <typename F>
bool VisitType(DType t, F&& f) {
  switch (t) {
    case DType::kBool:
      f(bool{});
      return true;
    case DType::kFloat16:
      f(Float16{});
      return true;
    case DType::kBFloat16:
      f(BFloat16{});
      return true;
    default:
      return VisitNumeric(t, f);
  }
}

// A set of element types, for validating inputs and naming what is supported.
using TypeSet = uint32_t;
constexpr TypeSet Bit(DType t) { return TypeSet{1} << static_cast<int>(t); }
inline constexpr TypeSet kFloatTypes =
    Bit(DType::kFloat32) | Bit(DType::kFloat64) | Bit(DType::kFloat16) | Bit(DType::kBFloat16);
inline constexpr TypeSet kSignedTypes =
    Bit(DType::kInt8) | Bit(DType::kInt16) | Bit(DType::kInt32) | Bit(DType::kInt64);
inline constexpr TypeSet kUnsignedTypes =
    Bit(DType::kUInt8) | Bit(DType::kUInt16) | Bit(DType::kUInt32) | Bit(DType::kUInt64);
inline constexpr TypeSet kIntTypes = kSignedTypes | kUnsignedTypes;
inline constexpr TypeSet kNumericTypes = kFloatTypes | kIntTypes;
inline constexpr TypeSet kBoolType = Bit(DType::kBool);
inline constexpr TypeSet kAllTypes = kNumericTypes | kBoolType;

inline bool InSet(DType t, TypeSet set) {
  return static_cast<int>(t) >= 0 && static_cast<int>(t) < 32 && (Bit(t) & set) != 0;
}
template <typename T>
constexpr bool Allows(TypeSet set) {
  return (Bit(DTypeOf<T>()) & set) != 0;
}
// "float32, float64, float16, ..." for error messages.
std::string TypeSetNames(TypeSet set);
// Error for input `index` whose type is outside `set`.
Error TypeError(int index, DType dtype, TypeSet set);

// ---------------------------------------------------------------- scalar helpers

// c ? a : b without a branch for floats (see the note at the top).
template <typename T>
inline T Select(bool c, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    const uint32_t m = 0u - static_cast<uint32_t>(c);
    return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
  } else if constexpr (std::is_same_v<T, double>) {
    const uint64_t m = uint64_t{0} - static_cast<uint64_t>(c);
    return std::bit_cast<double>((std::bit_cast<uint64_t>(a) & m) | (std::bit_cast<uint64_t>(b) & ~m));
  } else {
    return c ? a : b;
  }
}
// Quiet comparisons (false when a NaN is involved, like the operators).
template <typename T>
inline bool Less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isless(a, b);
  else
    return a < b;
}
template <typename T>
inline bool Greater(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isgreater(a, b);
  else
    return a > b;
}
template <typename T>
inline bool LessEq(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::islessequal(a, b);
  else
    return a <= b;
}
template <typename T>
inline bool GreaterEq(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isgreaterequal(a, b);
  else
    return a >= b;
}
template <typename T>
inline bool IsNan(T a) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isunordered(a, a);
  else
    return false;
}

// Integer arithmetic that wraps around (ONNX/numpy semantics) instead of being
// undefined on signed overflow; plain arithmetic for floats.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
  else
    return a + b;
}
template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b));
  else
    return a - b;
}
template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
  else
    return a * b;
}
template <typename T>
inline T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(WrapType<T>{0} - static_cast<WrapType<T>>(a));
  else
    return -a;
}

// ---------------------------------------------------------------- element conversion

// Float to integer: truncates toward zero; NaN gives 0. Out-of-range values are
// clamped to int32 (targets of at most 32 bits, except uint32) or int64 and then
// wrapped to the target type, which is what x86 builds of ORT and numpy produce for
// the values that matter and is defined behaviour here.
template <typename To, typename F>
inline To FloatToInt(F v) {
  static_assert(std::is_integral_v<To> && std::is_floating_point_v<F>);
  if constexpr (std::is_same_v<To, uint64_t>) {
    if (IsNan(v)) return 0;
    if (GreaterEq(v, F(18446744073709551616.0))) return std::numeric_limits<uint64_t>::max();
    if (GreaterEq(v, F(9223372036854775808.0))) return static_cast<uint64_t>(v);
    if (LessEq(v, F(-9223372036854775808.0))) return uint64_t{1} << 63;
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else if constexpr (sizeof(To) == 8 || std::is_same_v<To, uint32_t>) {
    const F lo = F(-9223372036854775808.0), hi = F(9223372036854775808.0);
    if (IsNan(v)) return 0;
    const int64_t i = LessEq(v, lo)      ? std::numeric_limits<int64_t>::min()
                      : GreaterEq(v, hi) ? std::numeric_limits<int64_t>::max()
                                         : static_cast<int64_t>(v);
    return static_cast<To>(i);
  } else {
    // Saturates to int32, branch-free so that loops over it vectorize.
    const bool nan = IsNan(v), high = GreaterEq(v, F(2147483648.0)), low = Less(v, F(-2147483648.0));
    int32_t i = static_cast<int32_t>(Select(nan || high || low, F(0), v));
    i = high ? std::numeric_limits<int32_t>::max() : i;
    i = low ? std::numeric_limits<int32_t>::min() : i;
    return static_cast<To>(i);
  }
}

// double -> float rounding to odd: a following rounding to a type with at least two
// fewer significand bits (float16, bfloat16) is then correctly rounded (no double
// rounding).
inline float DoubleToFloatRoundToOdd(double d) {
  float f = static_cast<float>(d);
  if (!std::isnan(d) && static_cast<double>(f) != d) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  }
  return f;
}

// Converts one element the way Cast does.
template <typename To, typename From>
inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (kIsHalf<From>) {
    return ConvertElement<To>(Load(v));
  } else if constexpr (std::is_same_v<To, Float16>) {
    if constexpr (std::is_same_v<From, double>)
      return To{FloatToHalf(DoubleToFloatRoundToOdd(v))};
    else
      return To{FloatToHalf(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>)
      return To{FloatToBFloat16(DoubleToFloatRoundToOdd(v))};
    else
      return To{FloatToBFloat16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return FloatToInt<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// A new tensor with `in`'s elements converted to `to` (Cast's semantics). Also used
// by ops that need an operand in another type (Pow's exponent).
Expected<Tensor> CastTensor(const Tensor& in, DType to);

// ---------------------------------------------------------------- loops

// Below this many elements (times cost) a loop runs on the calling thread
// (ParallelFor decides); cost is a rough per-element weight: 1 for an add, ~10 for
// an exp.
inline constexpr int64_t kCheap = 1;
inline constexpr int64_t kTranscendental = 10;

// y[i] = f(x[i]) for i in [0, n), in parallel chunks, vectorized where f allows.
// y may equal x.
template <typename I, typename O, typename F>
void MapUnary(const I* x, O* y, int64_t n, int64_t cost, const F& f) {
  ParallelFor(n, cost, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
}

// Iteration over the numpy broadcast of N operands. Dimensions of extent 1 are
// dropped and adjacent dimensions that are contiguous (or broadcast) in every
// operand are merged, so e.g. [8,64,56,56] + [1,64,1,1] runs as 512 rows of 3136
// elements with the second operand constant along each row, and equal shapes run as
// one flat row.
template <size_t N>
struct BroadcastLoop {
  Shape out_shape;
  std::vector<int64_t> dims;                    // merged extents, outermost first; never empty
  std::array<std::vector<int64_t>, N> strides;  // per operand, per merged dim (0: broadcast)

  static Expected<BroadcastLoop> Make(const std::array<const Shape*, N>& shapes);

  // Calls row(out_offset, offsets, steps, count) for disjoint rows of the output,
  // from several threads: operand k's elements are at offsets[k] + i * steps[k]
  // for i in [0, count); each step is 0 or 1.
  template <typename Row>
  void Run(int64_t cost, const Row& row) const;
};

template <size_t N>
Expected<BroadcastLoop<N>> BroadcastLoop<N>::Make(const std::array<const Shape*, N>& shapes) {
  BroadcastLoop loop;
  loop.out_shape = *shapes[0];
  for (size_t k = 1; k < N; ++k) {
    auto s = BroadcastShapes(loop.out_shape, *shapes[k]);
    if (!s) return s.error();
    loop.out_shape = std::move(*s);
  }
  const size_t rank = loop.out_shape.size();
  if (NumElements(loop.out_shape) == 0) {
    loop.dims = {0};
    for (auto& st : loop.strides) st = {0};
    return loop;
  }
  std::array<std::vector<int64_t>, N> full;
  for (size_t k = 0; k < N; ++k) {
    const Shape& s = *shapes[k];
    const std::vector<int64_t> contiguous = ContiguousStrides(s);
    full[k].assign(rank, 0);
    for (size_t i = 0; i < s.size(); ++i) full[k][rank - s.size() + i] = s[i] == 1 ? 0 : contiguous[i];
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t extent = loop.out_shape[d];
    if (extent == 1) continue;
    bool merge = !loop.dims.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = loop.strides[k].back() == full[k][d] * extent;
    if (merge) {
      loop.dims.back() *= extent;
      for (size_t k = 0; k < N; ++k) loop.strides[k].back() = full[k][d];
    } else {
      loop.dims.push_back(extent);
      for (size_t k = 0; k < N; ++k) loop.strides[k].push_back(full[k][d]);
    }
  }
  if (loop.dims.empty()) {  // a single element
    loop.dims = {1};
    for (auto& st : loop.strides) st = {0};
  }
  return loop;
}

template <size_t N>
template <typename Row>
void BroadcastLoop<N>::Run(int64_t cost, const Row& row) const {
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t inner = dims[rank - 1];
  if (inner == 0) return;
  std::array<int64_t, N> steps;
  for (size_t k = 0; k < N; ++k) steps[k] = strides[k][rank - 1];
  if (rank == 1) {  // one row: split the row itself
    ParallelFor(inner, cost, [&](int64_t begin, int64_t end) {
      std::array<int64_t, N> offsets;
      for (size_t k = 0; k < N; ++k) offsets[k] = begin * steps[k];
      row(begin, offsets, steps, end - begin);
    });
    return;
  }
  const int64_t rows = NumElements(out_shape) / inner;
  ParallelFor(rows, cost * inner, [&](int64_t begin, int64_t end) {
    // Position of row `begin` in the outer dimensions, then an odometer.
    std::vector<int64_t> idx(rank - 1, 0);
    std::array<int64_t, N> offsets{};
    int64_t rest = begin;
    for (int64_t d = rank - 2; d >= 0; --d) {
      idx[d] = rest % dims[d];
      rest /= dims[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += idx[d] * strides[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      row(r * inner, offsets, steps, inner);
      for (int64_t d = rank - 2; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
        if (idx[d] < dims[d]) break;
        for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * dims[d];
        idx[d] = 0;
      }
    }
  });
}

// One operand a full [rows, C] matrix, the other one row of C repeated (a per-channel
// operand of a channels-last tensor: a bias, a BatchNormalization's scale, a
// squeeze-excitation gate): the row is tiled once into a block of whole rows, so the
// loop runs over long rows rather than one short row per pixel. False (nothing done)
// for other loops.
template <typename A, typename B, typename O, typename Op>
bool RepeatedRowLoop(const BroadcastLoop<2>& loop, const A* pa, const B* pb, O* po, int64_t cost, const Op& op) {
  if (loop.dims.size() != 2 || loop.dims[1] >= 1024) return false;  // long rows loop well as they are
  const int64_t rows = loop.dims[0], c = loop.dims[1];
  auto full = [&](const std::vector<int64_t>& st) { return st[0] == c && st[1] == 1; };
  auto row = [&](const std::vector<int64_t>& st) { return st[0] == 0 && st[1] == 1; };
  const bool a_row = row(loop.strides[0]) && full(loop.strides[1]);
  const bool b_row = full(loop.strides[0]) && row(loop.strides[1]);
  if (!a_row && !b_row) return false;
  const int64_t block = c * std::max<int64_t>(1, 4096 / c), n = rows * c;
  std::unique_ptr<A[]> ta(a_row ? new A[static_cast<size_t>(block)] : nullptr);
  std::unique_ptr<B[]> tb(b_row ? new B[static_cast<size_t>(block)] : nullptr);
  for (int64_t i = 0; i < block; ++i) {
    if (a_row) ta[i] = pa[i % c];
    if (b_row) tb[i] = pb[i % c];
  }
  ParallelFor((n + block - 1) / block, cost * block, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t off = r * block, len = std::min(block, n - off);
      const A* x = a_row ? ta.get() : pa + off;
      const B* y = b_row ? tb.get() : pb + off;
      O* z = po + off;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) z[i] = op(x[i], y[i]);
    }
  });
  return true;
}

// out = op(a, b) elementwise over a broadcast loop made for (a's shape, b's shape).
// out may be a when a has the output's shape (in-place accumulation).
template <typename A, typename B, typename O, typename Op>
void BinaryLoop(const BroadcastLoop<2>& loop, const A* pa, const B* pb, O* po, int64_t cost, const Op& op) {
  if (RepeatedRowLoop(loop, pa, pb, po, cost, op)) return;
  loop.Run(cost, [&](int64_t o, const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& step, int64_t n) {
    const A* x = pa + off[0];
    const B* y = pb + off[1];
    O* z = po + o;
    if (step[0] == 1 && step[1] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
    } else if (step[0] == 1) {
      const B yv = y[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], yv);
    } else if (step[1] == 1) {
      const A xv = x[0];
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) z[i] = op(xv, y[i]);
    } else {
      const O v = op(x[0], y[0]);
      for (int64_t i = 0; i < n; ++i) z[i] = v;
    }
  });
}

// Wraps an op on compute types (float for the 16-bit floats) as an op on T's
// storage: converts the operands and, unless the op returns bool, the result.
template <typename T, typename Op>
auto OnStorage(const Op& op) {
  if constexpr (!kIsHalf<T>) {
    return op;
  } else {
    return [op](T a, T b) {
      const auto r = op(Load(a), Load(b));
      if constexpr (std::is_same_v<std::remove_const_t<decltype(r)>, bool>)
        return r;
      else
        return Store<T>(r);
    };
  }
}

// ---------------------------------------------------------------- legacy broadcasting

// Before opset 7, Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Less/Greater broadcast only
// with attribute broadcast=1, and then B to A's shape with B's dimensions matched to
// A's starting at attribute `axis` (by default the trailing dimensions). Parsed in
// the factory; at run time it gives the shape that makes numpy broadcasting of
// (A, B) do the same. Without broadcast=1 the old rules required equal shapes;
// numpy rules, a superset, apply then.
struct LegacyBroadcast {
  bool enabled = false;
  bool has_axis = false;
  int64_t axis = 0;

  static Expected<LegacyBroadcast> Parse(const KernelInit& init);
  // B's shape padded with 1s to A's rank (B itself when not enabled).
  Expected<Shape> ShapeOfB(const Shape& a, const Shape& b) const;
  // B viewed with ShapeOfB (shares storage).
  Expected<Tensor> AdjustB(const Tensor& a, const Tensor& b) const;
};

}  // namespace seqto::ops::ew
