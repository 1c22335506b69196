// ArgMax, ArgMin: the int64 index of the largest/smallest element along `axis`.
// Ties go to the first index, or the last with select_last_index (opset 12). As in
// numpy, NaN counts as the extreme value (the first NaN wins).
#include <algorithm>
#include <type_traits>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using reduce::IsNan;
struct ArgAttrs {
  bool is_max = true;
  int64_t axis = 0;
  bool keepdims = true;
  bool select_last = false;
};

// True when x should replace the current best b.
template <typename T, bool kMax, bool kLast>
inline bool Better(T x, T b) {
  if (IsNan(b)) return kLast && IsNan(x);
  if (IsNan(x)) return true;
  if constexpr (kLast)
    return kMax ? x >= b : x <= b;
  else
    return kMax ? x > b : x < b;
}

template <typename T, bool kMax, bool kLast>
void ArgKernel(const T* x, int64_t outer, int64_t axis, int64_t inner, int64_t* y) {
  if (inner == 1) {
    ParallelFor(outer, axis, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = x + o * axis;
        T best = p[0];
        int64_t bi = 0;
        for (int64_t a = 1; a < axis; ++a)
          if (Better<T, kMax, kLast>(p[a], best)) {
            best = p[a];
            bi = a;
          }
        y[o] = bi;
      }
    });
    return;
  }
  constexpr int64_t kBlock = 1024;
  const int64_t nblocks = (inner + kBlock - 1) / kBlock;
  ParallelFor(outer * nblocks, axis * std::min(inner, kBlock), [&](int64_t b, int64_t e) {
    std::vector<T> best(static_cast<size_t>(std::min(inner, kBlock)));
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / nblocks, j0 = (item % nblocks) * kBlock;
      const int64_t n = std::min(kBlock, inner - j0);
      const T* p = x + o * axis * inner + j0;
      int64_t* yi = y + o * inner + j0;
      for (int64_t j = 0; j < n; ++j) {
        best[j] = p[j];
        yi[j] = 0;
      }
      for (int64_t a = 1; a < axis; ++a) {
        const T* row = p + a * inner;
        for (int64_t j = 0; j < n; ++j)
          if (Better<T, kMax, kLast>(row[j], best[j])) {
            best[j] = row[j];
            yi[j] = a;
          }
      }
    }
  });
}

template <typename T>
void ArgDispatch(const ArgAttrs& at, const T* x, int64_t outer, int64_t axis, int64_t inner, int64_t* y) {
  if (at.is_max) {
    if (at.select_last)
      ArgKernel<T, true, true>(x, outer, axis, inner, y);
    else
      ArgKernel<T, true, false>(x, outer, axis, inner, y);
  } else {
    if (at.select_last)
      ArgKernel<T, false, true>(x, outer, axis, inner, y);
    else
      ArgKernel<T, false, false>(x, outer, axis, inner, y);
  }
}

Status RunArg(const ArgAttrs& at, KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (rank == 0) return InputError(0, "(data) must have rank >= 1, got a scalar");
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis, reduce::CheckAxis(at.axis, rank, "attribute 'axis'"));
  const reduce::AxisView v = reduce::ViewAround(x.shape(), axis);
  Shape out_shape = x.shape();
  if (at.keepdims)
    out_shape[axis] = 1;
  else
    out_shape.erase(out_shape.begin() + axis);
  Tensor& y = ctx.Allocate(0, DType::kInt64, out_shape);
  if (y.numel() == 0) return Status::Ok();
  if (v.axis == 0)
    return InputError(0, "(data) has shape " + ShapeToString(x.shape()) + ": axis " + std::to_string(axis) +
                             " is empty, it has no largest or smallest element");
  int64_t* out = y.data<int64_t>();
  if (reduce::IsHalfType(x.dtype())) {
    const Tensor xf = reduce::HalfToFloat32(x);
    ArgDispatch(at, xf.data<float>(), v.outer, v.axis, v.inner, out);
    return Status::Ok();
  }
  const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ArgDispatch(at, x.data<T>(), v.outer, v.axis, v.inner, out);
  });
  if (!ok) return DTypeError(0, x.dtype(), "numeric types");
  return Status::Ok();
}

void RegisterArg(OpRegistry& r, const char* name, bool is_max) {
  r.Register({name, "", 1, [is_max](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                ArgAttrs at;
                at.is_max = is_max;
                SEQTO_ASSIGN_OR_RETURN(at.axis, init.node.attr_int("axis", 0));
                SEQTO_ASSIGN_OR_RETURN(const int64_t keepdims, init.node.attr_int("keepdims", 1));
                SEQTO_ASSIGN_OR_RETURN(const int64_t last, init.node.attr_int("select_last_index", 0));
                at.keepdims = keepdims != 0;
                at.select_last = last != 0;
                if (init.node.num_present_inputs() != 1) return UserError("expects exactly one input (data)");
                return MakeKernel([at](KernelContext& ctx) { return RunArg(at, ctx); });
              }});
}

}  // namespace

void RegisterArgMinMax(OpRegistry& r) {
  RegisterArg(r, "ArgMax", true);
  RegisterArg(r, "ArgMin", false);
}

}  // namespace seqto::ops
