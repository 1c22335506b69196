// DepthToSpace (DCR or CRD order) and SpaceToDepth: rearrange NCHW blocks between
// channels and space; both are a reshape, a transpose and a reshape, done as one
// strided copy.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<int64_t> BlockSize(const KernelInit& init) {
  if (!init.node.has_attr("blocksize")) return UserError("attribute 'blocksize' is required");
  SEQTO_ASSIGN_OR_RETURN(const int64_t b, init.node.attr_int("blocksize", 0));
  if (b < 1) return UserError("attribute 'blocksize' must be positive, got " + std::to_string(b));
  return b;
}

Expected<std::unique_ptr<Kernel>> CreateDepthToSpace(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t b, BlockSize(init));
  SEQTO_ASSIGN_OR_RETURN(const std::string mode, init.node.attr_string("mode", "DCR"));
  if (mode != "DCR" && mode != "CRD") return UserError("attribute 'mode' is '" + mode + "', expected DCR or CRD");
  const bool dcr = mode == "DCR";
  const bool ref = init.reference_only;
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4) return InputError(0, "must have rank 4 (NCHW), got shape " + ShapeToString(x.shape()));
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    if (c % (b * b) != 0)
      return InputError(
          0, "channels " + std::to_string(c) + " are not a multiple of blocksize^2 = " + std::to_string(b * b));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const int64_t oc = c / (b * b);
    // Source view: DCR [N, b1, b2, C', H, W]; CRD [N, C', b1, b2, H, W].
    const Shape src_shape = dcr ? Shape{n, b, b, oc, h, w} : Shape{n, oc, b, b, h, w};
    const std::vector<int64_t> s = ContiguousStrides(src_shape);
    const int64_t sb1 = dcr ? s[1] : s[2], sb2 = dcr ? s[2] : s[3], sc = dcr ? s[3] : s[1];
    // Output order: [N, C', H, b1, W, b2].
    const Shape view{n, oc, h, b, w, b};
    const std::vector<int64_t> strides{s[0], sc, s[4], sb1, s[5], sb2};
    Tensor& y = ctx.Allocate(0, x.dtype(), {n, oc, h * b, w * b});
    tensorops::StridedCopy(x.raw(), y.raw(), view, strides, es, ref);
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateSpaceToDepth(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t b, BlockSize(init));
  const bool ref = init.reference_only;
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 4) return InputError(0, "must have rank 4 (NCHW), got shape " + ShapeToString(x.shape()));
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
    if (h % b != 0 || w % b != 0)
      return InputError(0, "height and width of " + ShapeToString(x.shape()) + " are not multiples of blocksize " +
                               std::to_string(b));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    // Source view [N, C, H', b1, W', b2] -> output [N, b1, b2, C, H', W'].
    const Shape src_shape{n, c, h / b, b, w / b, b};
    const std::vector<int64_t> s = ContiguousStrides(src_shape);
    const Shape view{n, b, b, c, h / b, w / b};
    const std::vector<int64_t> strides{s[0], s[3], s[5], s[1], s[2], s[4]};
    Tensor& y = ctx.Allocate(0, x.dtype(), {n, c * b * b, h / b, w / b});
    tensorops::StridedCopy(x.raw(), y.raw(), view, strides, es, ref);
    return Status::Ok();
  });
}

}  // namespace

void RegisterDepthToSpace(OpRegistry& r) {
  r.Register({"DepthToSpace", "", 1, CreateDepthToSpace});
  r.Register({"SpaceToDepth", "", 1, CreateSpaceToDepth});
}

}  // namespace seqto::ops
