// QuantizeLinear and DequantizeLinear (ONNX opset 10: per tensor; opset 13: per
// axis with `axis`), also under com.microsoft (ONNX Runtime's contrib versions,
// which the quantization tool emits for 16-bit types; always per-axis capable).
//   QuantizeLinear:   y = clamp(round(x / y_scale) + y_zero_point, range of y's type),
//                     round half to even, NaN -> y_zero_point. x: float32, float16,
//                     bfloat16, int32; y: y_zero_point's type (uint8 without one),
//                     uint8, int8, uint16, int16.
//   DequantizeLinear: y = (x - x_zero_point) * x_scale. x: uint8, int8, uint16,
//                     int16, int32; y: x_scale's type (float32, float16, bfloat16).
// As in ONNX Runtime, the division and the product are in float32, and
// (x - x_zero_point) is an exact integer before it is converted.
// com.seqto.QuantizeLinear with to_channels_last = 1 (made by the layout pass,
// rewrite/channels_last.cc) quantizes an N x C x D1..Dk float32 tensor per tensor
// and writes it as N x D1..Dk x C: the border of an int8 channels-last region
// (typically the model input) in one pass instead of a quantization and a
// Transpose. Same values as QuantizeLinear followed by that Transpose.
#include <algorithm>
#include <vector>

#include "ops/quant/quant_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using quant::AxisLayout;
using quant::IntRange;

struct QdqAttrs {
  int64_t axis = 1;
  int64_t opset = 13;
  DType output_dtype = DType::kUndefined;  // QuantizeLinear-21's output_dtype (used without a zero point)
  bool to_channels_last = false;           // com.seqto: Y is X's quantization as N x D1..Dk x C
};

Expected<QdqAttrs> ParseQdqAttrs(const KernelInit& init) {
  QdqAttrs a;
  // The contrib ops follow opset-13 semantics whatever their domain's version.
  a.opset = init.node.domain == "com.microsoft" ? 13 : init.opset;
  SEQTO_ASSIGN_OR_RETURN(a.axis, init.node.attr_int("axis", 1));
  SEQTO_ASSIGN_OR_RETURN(int64_t block_size, init.node.attr_int("block_size", 0));
  if (block_size != 0) return UserError("attribute 'block_size' is not supported (blocked quantization)");
  SEQTO_ASSIGN_OR_RETURN(int64_t output_dtype, init.node.attr_int("output_dtype", 0));
  if (init.node.domain == "com.seqto") {
    a.opset = 13;
    SEQTO_ASSIGN_OR_RETURN(int64_t to_channels_last, init.node.attr_int("to_channels_last", 0));
    a.to_channels_last = to_channels_last != 0;
  }
  a.output_dtype = static_cast<DType>(output_dtype);
  if (output_dtype != 0 && !quant::IsQuantType(a.output_dtype))
    return UserError("attribute 'output_dtype' is " + std::to_string(output_dtype) +
                     ", expected uint8 (2), int8 (3), uint16 (4) or int16 (5)");
  return a;
}

// Scale and zero point of input 1 and 2, checked against x.
struct QdqParams {
  AxisLayout layout;
  std::vector<float> scales;
  std::vector<int32_t> zero_points;  // one per scale (zeros when absent)
};

Expected<QdqParams> ReadQdqParams(const KernelContext& ctx, const QdqAttrs& attrs, DType zp_type) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  QdqParams p;
  SEQTO_ASSIGN_OR_RETURN(p.layout, quant::ResolveAxis(x.shape(), scale.shape(), attrs.axis, attrs.opset, 1));
  SEQTO_ASSIGN_OR_RETURN(p.scales, quant::ReadScales(scale, 1, "scale"));
  if (ctx.has_input(2)) {
    const Tensor& zp = ctx.input(2);
    if (zp.numel() != scale.numel())
      return InputError(2, "zero point has shape " + ShapeToString(zp.shape()) + ", expected the scale's shape " +
                               ShapeToString(scale.shape()));
    SEQTO_ASSIGN_OR_RETURN(p.zero_points, quant::ReadZeroPoints(zp, zp_type, 2, "zero point"));
  } else {
    p.zero_points.assign(p.scales.size(), 0);
  }
  return p;
}

template <typename T>
float ToFloat(T v) {
  if constexpr (std::is_same_v<T, Float16>)
    return HalfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return BFloat16ToFloat(v.bits);
  else
    return static_cast<float>(v);
}

template <typename T>
T FromFloat(float v) {
  if constexpr (std::is_same_v<T, Float16>)
    return T{FloatToHalf(v)};
  else if constexpr (std::is_same_v<T, BFloat16>)
    return T{FloatToBFloat16(v)};
  else
    return v;
}

// One run of elements sharing (scale, zero point). Restrict pointers: a store
// through Q* (a char type) could otherwise alias anything, keeping the loop scalar.
// Also compiled for AVX2 and AVX-512 (exact: a division and a clamp, no contraction).
template <typename X, typename Q>
SEQTO_WIDE_CLONES_EXACT void QuantizeRow(const X* __restrict in, Q* __restrict out, int64_t n, float s, float lo,
                                         float hi, int32_t zp) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Q>(quant::QuantizeClamped(ToFloat(in[i]) / s, lo, hi, zp));
}

template <typename X, typename Q>
void QuantizeKernel(const QdqParams& p, const X* x, Q* y, int64_t n) {
  const IntRange range = quant::RangeOf(DTypeOf<Q>());
  ParallelFor(n, 4, [&](int64_t begin, int64_t end) {
    p.layout.ForEachRun(begin, end, [&](int64_t b, int64_t e, int64_t a) {
      const quant::ClampBounds bounds(range, p.zero_points[a]);
      QuantizeRow(x + b, y + b, e - b, p.scales[a], bounds.lo, bounds.hi, p.zero_points[a]);
    });
  });
}

// Per-tensor quantization of float32 N x C x P (P: the spatial positions) written as
// N x P x C, a block of kQuantBlock positions at a time.
constexpr int64_t kQuantBlock = 64;

// Writes tile (C rows of len values) as len x C. The image inputs' C = 3 is written
// as three explicit stores per position, a store group the compiler vectorizes with
// byte permutes (the general loop stores one byte at a time).
template <typename Q>
inline void InterleaveTile(const Q* __restrict tile, Q* __restrict out, int64_t channels, int64_t len) {
  if (channels == 3) {
    const Q* __restrict t0 = tile;
    const Q* __restrict t1 = tile + kQuantBlock;
    const Q* __restrict t2 = tile + 2 * kQuantBlock;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      out[3 * i] = t0[i];
      out[3 * i + 1] = t1[i];
      out[3 * i + 2] = t2[i];
    }
    return;
  }
  for (int64_t i = 0; i < len; ++i)
    for (int64_t c = 0; c < channels; ++c) out[i * channels + c] = tile[c * kQuantBlock + i];
}

// One block of len positions: each channel's contiguous run is quantized into tile
// (a loop that vectorizes: in the wide clones 16 lanes, with the 8-bit narrowing
// in registers), then the tile is written with sequential stores. The clones do the
// same float operations (a division, a clamp, round half to even), so every clone
// is bit-identical to QuantizeLinear.
template <typename Q>
SEQTO_WIDE_CLONES_EXACT void QuantizeBlockToChannelsLast(const float* __restrict x, Q* __restrict out,
                                                         Q* __restrict tile, int64_t channels, int64_t plane,
                                                         int64_t len, float s, float lo, float hi, int32_t zp) {
  for (int64_t c = 0; c < channels; ++c) {
    const float* in = x + c * plane;
    Q* t = tile + c * kQuantBlock;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) t[i] = static_cast<Q>(quant::QuantizeClamped(in[i] / s, lo, hi, zp));
  }
  InterleaveTile(tile, out, channels, len);
}

template <typename Q>
void QuantizeToChannelsLastKernel(float s, int32_t zp, const float* x, Q* y, int64_t batch, int64_t channels,
                                  int64_t plane) {
  const quant::ClampBounds bounds(quant::RangeOf(DTypeOf<Q>()), zp);
  const int64_t blocks = (plane + kQuantBlock - 1) / kQuantBlock;
  ParallelFor(batch * blocks, kQuantBlock * channels * 4, [&](int64_t begin, int64_t end) {
    std::vector<Q> tile(static_cast<size_t>(kQuantBlock * channels));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / blocks, p0 = item % blocks * kQuantBlock, len = std::min(kQuantBlock, plane - p0);
      QuantizeBlockToChannelsLast(x + n * channels * plane + p0, y + (n * plane + p0) * channels, tile.data(), channels,
                                  plane, len, s, bounds.lo, bounds.hi, zp);
    }
  });
}

// (x - zp) * s over a run of 8/16-bit x; wide clones as QuantizeRow.
template <typename Q, typename Y>
SEQTO_WIDE_CLONES_EXACT void DequantizeRow(const Q* __restrict x, Y* __restrict y, int64_t n, float s, int32_t zp) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = FromFloat<Y>(static_cast<float>(static_cast<int32_t>(x[i]) - zp) * s);
}

template <typename Q, typename Y>
void DequantizeKernel(const QdqParams& p, const Q* x, Y* y, int64_t n) {
  ParallelFor(n, 2, [&](int64_t begin, int64_t end) {
    p.layout.ForEachRun(begin, end, [&](int64_t b, int64_t e, int64_t a) {
      const float s = p.scales[a];
      if constexpr (sizeof(Q) < 4) {  // x - zp fits in int32 (which vectorizes)
        DequantizeRow(x + b, y + b, e - b, s, p.zero_points[a]);
      } else {
        const int64_t zp = p.zero_points[a];
        for (int64_t i = b; i < e; ++i) y[i] = FromFloat<Y>(static_cast<float>(static_cast<int64_t>(x[i]) - zp) * s);
      }
    });
  });
}

// Calls f(T{}) for the quantized types (uint8, int8, uint16, int16, and int32 when
// `with_int32`).
template <typename F>
bool VisitQuantType(DType t, bool with_int32, F&& f) {
  switch (t) {
    case DType::kUInt8:
      f(uint8_t{});
      return true;
    case DType::kInt8:
      f(int8_t{});
      return true;
    case DType::kUInt16:
      f(uint16_t{});
      return true;
    case DType::kInt16:
      f(int16_t{});
      return true;
    case DType::kInt32:
      if (!with_int32) return false;
      f(int32_t{});
      return true;
    default:
      return false;
  }
}

// float32, float16, bfloat16 (and int32 when `with_int32`).
template <typename F>
bool VisitRealType(DType t, bool with_int32, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(float{});
      return true;
    case DType::kFloat16:
      f(Float16{});
      return true;
    case DType::kBFloat16:
      f(BFloat16{});
      return true;
    case DType::kInt32:
      if (!with_int32) return false;
      f(int32_t{});
      return true;
    default:
      return false;
  }
}

// com.seqto.QuantizeLinear with to_channels_last: float32 X, 8-bit Y, per tensor.
Status QuantizeToChannelsLast(KernelContext& ctx, const QdqParams& p, DType q_type, bool reference_only) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kFloat32) return DTypeError(0, x.dtype(), "float32");
  if (x.rank() < 3) return InputError(0, "X has shape " + ShapeToString(x.shape()) + ", expected N x C x spatial");
  if (p.layout.per_axis || !quant::Is8Bit(q_type))
    return UserError("to_channels_last needs per-tensor 8-bit quantization");
  Tensor& y = ctx.Allocate(0, q_type, ChannelsLastShape(x.shape()));
  if (reference_only) {  // QuantizeLinear, then the layout change
    Tensor first(q_type, x.shape());
    VisitQuantType(q_type, false, [&](auto qt) {
      using Q = decltype(qt);
      QuantizeKernel(p, x.data<float>(), first.data<Q>(), x.numel());
    });
    CopyToChannelsLast(first, y);
    return Status::Ok();
  }
  const int64_t plane = x.dim(0) * x.dim(1) == 0 ? 0 : x.numel() / (x.dim(0) * x.dim(1));
  VisitQuantType(q_type, false, [&](auto qt) {
    using Q = decltype(qt);
    QuantizeToChannelsLastKernel(p.scales[0], p.zero_points[0], x.data<float>(), y.data<Q>(), x.dim(0), x.dim(1),
                                 plane);
  });
  return Status::Ok();
}

Expected<std::unique_ptr<Kernel>> MakeQuantize(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(QdqAttrs attrs, ParseQdqAttrs(init));
  const bool reference_only = init.reference_only;
  return MakeKernel([attrs, reference_only](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const DType q_type = ctx.has_input(2)                          ? ctx.input(2).dtype()
                         : attrs.output_dtype != DType::kUndefined ? attrs.output_dtype
                                                                   : DType::kUInt8;
    if (!quant::IsQuantType(q_type)) return DTypeError(2, q_type, "uint8, int8, uint16, int16");
    if (!VisitRealType(x.dtype(), true, [](auto) {}))
      return DTypeError(0, x.dtype(), "float32, float16, bfloat16, int32");
    SEQTO_ASSIGN_OR_RETURN(QdqParams p, ReadQdqParams(ctx, attrs, q_type));
    if (attrs.to_channels_last) return QuantizeToChannelsLast(ctx, p, q_type, reference_only);
    Tensor& y = ctx.Allocate(0, q_type, x.shape());
    bool ok = true;
    const bool x_ok = VisitRealType(x.dtype(), true, [&](auto xt) {
      using X = decltype(xt);
      ok = VisitQuantType(q_type, false, [&](auto qt) {
        using Q = decltype(qt);
        QuantizeKernel(p, x.data<X>(), y.data<Q>(), x.numel());
      });
    });
    if (!x_ok) return DTypeError(0, x.dtype(), "float32, float16, bfloat16, int32");
    if (!ok) return DTypeError(2, q_type, "uint8, int8, uint16, int16");
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> MakeDequantize(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(QdqAttrs attrs, ParseQdqAttrs(init));
  return MakeKernel([attrs](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const DType y_type = ctx.input(1).dtype();
    if (!VisitQuantType(x.dtype(), true, [](auto) {}))
      return DTypeError(0, x.dtype(), "uint8, int8, uint16, int16, int32");
    SEQTO_ASSIGN_OR_RETURN(QdqParams p, ReadQdqParams(ctx, attrs, x.dtype()));
    Tensor& y = ctx.Allocate(0, y_type, x.shape());
    bool ok = true;
    const bool x_ok = VisitQuantType(x.dtype(), true, [&](auto qt) {
      using Q = decltype(qt);
      ok = VisitRealType(y_type, false, [&](auto yt) {
        using Y = decltype(yt);
        DequantizeKernel(p, x.data<Q>(), y.data<Y>(), x.numel());
      });
    });
    if (!x_ok) return DTypeError(0, x.dtype(), "uint8, int8, uint16, int16, int32");
    if (!ok) return DTypeError(1, y_type, "float32, float16, bfloat16");
    return Status::Ok();
  });
}

}  // namespace

void RegisterQuantizeLinear(OpRegistry& r) {
  for (const char* domain : {"", "com.microsoft"}) {
    r.Register({"QuantizeLinear", domain, domain[0] ? 1 : 10, MakeQuantize});
    r.Register({"DequantizeLinear", domain, domain[0] ? 1 : 10, MakeDequantize});
  }
  r.Register({"QuantizeLinear", "com.seqto", 1, MakeQuantize});  // with to_channels_last
}

}  // namespace seqto::ops
