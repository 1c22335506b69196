// Trilu (upper or lower triangle of the last two dims, shifted by k; the rest
// zero) and EyeLike (a 2-D tensor with ones on diagonal k).
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateTrilu(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t upper, init.node.attr_int("upper", 1));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) return InputError(0, "must have rank >= 2, got shape " + ShapeToString(x.shape()));
    int64_t k = 0;
    if (ctx.has_input(1)) {
      SEQTO_ASSIGN_OR_RETURN(const double kv, tensorops::ReadScalar(ctx.input(1), 1, "k"));
      k = static_cast<int64_t>(kv);
    }
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
    tensorops::VisitElementSize(es, [&](auto tag) {
      using U = decltype(tag);
      const U* src = x.data<U>();
      U* dst = y.data<U>();
      for (int64_t m = 0; m < mats; ++m)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t o = (m * rows + i) * cols + j;
            const bool keep = upper ? j - i >= k : j - i <= k;
            dst[o] = keep ? src[o] : U(0);
          }
    });
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateEyeLike(const KernelInit& init) {
  const bool has_dtype = init.node.has_attr("dtype");
  SEQTO_ASSIGN_OR_RETURN(const int64_t dtype_attr, init.node.attr_int("dtype", 0));
  SEQTO_ASSIGN_OR_RETURN(const int64_t k, init.node.attr_int("k", 0));
  const DType dtype = static_cast<DType>(dtype_attr);
  if (has_dtype && !IsSupportedDType(dtype))
    return UserError("attribute 'dtype' " + std::to_string(dtype_attr) + " is not a supported type");
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2) return InputError(0, "must be 2-D, got shape " + ShapeToString(x.shape()));
    const DType out_type = has_dtype ? dtype : x.dtype();
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, out_type));
    std::byte zero[8] = {}, one[8] = {};
    SEQTO_RETURN_IF_ERROR(tensorops::ValueToBytes(1.0, out_type, one));
    Tensor& y = ctx.Allocate(0, out_type, x.shape());
    tensorops::FillElements(y.raw(), y.numel(), zero, es);
    auto* dst = static_cast<std::byte*>(y.raw());
    const int64_t rows = x.dim(0), cols = x.dim(1);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t j = i + k;
      if (j >= 0 && j < cols) std::memcpy(dst + (i * cols + j) * static_cast<int64_t>(es), one, es);
    }
    return Status::Ok();
  });
}

}  // namespace

void RegisterTrilu(OpRegistry& r) {
  r.Register({"Trilu", "", 14, CreateTrilu});
  r.Register({"EyeLike", "", 9, CreateEyeLike});
}

}  // namespace seqto::ops
