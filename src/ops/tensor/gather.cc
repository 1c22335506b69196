// Gather (whole slices picked by indices along an axis), GatherElements (one
// element per index, output shaped like the indices) and GatherND (slices picked
// by index tuples, with leading batch dimensions). Indices may be negative
// (counted from the end); an index out of range is an error.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

// Indices as int64, checked against [-dim, dim) and made non-negative.
Expected<std::vector<int64_t>> ReadIndices(const Tensor& t, int index, int64_t dim) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) return DTypeError(index, t.dtype(), "int32, int64");
  std::vector<int64_t> idx = t.ToInt64s();
  for (int64_t& i : idx) {
    if (i < -dim || i >= dim)
      return InputError(index,
                        "index " + std::to_string(i) + " is out of range for an axis of extent " + std::to_string(dim));
    if (i < 0) i += dim;
  }
  return idx;
}

Expected<std::unique_ptr<Kernel>> CreateGather(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 0));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const int64_t r = x.rank();
    if (r == 0) return InputError(0, "cannot gather from a scalar");
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, r));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const int64_t dim = x.dim(axis);
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> idx, ReadIndices(ind, 1, dim));
    Shape out_shape(x.shape().begin(), x.shape().begin() + axis);
    out_shape.insert(out_shape.end(), ind.shape().begin(), ind.shape().end());
    out_shape.insert(out_shape.end(), x.shape().begin() + axis + 1, x.shape().end());
    Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    int64_t inner = static_cast<int64_t>(es);
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.dim(d);
    const int64_t n = static_cast<int64_t>(idx.size());
    if (inner == 0 || n == 0 || outer == 0) return Status::Ok();
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    ParallelFor(outer * n, inner / 4 + 1, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t o = item / n, j = item % n;
        std::memcpy(dst + item * inner, src + (o * dim + idx[j]) * inner, static_cast<size_t>(inner));
      }
    });
    return Status::Ok();
  });
}

template <typename U>
void GatherElementsKernel(const U* src, U* dst, const Shape& x_shape, const Shape& i_shape, int64_t axis,
                          const std::vector<int64_t>& idx) {
  const int64_t r = static_cast<int64_t>(i_shape.size());
  const std::vector<int64_t> xs = ContiguousStrides(x_shape);
  const int64_t n = NumElements(i_shape);
  std::vector<int64_t> pos(r, 0);
  int64_t base = 0;  // source offset of pos with the axis coordinate zeroed
  for (int64_t k = 0; k < n; ++k) {
    dst[k] = src[base + idx[k] * xs[axis]];
    for (int64_t d = r - 1; d >= 0; --d) {
      ++pos[d];
      if (d != axis) base += xs[d];
      if (pos[d] < i_shape[d]) break;
      if (d != axis) base -= xs[d] * i_shape[d];
      pos[d] = 0;
    }
  }
}

Expected<std::unique_ptr<Kernel>> CreateGatherElements(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 0));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const int64_t r = x.rank();
    if (r == 0) return InputError(0, "cannot gather from a scalar");
    if (ind.rank() != r)
      return InputError(1, "has rank " + std::to_string(ind.rank()) + ", the data has rank " + std::to_string(r));
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, r));
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && ind.dim(d) > x.dim(d))
        return InputError(1, "shape " + ShapeToString(ind.shape()) + " exceeds the data's " + ShapeToString(x.shape()) +
                                 " outside axis " + std::to_string(axis));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> idx, ReadIndices(ind, 1, x.dim(axis)));
    Tensor& y = ctx.Allocate(0, x.dtype(), ind.shape());
    if (y.numel() == 0) return Status::Ok();
    tensorops::VisitElementSize(es, [&](auto tag) {
      using U = decltype(tag);
      GatherElementsKernel(x.data<U>(), y.data<U>(), x.shape(), ind.shape(), axis, idx);
    });
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateGatherND(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t batch_dims, init.node.attr_int("batch_dims", 0));
  if (batch_dims < 0) return UserError("attribute 'batch_dims' must not be negative");
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    if (ind.rank() < 1 || x.rank() < 1) return UserError("data and indices must have rank >= 1");
    for (int64_t d = 0; d < batch_dims && d < ind.rank() && d < x.rank(); ++d)
      if (ind.dim(d) != x.dim(d))
        return InputError(1, "shape " + ShapeToString(ind.shape()) + " differs from the data's " +
                                 ShapeToString(x.shape()) + " in batch dimension " + std::to_string(d));
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets,
                           tensorops::NdIndexOffsets(ind, 1, x.shape(), batch_dims));
    const int64_t k = ind.dim(ind.rank() - 1);
    Shape out_shape(ind.shape().begin(), ind.shape().end() - 1);
    out_shape.insert(out_shape.end(), x.shape().begin() + batch_dims + k, x.shape().end());
    int64_t slice = static_cast<int64_t>(es);
    for (int64_t d = batch_dims + k; d < x.rank(); ++d) slice *= x.dim(d);
    Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(y.raw());
    const auto n = static_cast<int64_t>(offsets.size());
    if (slice == 0 || y.numel() == 0) return Status::Ok();
    ParallelFor(n, slice / 4 + 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        std::memcpy(dst + t * slice, src + offsets[t] * static_cast<int64_t>(es), static_cast<size_t>(slice));
    });
    return Status::Ok();
  });
}

}  // namespace

void RegisterGather(OpRegistry& r) {
  r.Register({"GatherND", "", 11, CreateGatherND});
  r.Register({"Gather", "", 1, CreateGather});
  r.Register({"GatherElements", "", 1, CreateGatherElements});
}

}  // namespace seqto::ops
