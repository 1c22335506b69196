// NonZero: the indices of the non-zero elements, as int64 [rank, count] in
// row-major order (a scalar counts as a 1-D tensor of one element, as in numpy).
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::vector<bool>> NonZeroMask(const Tensor& x) {
  const int64_t n = x.numel();
  std::vector<bool> nz(static_cast<size_t>(n));
  switch (x.dtype()) {
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) nz[i] = x.data<bool>()[i];
      return nz;
    case DType::kFloat16:
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) nz[i] = (x.data<uint16_t>()[i] & 0x7fff) != 0;
      return nz;
    default:
      break;
  }
  const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) nz[i] = x.data<T>()[i] != T(0);
  });
  if (!ok) return DTypeError(0, x.dtype(), "numeric types and bool");
  return nz;
}

Expected<std::unique_ptr<Kernel>> CreateNonZero(const KernelInit&) {
  return MakeKernel([](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    SEQTO_ASSIGN_OR_RETURN(const std::vector<bool> nz, NonZeroMask(x));
    const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
    const int64_t r = static_cast<int64_t>(shape.size());
    int64_t count = 0;
    for (bool b : nz) count += b;
    Tensor& y = ctx.Allocate(0, DType::kInt64, {r, count});
    int64_t* out = y.data<int64_t>();
    std::vector<int64_t> idx(r, 0);
    int64_t k = 0;
    for (size_t i = 0; i < nz.size(); ++i) {
      if (nz[i]) {
        for (int64_t d = 0; d < r; ++d) out[d * count + k] = idx[d];
        ++k;
      }
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    return Status::Ok();
  });
}

}  // namespace

void RegisterNonZero(OpRegistry& r) { r.Register({"NonZero", "", 9, CreateNonZero}); }

}  // namespace seqto::ops
