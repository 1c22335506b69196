// OneHot: output[..., i, ...] = values[1] where i equals the index (negative
// indices count from depth), values[0] elsewhere; the new axis is `axis`.
#include <cmath>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateOneHot(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", -1));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& ind = ctx.input(0);
    const Tensor& values = ctx.input(2);
    if (DTypeSize(ind.dtype()) == 0 || ind.dtype() == DType::kBool) return DTypeError(0, ind.dtype(), "a numeric type");
    SEQTO_ASSIGN_OR_RETURN(const double depth_v, tensorops::ReadScalar(ctx.input(1), 1, "depth"));
    const int64_t depth = static_cast<int64_t>(std::floor(depth_v));
    if (depth < 1) return InputError(1, "depth must be positive, got " + std::to_string(depth_v));
    if (values.numel() != 2)
      return InputError(2, "values must have two elements [off, on], got shape " + ShapeToString(values.shape()));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(2, values.dtype()));
    const int64_t out_rank = ind.rank() + 1;
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, out_rank));
    Shape out_shape = ind.shape();
    out_shape.insert(out_shape.begin() + axis, depth);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= ind.dim(d);
    const int64_t inner = ind.numel() / std::max<int64_t>(outer, 1);
    const std::vector<double> idx = ind.ToDoubles();
    Tensor& y = ctx.Allocate(0, values.dtype(), out_shape);
    const auto* v = static_cast<const std::byte*>(values.raw());
    tensorops::FillElements(y.raw(), y.numel(), v, es);
    auto* dst = static_cast<std::byte*>(y.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = static_cast<int64_t>(idx[o * inner + i]);
        if (k < 0) k += depth;
        if (k < 0 || k >= depth) continue;
        std::memcpy(dst + ((o * depth + k) * inner + i) * static_cast<int64_t>(es), v + es, es);
      }
    return Status::Ok();
  });
}

}  // namespace

void RegisterOneHot(OpRegistry& r) { r.Register({"OneHot", "", 9, CreateOneHot}); }

}  // namespace seqto::ops
