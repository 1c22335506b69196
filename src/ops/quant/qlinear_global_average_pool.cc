// com.seqto.QLinearGlobalAveragePool: GlobalAveragePool of a quantized tensor,
// requantized, with ONNX Runtime's com.microsoft.QLinearGlobalAveragePool inputs:
// X (uint8/int8, N x C x D1..Dk, NCHW), x_scale, x_zero_point, y_scale, y_zero_point
// (scalars; zero points optional; Y has y_zero_point's type, else X's). What the QDQ
// fusion pass makes of  DQ(x) -> GlobalAveragePool -> Q(y).
//   Y[n, c] = clamp(round(float(S - count * x_zp) * x_scale / count / y_scale) + y_zp)
// with S the exact integer sum of the plane and round half to even. The float path
// (DequantizeLinear, a float sum, QuantizeLinear) rounds the sum of floats instead,
// so the two can differ by one quantum next to a .5 tie.
// channels_last = 1 (ONNX Runtime's attribute, set by seqto's layout pass): X is
// N x D1..Dk x C and Y is N x 1..1 x C.
#include <algorithm>
#include <vector>

#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum Input { kX = 0, kXScale, kXZp, kYScale, kYZp };

// Adds rows [0, count) of a count x stride matrix's columns [0, width) into sums
// (int32: the caller keeps count * 255 below 2^31). Vectorizes across the columns.
template <typename X>
SEQTO_WIDE_CLONES void SumColumns(const X* x, int64_t count, int64_t stride, int64_t width, int32_t* sums) {
  for (int64_t i = 0; i < count; ++i) {
    const X* row = x + i * stride;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) sums[c] += row[c];
  }
}

// Channels-last: each image's C sums run along the rows of its D1..Dk x C matrix,
// in blocks of channels (so that one image splits across threads too), with int32
// sums where they cannot overflow.
template <typename X, typename Y>
void PoolChannelsLast(const X* x, Y* y, int64_t batch, int64_t count, int64_t channels, float sx, int32_t zx, float sy,
                      int32_t zy, quant::ClampBounds bounds) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  const bool narrow = count < (int64_t{1} << 31) / 256;
  ParallelFor(batch * blocks, count * std::min(kBlock, channels), [&](int64_t begin, int64_t end) {
    int64_t sums[kBlock];
    int32_t narrow_sums[kBlock];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t n = item / blocks, c0 = item % blocks * kBlock, width = std::min(kBlock, channels - c0);
      const X* xn = x + n * count * channels + c0;
      if (narrow) {
        std::fill(narrow_sums, narrow_sums + width, 0);
        SumColumns(xn, count, channels, width, narrow_sums);
        std::copy(narrow_sums, narrow_sums + width, sums);
      } else {
        std::fill(sums, sums + width, 0);
        for (int64_t i = 0; i < count; ++i)
          for (int64_t c = 0; c < width; ++c) sums[c] += xn[i * channels + c];
      }
      for (int64_t c = 0; c < width; ++c) {
        const float mean = static_cast<float>(sums[c] - count * zx) * sx / static_cast<float>(count);
        y[n * channels + c0 + c] = static_cast<Y>(quant::QuantizeClamped(mean / sy, bounds.lo, bounds.hi, zy));
      }
    }
  });
}

template <typename X, typename Y>
void Pool(const X* x, Y* y, int64_t planes, int64_t count, float sx, int32_t zx, float sy, int32_t zy,
          quant::ClampBounds bounds) {
  ParallelFor(planes, count, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const X* xp = x + p * count;
      int64_t sum = 0;
      for (int64_t i = 0; i < count; ++i) sum += xp[i];
      const float mean = static_cast<float>(sum - count * zx) * sx / static_cast<float>(count);
      y[p] = static_cast<Y>(quant::QuantizeClamped(mean / sy, bounds.lo, bounds.hi, zy));
    }
  });
}

Expected<std::unique_ptr<Kernel>> MakeQLinearGlobalAveragePool(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(int64_t channels_last, init.node.attr_int("channels_last", 0));
  if (channels_last != 0 && channels_last != 1)
    return UserError("attribute 'channels_last' is " + std::to_string(channels_last) + ", expected 0 or 1");
  return MakeKernel([nhwc = channels_last == 1](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(kX);
    if (!quant::Is8Bit(x.dtype())) return DTypeError(kX, x.dtype(), "uint8, int8");
    if (x.rank() < 3)
      return InputError(kX, "X has shape " + ShapeToString(x.shape()) + ", expected rank >= 3 (" +
                                (nhwc ? "N x spatial x C" : "N x C x spatial") + ")");
    SEQTO_ASSIGN_OR_RETURN(float sx, quant::ScalarScale(ctx, kXScale, "x_scale"));
    SEQTO_ASSIGN_OR_RETURN(float sy, quant::ScalarScale(ctx, kYScale, "y_scale"));
    SEQTO_ASSIGN_OR_RETURN(int32_t zx, quant::ScalarZp(ctx, kXZp, x.dtype(), "x_zero_point"));
    const DType y_type = ctx.has_input(kYZp) ? ctx.input(kYZp).dtype() : x.dtype();
    if (!quant::Is8Bit(y_type)) return DTypeError(kYZp, y_type, "uint8, int8");
    SEQTO_ASSIGN_OR_RETURN(int32_t zy, quant::ScalarZp(ctx, kYZp, y_type, "y_zero_point"));
    const int64_t channels = nhwc ? x.dim(x.rank() - 1) : x.dim(1);
    const int64_t planes = x.dim(0) * channels;
    const int64_t count = planes == 0 ? 0 : x.numel() / planes;
    if (count == 0 && planes > 0)
      return InputError(kX, "X has shape " + ShapeToString(x.shape()) + ": nothing to pool");
    Shape y_shape(x.shape().size(), 1);
    y_shape[0] = x.dim(0);
    y_shape[nhwc ? y_shape.size() - 1 : 1] = channels;
    Tensor& y = ctx.Allocate(0, y_type, y_shape);
    if (planes == 0) return Status::Ok();
    const quant::ClampBounds bounds(quant::RangeOf(y_type), zy);
    const bool xu8 = x.dtype() == DType::kUInt8, yu8 = y_type == DType::kUInt8;
    if (nhwc) {
      const int64_t n = x.dim(0);
      if (xu8 && yu8)
        PoolChannelsLast(x.data<uint8_t>(), y.data<uint8_t>(), n, count, channels, sx, zx, sy, zy, bounds);
      else if (xu8)
        PoolChannelsLast(x.data<uint8_t>(), y.data<int8_t>(), n, count, channels, sx, zx, sy, zy, bounds);
      else if (yu8)
        PoolChannelsLast(x.data<int8_t>(), y.data<uint8_t>(), n, count, channels, sx, zx, sy, zy, bounds);
      else
        PoolChannelsLast(x.data<int8_t>(), y.data<int8_t>(), n, count, channels, sx, zx, sy, zy, bounds);
      return Status::Ok();
    }
    if (xu8 && yu8)
      Pool(x.data<uint8_t>(), y.data<uint8_t>(), planes, count, sx, zx, sy, zy, bounds);
    else if (xu8)
      Pool(x.data<uint8_t>(), y.data<int8_t>(), planes, count, sx, zx, sy, zy, bounds);
    else if (yu8)
      Pool(x.data<int8_t>(), y.data<uint8_t>(), planes, count, sx, zx, sy, zy, bounds);
    else
      Pool(x.data<int8_t>(), y.data<int8_t>(), planes, count, sx, zx, sy, zy, bounds);
    return Status::Ok();
  });
}

}  // namespace

void RegisterQLinearGlobalAveragePool(OpRegistry& r) {
  r.Register({"QLinearGlobalAveragePool", "com.seqto", 1, MakeQLinearGlobalAveragePool});
  // ONNX Runtime's contrib op of the same name and inputs (QOperator models).
  r.Register({"QLinearGlobalAveragePool", "com.microsoft", 1, MakeQLinearGlobalAveragePool});
}

}  // namespace seqto::ops
