// Tile: repeats the input `repeats[d]` times along each dimension d. Written as a
// strided copy of the view [repeats[0], x[0], repeats[1], x[1], ...] whose repeat
// dimensions have stride 0.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateTile(const KernelInit& init) {
  const bool ref = init.reference_only;
  return MakeKernel([ref](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (!ctx.has_input(1)) return InputError(1, "'repeats' is required");
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> rep, tensorops::ReadIntList(ctx.input(1), 1, "repeats"));
    const int64_t r = x.rank();
    if (static_cast<int64_t>(rep.size()) != r)
      return InputError(1, "repeats " + tensorops::ListToString(rep) + " has " + std::to_string(rep.size()) +
                               " entries, the input has rank " + std::to_string(r));
    for (int64_t v : rep)
      if (v < 0) return InputError(1, "repeats " + tensorops::ListToString(rep) + " has a negative count");
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const std::vector<int64_t> in_strides = ContiguousStrides(x.shape());
    Shape out(r), view, strides;
    for (int64_t d = 0; d < r; ++d) {
      SEQTO_ASSIGN_OR_RETURN(out[d], tensorops::CheckedMul(x.dim(d), rep[d]));
      view.push_back(rep[d]);
      strides.push_back(0);
      view.push_back(x.dim(d));
      strides.push_back(in_strides[d]);
    }
    SEQTO_RETURN_IF_ERROR(tensorops::CheckedNumElements(out).status());
    Tensor& y = ctx.Allocate(0, x.dtype(), out);
    tensorops::StridedCopy(x.raw(), y.raw(), view, strides, es, ref);
    return Status::Ok();
  });
}

}  // namespace

void RegisterTile(OpRegistry& r) { r.Register({"Tile", "", 6, CreateTile}); }

}  // namespace seqto::ops
