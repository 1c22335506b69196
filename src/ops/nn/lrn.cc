// LRN (local response normalization across channels):
//   y = x / (bias + alpha / size * square_sum) ^ beta,
// square_sum[n, c, ...] = sum of x[n, c', ...]^2 for c' in
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] within [0, C).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

struct LrnAttrs {
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
  int64_t size = 1;
};

template <typename T>
void LrnKernel(const LrnAttrs& at, const T* x, int64_t n, int64_t c, int64_t hw, T* y) {
  const int64_t before = (at.size - 1) / 2, after = at.size - 1 - before;
  const T coef = static_cast<T>(static_cast<double>(at.alpha) / static_cast<double>(at.size));
  const T bias = static_cast<T>(at.bias), neg_beta = static_cast<T>(-at.beta);
  ParallelFor(n * c, hw * (std::min(at.size, c) + 8), [&](int64_t lo, int64_t hi) {
    std::vector<T> sum(static_cast<size_t>(hw));
    T* s = sum.data();
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t i = blk / c, ch = blk % c;
      const int64_t c0 = std::max<int64_t>(0, ch - before), c1 = std::min<int64_t>(c - 1, ch + after);
      std::fill(s, s + hw, T(0));
      for (int64_t k = c0; k <= c1; ++k) {
        const T* p = x + (i * c + k) * hw;
#pragma omp simd
        for (int64_t j = 0; j < hw; ++j) s[j] += p[j] * p[j];
      }
      const T* p = x + blk * hw;
      T* q = y + blk * hw;
      for (int64_t j = 0; j < hw; ++j) q[j] = p[j] * std::pow(bias + coef * s[j], neg_beta);
    }
  });
}

}  // namespace

void RegisterLRN(OpRegistry& r) {
  r.Register({"LRN", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                LrnAttrs at;
                if (!init.node.has_attr("size")) return UserError("attribute 'size' is required");
                SEQTO_ASSIGN_OR_RETURN(at.size, init.node.attr_int("size", 1));
                SEQTO_ASSIGN_OR_RETURN(at.alpha, init.node.attr_float("alpha", 1e-4f));
                SEQTO_ASSIGN_OR_RETURN(at.beta, init.node.attr_float("beta", 0.75f));
                SEQTO_ASSIGN_OR_RETURN(at.bias, init.node.attr_float("bias", 1.0f));
                if (at.size < 1) return UserError("attribute 'size' is " + std::to_string(at.size) + ", expected >= 1");
                if (init.node.num_present_inputs() != 1) return UserError("expects exactly one input (X)");
                return MakeKernel([at](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (x.rank() < 2)
                    return InputError(0,
                                      "(X) must have rank >= 2 (N x C x ...), got shape " + ShapeToString(x.shape()));
                  const int64_t n = x.dim(0), c = x.dim(1);
                  const int64_t hw = n * c == 0 ? 0 : x.numel() / (n * c);
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  if (x.numel() == 0) return Status::Ok();
                  switch (x.dtype()) {
                    case DType::kFloat32:
                      LrnKernel(at, x.data<float>(), n, c, hw, y.data<float>());
                      break;
                    case DType::kFloat64:
                      LrnKernel(at, x.data<double>(), n, c, hw, y.data<double>());
                      break;
                    case DType::kFloat16:
                    case DType::kBFloat16: {
                      const Tensor xf = reduce::HalfToFloat32(x);
                      Tensor yf(DType::kFloat32, x.shape());
                      LrnKernel(at, xf.data<float>(), n, c, hw, yf.data<float>());
                      reduce::Float32ToHalf(yf, y);
                      break;
                    }
                    default:
                      return DTypeError(0, x.dtype(), "float32, float64, float16, bfloat16");
                  }
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
