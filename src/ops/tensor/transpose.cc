// Transpose: permutes dimensions (default: reverses them). A permutation that only
// moves extents of 1 aliases the input; others copy with contiguous runs or tiles.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateTranspose(const KernelInit& init) {
  const bool has_perm = init.node.has_attr("perm");
  SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, init.node.attr_ints("perm"));
  if (has_perm) {
    std::vector<bool> seen(perm.size(), false);
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
        return UserError("attribute 'perm' " + tensorops::ListToString(perm) + " is not a permutation");
      seen[p] = true;
    }
  }
  const bool ref = init.reference_only;
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t r = x.rank();
    std::vector<int64_t> p = perm;
    if (!has_perm) {
      p.resize(r);
      for (int64_t d = 0; d < r; ++d) p[d] = r - 1 - d;
    } else if (static_cast<int64_t>(p.size()) != r) {
      return UserError("attribute 'perm' " + tensorops::ListToString(perm) + " has " + std::to_string(p.size()) +
                       " entries, the input has rank " + std::to_string(r));
    }
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const std::vector<int64_t> in_strides = ContiguousStrides(x.shape());
    Shape out_shape(r);
    std::vector<int64_t> strides(r);
    for (int64_t d = 0; d < r; ++d) {
      out_shape[d] = x.dim(p[d]);
      strides[d] = in_strides[p[d]];
    }
    if (tensorops::IsContiguousView(out_shape, strides)) {
      ctx.SetOutput(0, x.Reshaped(std::move(out_shape)));
      return Status::Ok();
    }
    Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
    tensorops::StridedCopy(x.raw(), y.raw(), out_shape, strides, es, ref);
    return Status::Ok();
  });
}

}  // namespace

void RegisterTranspose(OpRegistry& r) { r.Register({"Transpose", "", 1, CreateTranspose}); }

}  // namespace seqto::ops
