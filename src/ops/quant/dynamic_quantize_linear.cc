// DynamicQuantizeLinear (opset 11): quantizes float32 x to uint8 with a scale and
// zero point computed from x itself, in float32, exactly as ONNX specifies:
//   rmin = min(0, min(x)), rmax = max(0, max(x))       (the range includes 0)
//   y_scale = (rmax - rmin) / 255
//   y_zero_point = round(clamp(0 - rmin / y_scale, 0, 255))
//   y = clamp(round(x / y_scale) + y_zero_point, 0, 255)
// with round = half to even. For an all-zero x (rmax == rmin) ONNX's formula divides
// by zero; like ONNX Runtime we use y_scale = 1, y_zero_point = 0 then. NaNs are
// ignored by the min/max (and quantize to the zero point).
#include <algorithm>
#include <cmath>

#include "ops/quant/quant_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

void RegisterDynamicQuantizeLinear(OpRegistry& r) {
  r.Register({"DynamicQuantizeLinear", "", 11, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (x.dtype() != DType::kFloat32) return DTypeError(0, x.dtype(), "float32");
                  const float* px = x.data<float>();
                  const int64_t n = x.numel();
                  // min/max in chunks (one per thread), then over the chunks.
                  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), n / 65536));
                  std::vector<float> mins(chunks, 0.f), maxs(chunks, 0.f);  // 0 is in the range anyway
                  ParallelFor(chunks, n / chunks + 1, [&](int64_t cb, int64_t ce) {
                    for (int64_t c = cb; c < ce; ++c) {
                      float lo = 0.f, hi = 0.f;
                      for (int64_t i = n * c / chunks, e = n * (c + 1) / chunks; i < e; ++i) {
                        lo = px[i] < lo ? px[i] : lo;  // NaN compares false: ignored
                        hi = px[i] > hi ? px[i] : hi;
                      }
                      mins[c] = lo;
                      maxs[c] = hi;
                    }
                  });
                  const float rmin = *std::min_element(mins.begin(), mins.end());
                  const float rmax = *std::max_element(maxs.begin(), maxs.end());
                  const quant::IntRange range{0, 255};
                  float scale = 1.f;
                  int32_t zp = 0;
                  if (rmax != rmin) {
                    scale = (rmax - rmin) / 255.f;
                    const float initial = 0.f - rmin / scale;
                    zp = static_cast<int32_t>(quant::RoundHalfEven(std::clamp(initial, 0.f, 255.f)));
                  }
                  Tensor& y = ctx.Allocate(0, DType::kUInt8, x.shape());
                  uint8_t* py = y.data<uint8_t>();
                  const quant::ClampBounds bounds(range, zp);
                  ParallelFor(n, 4, [&, lo = bounds.lo, hi = bounds.hi](int64_t b, int64_t e) {
                    const float s = scale, l = lo, h = hi;
                    const int32_t z = zp;
                    uint8_t* out = py;
                    const float* in = px;
#pragma omp simd
                    for (int64_t i = b; i < e; ++i)
                      out[i] = static_cast<uint8_t>(quant::QuantizeClamped(in[i] / s, l, h, z));
                  });
                  if (ctx.wants_output(1)) ctx.Allocate(1, DType::kFloat32, {}).data<float>()[0] = scale;
                  if (ctx.wants_output(2))
                    ctx.Allocate(2, DType::kUInt8, {}).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
