// ScatterElements (and its old name Scatter, opsets 9-10) and ScatterND: a copy of
// the data with the elements (ScatterElements) or slices (ScatterND) that the
// indices point at replaced by (or, with `reduction`, combined with) the updates.
// Duplicates are applied in order, so the last one wins, as in the ONNX reference.
#include <algorithm>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

// Calls fn(dst_offset, k) for each index element k, in order.
template <typename F>
void ForEachTarget(const Shape& x_shape, const Shape& i_shape, int64_t axis, const std::vector<int64_t>& idx, F&& fn) {
  const int64_t r = static_cast<int64_t>(i_shape.size());
  const std::vector<int64_t> xs = ContiguousStrides(x_shape);
  const int64_t n = NumElements(i_shape);
  std::vector<int64_t> pos(r, 0);
  int64_t base = 0;
  for (int64_t k = 0; k < n; ++k) {
    fn(base + idx[k] * xs[axis], k);
    for (int64_t d = r - 1; d >= 0; --d) {
      ++pos[d];
      if (d != axis) base += xs[d];
      if (pos[d] < i_shape[d]) break;
      if (d != axis) base -= xs[d] * i_shape[d];
      pos[d] = 0;
    }
  }
}

template <typename T>
T Combine(Reduction red, T a, T b) {
  switch (red) {
    case Reduction::kAdd:
      return static_cast<T>(a + b);
    case Reduction::kMul:
      return static_cast<T>(a * b);
    case Reduction::kMax:
      return std::max(a, b);
    case Reduction::kMin:
      return std::min(a, b);
    default:
      return b;
  }
}

Expected<Reduction> ParseReduction(const ir::Node& node) {
  SEQTO_ASSIGN_OR_RETURN(const std::string name, node.attr_string("reduction", "none"));
  if (name == "none") return Reduction::kNone;
  if (name == "add") return Reduction::kAdd;
  if (name == "mul") return Reduction::kMul;
  if (name == "max") return Reduction::kMax;
  if (name == "min") return Reduction::kMin;
  return UserError("attribute 'reduction' is '" + name + "', expected none, add, mul, max or min");
}

Expected<std::unique_ptr<Kernel>> CreateScatterElements(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 0));
  SEQTO_ASSIGN_OR_RETURN(const Reduction red, ParseReduction(init.node));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    const int64_t r = x.rank();
    if (r == 0) return InputError(0, "cannot scatter into a scalar");
    if (ind.rank() != r)
      return InputError(1, "has rank " + std::to_string(ind.rank()) + ", the data has rank " + std::to_string(r));
    if (upd.shape() != ind.shape())
      return InputError(2,
                        "has shape " + ShapeToString(upd.shape()) + ", the indices have " + ShapeToString(ind.shape()));
    if (upd.dtype() != x.dtype())
      return InputError(2, "has type " + DTypeName(upd.dtype()) + ", the data has " + DTypeName(x.dtype()));
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, r));
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && ind.dim(d) > x.dim(d))
        return InputError(1, "shape " + ShapeToString(ind.shape()) + " exceeds the data's " + ShapeToString(x.shape()) +
                                 " outside axis " + std::to_string(axis));
    if (ind.dtype() != DType::kInt64 && ind.dtype() != DType::kInt32) return DTypeError(1, ind.dtype(), "int32, int64");
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    std::vector<int64_t> idx = ind.ToInt64s();
    const int64_t dim = x.dim(axis);
    for (int64_t& i : idx) {
      if (i < -dim || i >= dim)
        return InputError(
            1, "index " + std::to_string(i) + " is out of range for an axis of extent " + std::to_string(dim));
      if (i < 0) i += dim;
    }
    Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
    if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    if (red == Reduction::kNone || x.dtype() == DType::kBool) {
      if (red != Reduction::kNone) return DTypeError(0, x.dtype(), "numeric types (with a reduction)");
      tensorops::VisitElementSize(es, [&](auto tag) {
        using U = decltype(tag);
        U* out = y.data<U>();
        const U* u = upd.data<U>();
        ForEachTarget(x.shape(), ind.shape(), axis, idx, [&](int64_t off, int64_t k) { out[off] = u[k]; });
      });
      return Status::Ok();
    }
    const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = y.data<T>();
      const T* u = upd.data<T>();
      ForEachTarget(x.shape(), ind.shape(), axis, idx,
                    [&](int64_t off, int64_t k) { out[off] = Combine(red, out[off], u[k]); });
    });
    if (!ok) return DTypeError(0, x.dtype(), "float32, float64, integer types (with a reduction)");
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateScatterND(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const Reduction red, ParseReduction(init.node));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    if (upd.dtype() != x.dtype())
      return InputError(2, "has type " + DTypeName(upd.dtype()) + ", the data has " + DTypeName(x.dtype()));
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> offsets, tensorops::NdIndexOffsets(ind, 1, x.shape(), 0));
    const int64_t k = ind.dim(ind.rank() - 1);
    Shape expected(ind.shape().begin(), ind.shape().end() - 1);
    expected.insert(expected.end(), x.shape().begin() + k, x.shape().end());
    if (upd.shape() != expected)
      return InputError(2, "has shape " + ShapeToString(upd.shape()) + ", expected " + ShapeToString(expected));
    int64_t slice = 1;
    for (int64_t d = k; d < x.rank(); ++d) slice *= x.dim(d);
    Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
    if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    const auto n = static_cast<int64_t>(offsets.size());
    if (red == Reduction::kNone) {
      const auto bytes = static_cast<size_t>(slice) * es;
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(static_cast<std::byte*>(y.raw()) + offsets[t] * static_cast<int64_t>(es),
                    static_cast<const std::byte*>(upd.raw()) + t * static_cast<int64_t>(bytes), bytes);
      return Status::Ok();
    }
    const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = y.data<T>();
      const T* u = upd.data<T>();
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < slice; ++i) out[offsets[t] + i] = Combine(red, out[offsets[t] + i], u[t * slice + i]);
    });
    if (!ok) return DTypeError(0, x.dtype(), "float32, float64, integer types (with a reduction)");
    return Status::Ok();
  });
}

}  // namespace

void RegisterScatterElements(OpRegistry& r) {
  r.Register({"ScatterND", "", 11, CreateScatterND});
  r.Register({"ScatterElements", "", 1, CreateScatterElements});
  r.Register({"Scatter", "", 1, CreateScatterElements});
}

}  // namespace seqto::ops
