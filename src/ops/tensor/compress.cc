// Compress: keeps the slices along an axis (or the elements of the flattened input
// when no axis is given) whose condition is true. The condition may be shorter than
// the axis; a longer one is an error.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateCompress(const KernelInit& init) {
  const bool has_axis = init.node.has_attr("axis");
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 0));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    if (cond.rank() != 1) return InputError(1, "condition must be 1-D, got shape " + ShapeToString(cond.shape()));
    if (cond.dtype() != DType::kBool) return DTypeError(1, cond.dtype(), "bool");
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    Shape shape = x.shape();
    int64_t axis = 0;
    if (has_axis) {
      SEQTO_ASSIGN_OR_RETURN(axis, NormalizeAxis(axis_attr, x.rank()));
      if (x.rank() == 0) return InputError(0, "cannot compress a scalar along an axis");
    } else {
      shape = {x.numel()};
    }
    const int64_t dim = shape[axis];
    if (cond.numel() > dim)
      return InputError(
          1, "condition has " + std::to_string(cond.numel()) + " entries, the axis has " + std::to_string(dim));
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.numel(); ++i)
      if (cond.data<bool>()[i]) keep.push_back(i);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    int64_t inner = static_cast<int64_t>(es);
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    Shape out_shape = shape;
    out_shape[axis] = static_cast<int64_t>(keep.size());
    Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k : keep) {
        std::memcpy(dst, src + (o * dim + k) * inner, static_cast<size_t>(inner));
        dst += inner;
      }
    return Status::Ok();
  });
}

}  // namespace

void RegisterCompress(OpRegistry& r) { r.Register({"Compress", "", 9, CreateCompress}); }

}  // namespace seqto::ops
