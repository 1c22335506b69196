// Range: start, start + delta, ... up to (excluding) limit; max(ceil((limit -
// start) / delta), 0) elements of the inputs' type.
#include <cmath>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

template <typename T>
Status RangeKernel(KernelContext& ctx) {
  const T start = ctx.input(0).data<T>()[0], limit = ctx.input(1).data<T>()[0], delta = ctx.input(2).data<T>()[0];
  if (delta == T(0)) return InputError(2, "delta must not be 0");
  const double count =
      std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
  if (count > 1e12) return UserError("range would have " + std::to_string(count) + " elements");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor& y = ctx.Allocate(0, DTypeOf<T>(), {n});
  T* out = y.data<T>();
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  return Status::Ok();
}

Expected<std::unique_ptr<Kernel>> CreateRange(const KernelInit&) {
  return MakeKernel([](KernelContext& ctx) -> Status {
    for (int i = 0; i < 3; ++i) {
      if (!ctx.has_input(i)) return InputError(i, "is required");
      if (ctx.input(i).numel() != 1)
        return InputError(i, "must be a scalar, got shape " + ShapeToString(ctx.input(i).shape()));
      if (ctx.input(i).dtype() != ctx.input(0).dtype())
        return InputError(
            i, "has type " + DTypeName(ctx.input(i).dtype()) + ", input 0 has " + DTypeName(ctx.input(0).dtype()));
    }
    switch (ctx.input(0).dtype()) {
      case DType::kFloat32:
        return RangeKernel<float>(ctx);
      case DType::kFloat64:
        return RangeKernel<double>(ctx);
      case DType::kInt16:
        return RangeKernel<int16_t>(ctx);
      case DType::kInt32:
        return RangeKernel<int32_t>(ctx);
      case DType::kInt64:
        return RangeKernel<int64_t>(ctx);
      default:
        return DTypeError(0, ctx.input(0).dtype(), "float32, float64, int16, int32, int64");
    }
  });
}

}  // namespace

void RegisterRange(OpRegistry& r) { r.Register({"Range", "", 11, CreateRange}); }

}  // namespace seqto::ops
