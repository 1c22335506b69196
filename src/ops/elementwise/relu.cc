// Relu: y = max(x, 0) (NaN stays NaN).
#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {
constexpr ew::TypeSet kReluTypes = ew::kFloatTypes | ew::kSignedTypes;

template <typename T>
void ReluKernel(const T* x, T* y, int64_t n) {
  // ew::Select/Less instead of `?:` and `<` keep the loop vectorizable (elementwise.h).
  ew::MapUnary(x, y, n, ew::kCheap, [](T v) { return ew::Select(ew::Less(v, T(0)), T(0), v); });
}
}  // namespace

void RegisterRelu(OpRegistry& r) {
  r.Register({"Relu", "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (!ew::InSet(x.dtype(), kReluTypes)) return ew::TypeError(0, x.dtype(), kReluTypes);
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  ew::VisitType(x.dtype(), [&](auto tag) {
                    using T = decltype(tag);
                    if constexpr (ew::kIsHalf<T>) {  // negatives become +0, anything else stays
                      ew::MapUnary(x.data<T>(), y.data<T>(), x.numel(), ew::kCheap,
                                   [](T v) { return ew::Less(ew::Load(v), 0.0f) ? T{0} : v; });
                    } else if constexpr (ew::Allows<T>(kReluTypes)) {
                      ReluKernel(x.data<T>(), y.data<T>(), x.numel());
                    }
                  });
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
