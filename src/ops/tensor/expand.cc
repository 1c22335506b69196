// Expand: broadcasts the input to a shape (numpy rules, in both directions: the
// output has the larger extent of each dimension).
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateExpand(const KernelInit& init) {
  const bool ref = init.reference_only;
  return MakeKernel([ref](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (!ctx.has_input(1)) return InputError(1, "'shape' is required");
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, tensorops::ReadIntList(ctx.input(1), 1, "shape"));
    for (int64_t d : shape)
      if (d < 0) return InputError(1, "shape " + tensorops::ListToString(shape) + " has a negative extent");
    SEQTO_ASSIGN_OR_RETURN(const Shape out, BroadcastShapes(x.shape(), shape));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    if (out == x.shape()) {
      ctx.SetOutput(0, x);
      return Status::Ok();
    }
    const size_t r = out.size(), off = r - x.shape().size();
    const std::vector<int64_t> in_strides = ContiguousStrides(x.shape());
    std::vector<int64_t> strides(r, 0);
    for (size_t d = off; d < r; ++d) strides[d] = x.dim(d - off) == 1 ? 0 : in_strides[d - off];
    Tensor& y = ctx.Allocate(0, x.dtype(), out);
    tensorops::StridedCopy(x.raw(), y.raw(), out, strides, es, ref);
    return Status::Ok();
  });
}

}  // namespace

void RegisterExpand(OpRegistry& r) { r.Register({"Expand", "", 8, CreateExpand}); }

}  // namespace seqto::ops
