// Relu: y = max(x, 0).
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {
template <typename T>
void ReluKernel(const T* x, T* y, int64_t n) {
  ParallelFor(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
  });
}
}  // namespace

void RegisterRelu(OpRegistry& r) {
  r.Register({"Relu", "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  switch (x.dtype()) {
                    case DType::kFloat32: ReluKernel(x.data<float>(), y.data<float>(), x.numel()); break;
                    case DType::kFloat64: ReluKernel(x.data<double>(), y.data<double>(), x.numel()); break;
                    case DType::kInt32: ReluKernel(x.data<int32_t>(), y.data<int32_t>(), x.numel()); break;
                    case DType::kInt64: ReluKernel(x.data<int64_t>(), y.data<int64_t>(), x.numel()); break;
                    case DType::kInt8: ReluKernel(x.data<int8_t>(), y.data<int8_t>(), x.numel()); break;
                    default: return DTypeError(0, x.dtype(), "float32, float64, int32, int64, int8");
                  }
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
