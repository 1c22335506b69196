// TopK: the k largest (or smallest) elements along `axis` and their int64 indices.
// k is an attribute before opset 10 and input 1 from 10; `largest` and `sorted`
// come in opset 11. Equal values keep the lower index first, as ONNX specifies;
// NaN counts as larger than any number. Results are always sorted (with
// sorted = 0 ONNX leaves the order unspecified, so sorted is a valid order).
#include <algorithm>
#include <utility>
#include <vector>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using reduce::IsNan;

struct TopKAttrs {
  int64_t k = -1;  // the attribute (before opset 10)
  bool k_from_input = false;
  int64_t axis = -1;
  bool largest = true;
};

template <typename T>
void TopKKernel(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest, T* values,
                int64_t* indices) {
  using Item = std::pair<T, int64_t>;
  // Strict weak order: NaN is largest; equal values keep the lower index first.
  auto before = [largest](const Item& a, const Item& b) {
    const bool na = IsNan(a.first), nb = IsNan(b.first);
    if (na != nb) return largest ? na : nb;
    if (!na && a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  };
  int64_t cost = n + 1;
  for (int64_t m = k; m > 1; m >>= 1) cost += k;  // ~ n + k log k
  ParallelFor(outer * inner, cost, [&](int64_t b, int64_t e) {
    std::vector<Item> items(static_cast<size_t>(n));
    for (int64_t s = b; s < e; ++s) {
      const int64_t o = s / inner, i = s % inner;
      const T* p = x + o * n * inner + i;
      for (int64_t a = 0; a < n; ++a) items[a] = {p[a * inner], a};
      if (k < n) std::nth_element(items.begin(), items.begin() + k, items.end(), before);
      std::sort(items.begin(), items.begin() + k, before);
      T* vo = values + o * k * inner + i;
      int64_t* io = indices + o * k * inner + i;
      for (int64_t a = 0; a < k; ++a) {
        vo[a * inner] = items[a].first;
        io[a * inner] = items[a].second;
      }
    }
  });
}

Status RunTopK(const TopKAttrs& at, KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (rank == 0) return InputError(0, "(X) must have rank >= 1, got a scalar");
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis, reduce::CheckAxis(at.axis, rank, "attribute 'axis'"));
  int64_t k = at.k;
  if (at.k_from_input) {
    if (!ctx.has_input(1)) return InputError(1, "(K) is required from opset 10");
    const Tensor& kt = ctx.input(1);
    if (kt.dtype() != DType::kInt64 && kt.dtype() != DType::kInt32) return DTypeError(1, kt.dtype(), "int64 (K)");
    if (kt.numel() != 1 || kt.rank() > 1)
      return InputError(1, "(K) must hold a single value, got shape " + ShapeToString(kt.shape()));
    k = ReadInts(kt)[0];
  }
  const reduce::AxisView v = reduce::ViewAround(x.shape(), axis);
  if (k < 0) return InputError(1, "(K) is " + std::to_string(k) + ", expected >= 0");
  if (k > v.axis)
    return UserError("k = " + std::to_string(k) + " is larger than axis " + std::to_string(axis) + " of input 0 (" +
                     ShapeToString(x.shape()) + ")");
  Shape out_shape = x.shape();
  out_shape[axis] = k;
  Tensor scratch_values, scratch_indices;
  Tensor& values = reduce::OutputOrScratch(ctx, 0, x.dtype(), out_shape, scratch_values);
  Tensor& indices = reduce::OutputOrScratch(ctx, 1, DType::kInt64, out_shape, scratch_indices);
  if (values.numel() == 0) return Status::Ok();
  int64_t* io = indices.data<int64_t>();
  if (reduce::IsHalfType(x.dtype())) {
    const Tensor xf = reduce::HalfToFloat32(x);
    Tensor vf(DType::kFloat32, out_shape);
    TopKKernel(xf.data<float>(), v.outer, v.axis, v.inner, k, at.largest, vf.data<float>(), io);
    reduce::Float32ToHalf(vf, values);
    return Status::Ok();
  }
  const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    TopKKernel(x.data<T>(), v.outer, v.axis, v.inner, k, at.largest, values.data<T>(), io);
  });
  if (!ok) return DTypeError(0, x.dtype(), "numeric types");
  return Status::Ok();
}

}  // namespace

void RegisterTopK(OpRegistry& r) {
  r.Register({"TopK", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                TopKAttrs at;
                at.k_from_input = init.opset >= 10;
                SEQTO_ASSIGN_OR_RETURN(at.axis, init.node.attr_int("axis", -1));
                if (init.opset >= 11) {
                  SEQTO_ASSIGN_OR_RETURN(const int64_t largest, init.node.attr_int("largest", 1));
                  SEQTO_ASSIGN_OR_RETURN(const int64_t sorted, init.node.attr_int("sorted", 1));
                  (void)sorted;  // results are always sorted (valid for either value)
                  at.largest = largest != 0;
                }
                if (at.k_from_input) {
                  if (init.node.num_present_inputs() < 2) return UserError("input 1 (K) is required from opset 10");
                } else {
                  if (!init.node.has_attr("k")) return UserError("attribute 'k' is required before opset 10");
                  SEQTO_ASSIGN_OR_RETURN(at.k, init.node.attr_int("k", -1));
                  if (at.k < 0) return UserError("attribute 'k' is " + std::to_string(at.k) + ", expected >= 0");
                }
                if (init.node.inputs.empty() || init.node.inputs[0].empty())
                  return UserError("input 0 (X) is required");
                return MakeKernel([at](KernelContext& ctx) { return RunTopK(at, ctx); });
              }});
}

}  // namespace seqto::ops
