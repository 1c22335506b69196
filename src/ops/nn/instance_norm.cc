// InstanceNormalization: y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c],
// with mean and (population) variance over the spatial dims of each (n, c).
// Statistics are computed in double, two passes (mean, then squared deviations).
#include <cmath>
#include <vector>

#include "ops/nn/moments.h"
#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

template <typename T>
void InstanceNormKernel(const T* x, int64_t n, int64_t c, int64_t hw, const std::vector<double>& scale,
                        const std::vector<double>& bias, double eps, T* y) {
  ParallelFor(n * c, hw * 3, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t ch = blk % c;
      const T* p = x + blk * hw;
      T* q = y + blk * hw;
      double mean = 0, variance = 0;
      RowMoments(p, hw, mean, variance);
      const double a = scale[ch] / std::sqrt(variance + eps);
      const T mt = static_cast<T>(mean), at = static_cast<T>(a), bt = static_cast<T>(bias[ch]);
#pragma omp simd
      for (int64_t i = 0; i < hw; ++i) q[i] = (p[i] - mt) * at + bt;  // mean first: no cancellation
    }
  });
}

bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

}  // namespace

void RegisterInstanceNormalization(OpRegistry& r) {
  r.Register({"InstanceNormalization", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const float epsilon, init.node.attr_float("epsilon", 1e-5f));
                if (!(epsilon >= 0))
                  return UserError("attribute 'epsilon' is " + std::to_string(epsilon) + ", expected >= 0");
                if (init.node.num_present_inputs() != 3)
                  return UserError("expects 3 inputs (input, scale, B), got " +
                                   std::to_string(init.node.num_present_inputs()));
                return MakeKernel([epsilon](KernelContext& ctx) -> Status {
                  const char* names[] = {"input", "scale", "B"};
                  for (int i = 0; i < 3; ++i)
                    if (!ctx.has_input(i)) return InputError(i, std::string("(") + names[i] + ") is required");
                  const Tensor& x = ctx.input(0);
                  if (!IsFloatType(x.dtype())) return DTypeError(0, x.dtype(), "float32, float64, float16, bfloat16");
                  if (x.rank() < 3)
                    return InputError(
                        0, "(input) must have rank >= 3 (N x C x D1 ...), got shape " + ShapeToString(x.shape()));
                  const int64_t n = x.dim(0), c = x.dim(1);
                  const int64_t hw = n * c == 0 ? 0 : x.numel() / (n * c);
                  std::vector<double> params[2];
                  for (int i = 1; i < 3; ++i) {
                    const Tensor& t = ctx.input(i);
                    if (t.dtype() != x.dtype())
                      return InputError(i, std::string("(") + names[i] + ") has type " + DTypeName(t.dtype()) +
                                               ", expected " + DTypeName(x.dtype()) + " like the input");
                    if (t.rank() != 1 || t.dim(0) != c)
                      return InputError(i, std::string("(") + names[i] + ") has shape " + ShapeToString(t.shape()) +
                                               ", expected " + std::to_string(c) + " (one value per channel)");
                    params[i - 1] = t.ToDoubles();
                  }
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  if (x.numel() == 0) return Status::Ok();
                  switch (x.dtype()) {
                    case DType::kFloat32:
                      InstanceNormKernel(x.data<float>(), n, c, hw, params[0], params[1], epsilon, y.data<float>());
                      break;
                    case DType::kFloat64:
                      InstanceNormKernel(x.data<double>(), n, c, hw, params[0], params[1], epsilon, y.data<double>());
                      break;
                    default: {
                      const Tensor xf = reduce::HalfToFloat32(x);
                      Tensor yf(DType::kFloat32, x.shape());
                      InstanceNormKernel(xf.data<float>(), n, c, hw, params[0], params[1], epsilon, yf.data<float>());
                      reduce::Float32ToHalf(yf, y);
                    }
                  }
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
