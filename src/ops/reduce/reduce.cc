// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.
//
// Axes come from the 'axes' attribute, or from input 1 from opset 13 (ReduceSum)
// or 18 (the others); no axes means all axes unless noop_with_empty_axes is set,
// when each element is reduced alone (x, |x|, x^2, log x, ... as ONNX's reference).
// Reducing an empty set gives the identity of the reduction: 0 for sums, 1 for
// products, -inf/+inf (or the integer limits) for max/min, NaN for a float mean.
//
// Floating inputs accumulate in double (pairwise over contiguous runs), integers
// in 64 bits with wrap-around; float16/bfloat16 are computed in float32.
//
// The kernel collapses the input into alternating kept/reduced blocks. When the
// innermost block is reduced, each output reduces contiguous runs; when it is
// kept, whole rows of outputs accumulate contiguous rows of input (vectorizable).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using reduce::AxesMask;
using reduce::FromDouble;
using reduce::IsNan;

enum class Kind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// --- The traversal plan -----------------------------------------------------

struct Plan {
  int64_t out_count = 1;  // number of outputs
  int64_t count = 1;      // input elements per output
  bool inner_reduced = false;
  int64_t inner = 1;                              // length of the innermost contiguous block
  std::vector<int64_t> red_offsets;               // run starts, relative to an output's base
  std::vector<int64_t> kept_sizes, kept_strides;  // kept dims outside the innermost block
};

Plan MakePlan(const Shape& shape, const std::vector<bool>& mask) {
  struct Dim {
    int64_t size;
    bool reduced;
  };
  std::vector<Dim> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && dims.back().reduced == mask[d])
      dims.back().size *= shape[d];
    else
      dims.push_back({shape[d], mask[d]});
  }
  if (dims.empty()) dims.push_back({1, false});
  std::vector<int64_t> strides(dims.size());
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= dims[d].size;
  }
  Plan p;
  p.inner_reduced = dims.back().reduced;
  p.inner = dims.back().size;
  std::vector<int64_t> red_sizes, red_strides;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d].reduced)
      p.count *= dims[d].size;
    else
      p.out_count *= dims[d].size;
    if (d + 1 == dims.size()) break;
    if (dims[d].reduced) {
      red_sizes.push_back(dims[d].size);
      red_strides.push_back(strides[d]);
    } else {
      p.kept_sizes.push_back(dims[d].size);
      p.kept_strides.push_back(strides[d]);
    }
  }
  int64_t runs = 1;
  for (int64_t s : red_sizes) runs *= s;
  p.red_offsets.reserve(static_cast<size_t>(runs));
  std::vector<int64_t> idx(red_sizes.size(), 0);
  int64_t off = 0;
  for (int64_t r = 0; r < runs; ++r) {
    p.red_offsets.push_back(off);
    for (size_t d = red_sizes.size(); d-- > 0;) {
      ++idx[d];
      off += red_strides[d];
      if (idx[d] < red_sizes[d]) break;
      off -= red_strides[d] * red_sizes[d];
      idx[d] = 0;
    }
  }
  return p;
}

// Offset of kept-dims index `linear` (row-major over kept_sizes).
int64_t KeptOffset(const Plan& p, int64_t linear) {
  int64_t off = 0;
  for (size_t d = p.kept_sizes.size(); d-- > 0;) {
    off += (linear % p.kept_sizes[d]) * p.kept_strides[d];
    linear /= p.kept_sizes[d];
  }
  return off;
}

// Runs a policy over the plan, leaving each output's unfinalized accumulator in acc.
// A policy P has: Acc, Init(), Combine(a, b), Run(p, n, o) -> Acc (a contiguous run
// for output o), Row(acc, p, n, o0) (acc[j] += p[j] for outputs o0 + j).
template <typename T, typename P>
void Traverse(const Plan& plan, const T* x, typename P::Acc* acc, const P& pol) {
  using Acc = typename P::Acc;
  const int64_t nruns = static_cast<int64_t>(plan.red_offsets.size());
  if (plan.inner_reduced) {
    const int64_t len = plan.inner;
    // Reduce all: split the one run into chunks of a fixed size (not one per
    // thread), so that the result does not depend on the thread count.
    constexpr int64_t kChunk = int64_t{1} << 15;
    if (plan.out_count == 1 && nruns == 1 && len >= 4 * kChunk) {
      const int64_t nchunks = (len + kChunk - 1) / kChunk;
      std::vector<Acc> part(static_cast<size_t>(nchunks));
      ParallelFor(nchunks, kChunk, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) part[c] = pol.Run(x + c * kChunk, std::min(kChunk, len - c * kChunk), 0);
      });
      Acc a = P::Init();
      for (const Acc& v : part) a = P::Combine(a, v);
      acc[0] = a;
      return;
    }
    ParallelFor(plan.out_count, plan.count, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* base = x + KeptOffset(plan, o);
        Acc a = P::Init();
        for (int64_t r = 0; r < nruns; ++r) a = P::Combine(a, pol.Run(base + plan.red_offsets[r], len, o));
        acc[o] = a;
      }
    });
    return;
  }
  const int64_t width = plan.inner;
  const int64_t rows = plan.out_count / width;
  // Few rows: split them into column blocks so that threads still have work.
  const int64_t block = rows >= 16 ? width : std::max<int64_t>(512, (width + 15) / 16);
  const int64_t nblocks = (width + block - 1) / block;
  ParallelFor(rows * nblocks, plan.count * std::min(block, width), [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t row = item / nblocks, j0 = (item % nblocks) * block;
      const int64_t n = std::min(block, width - j0);
      const int64_t o0 = row * width + j0;
      const T* base = x + KeptOffset(plan, row) + j0;
      Acc* a = acc + o0;
      for (int64_t j = 0; j < n; ++j) a[j] = P::Init();
      for (int64_t r = 0; r < nruns; ++r) pol.Row(a, base + plan.red_offsets[r], n, o0);
    }
  });
}

// --- Policies ---------------------------------------------------------------

// Elementwise maps applied before summing, computed in the accumulator type.
// For integers the accumulator is uint64 (wrap-around, no undefined overflow).
struct MapId {
  template <typename Acc, typename T>
  static Acc Apply(T x) {
    return static_cast<Acc>(x);
  }
};
struct MapAbs {
  template <typename Acc, typename T>
  static Acc Apply(T x) {
    if constexpr (std::is_floating_point_v<Acc>)
      return std::fabs(static_cast<Acc>(x));
    else if constexpr (std::is_signed_v<T>)
      return x < T(0) ? Acc(0) - static_cast<Acc>(x) : static_cast<Acc>(x);
    else
      return static_cast<Acc>(x);
  }
};
struct MapSquare {
  template <typename Acc, typename T>
  static Acc Apply(T x) {
    const Acc v = static_cast<Acc>(x);
    return v * v;
  }
};

template <typename T, typename AccT, typename Map>
struct SumPolicy {
  using Acc = AccT;
  static Acc Init() { return Acc(0); }
  static Acc Combine(Acc a, Acc b) { return a + b; }
  // Pairwise over blocks of 128, a vectorized sum inside each block.
  Acc Run(const T* p, int64_t n, int64_t) const {
    if (n <= 128) {
      Acc s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += Map::template Apply<Acc>(p[i]);
      return s;
    }
    const int64_t half = (n / 2 + 63) / 64 * 64;
    return Run(p, half, 0) + Run(p + half, n - half, 0);
  }
  void Row(Acc* __restrict a, const T* __restrict p, int64_t n, int64_t) const {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) a[j] += Map::template Apply<Acc>(p[j]);
  }
};

template <typename T, typename AccT>
struct ProdPolicy {
  using Acc = AccT;
  static Acc Init() { return Acc(1); }
  static Acc Combine(Acc a, Acc b) { return a * b; }
  Acc Run(const T* p, int64_t n, int64_t) const {
    Acc s = 1;
    for (int64_t i = 0; i < n; ++i) s *= static_cast<Acc>(p[i]);
    return s;
  }
  void Row(Acc* __restrict a, const T* __restrict p, int64_t n, int64_t) const {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) a[j] *= static_cast<Acc>(p[j]);
  }
};

// Max (kMax = true) or min; NaN propagates as in numpy.
template <typename T, bool kMax>
struct ExtremePolicy {
  using Acc = T;
  static T Init() {
    if constexpr (std::is_floating_point_v<T>)
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    else
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  // Takes x if it is better than m or NaN; keeps m once it is NaN.
  static T Pick(T m, T x) {
    const bool better = kMax ? x > m : x < m;
    return better || IsNan(x) ? x : m;
  }
  static T Combine(T a, T b) { return IsNan(a) ? a : Pick(a, b); }
  // Vectorized: a plain max/min reduction plus a separate NaN flag.
  T Run(const T* p, int64_t n, int64_t) const {
    T m = Init();
    int nan = 0;
    if constexpr (kMax) {
#pragma omp simd reduction(max : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = p[i] > m ? p[i] : m;
        nan |= IsNan(p[i]);
      }
    } else {
#pragma omp simd reduction(min : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = p[i] < m ? p[i] : m;
        nan |= IsNan(p[i]);
      }
    }
    if constexpr (std::is_floating_point_v<T>)
      if (nan) return std::numeric_limits<T>::quiet_NaN();
    return m;
  }
  void Row(T* __restrict a, const T* __restrict p, int64_t n, int64_t) const {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) a[j] = Pick(a[j], p[j]);
  }
};

// Second pass of LogSumExp: sum of exp(x - max) per output.
template <typename T>
struct SumExpPolicy {
  using Acc = double;
  const T* max;  // per output, from the first pass
  static double Init() { return 0; }
  static double Combine(double a, double b) { return a + b; }
  double Run(const T* p, int64_t n, int64_t o) const {
    const double m = static_cast<double>(max[o]);
    if (!std::isfinite(m)) return 0;  // the result is m itself (see finalize)
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(p[i]) - m);
    return s;
  }
  void Row(double* a, const T* p, int64_t n, int64_t o0) const {
    for (int64_t j = 0; j < n; ++j) {
      const double m = static_cast<double>(max[o0 + j]);
      if (std::isfinite(m)) a[j] += std::exp(static_cast<double>(p[j]) - m);
    }
  }
};

// --- Running one reduction --------------------------------------------------

// Sum-like kinds: accumulate map(x), then finalize.
template <typename T, typename Acc, typename Map, typename Fin>
void SumLike(const Plan& plan, const T* x, bool empty, T* y, Fin fin) {
  std::vector<Acc> acc(static_cast<size_t>(plan.out_count), Acc(0));
  if (!empty) Traverse(plan, x, acc.data(), SumPolicy<T, Acc, Map>{});
  ParallelFor(plan.out_count, 4, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) y[o] = fin(acc[o]);
  });
}

template <typename T>
void Reduce(Kind kind, const Plan& plan, const T* x, bool empty, T* y) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  using Acc = std::conditional_t<kFloat, double, uint64_t>;
  const double count = static_cast<double>(plan.count);
  const int64_t icount = plan.count;
  switch (kind) {
    case Kind::kSum:
      SumLike<T, Acc, MapId>(plan, x, empty, y, [](Acc a) { return static_cast<T>(a); });
      return;
    case Kind::kMean:
      SumLike<T, Acc, MapId>(plan, x, empty, y, [&](Acc a) -> T {
        if constexpr (kFloat) {
          return static_cast<T>(a / count);
        } else {
          if (icount == 0) return T(0);
          if constexpr (std::is_signed_v<T>)
            return static_cast<T>(static_cast<int64_t>(a) / icount);
          else
            return static_cast<T>(a / static_cast<uint64_t>(icount));
        }
      });
      return;
    case Kind::kL1:
      SumLike<T, Acc, MapAbs>(plan, x, empty, y, [](Acc a) { return static_cast<T>(a); });
      return;
    case Kind::kSumSquare:
      SumLike<T, Acc, MapSquare>(plan, x, empty, y, [](Acc a) { return static_cast<T>(a); });
      return;
    case Kind::kL2:
      SumLike<T, Acc, MapSquare>(plan, x, empty, y,
                                 [](Acc a) { return FromDouble<T>(std::sqrt(static_cast<double>(a))); });
      return;
    case Kind::kLogSum:
      SumLike<T, double, MapId>(plan, x, empty, y, [](double a) { return FromDouble<T>(std::log(a)); });
      return;
    case Kind::kProd: {
      std::vector<Acc> acc(static_cast<size_t>(plan.out_count), Acc(1));
      if (!empty) Traverse(plan, x, acc.data(), ProdPolicy<T, Acc>{});
      for (int64_t o = 0; o < plan.out_count; ++o) y[o] = static_cast<T>(acc[o]);
      return;
    }
    case Kind::kMax:
    case Kind::kMin: {
      // Accumulate straight into the output.
      if (kind == Kind::kMax) {
        std::fill(y, y + plan.out_count, ExtremePolicy<T, true>::Init());
        if (!empty) Traverse(plan, x, y, ExtremePolicy<T, true>{});
      } else {
        std::fill(y, y + plan.out_count, ExtremePolicy<T, false>::Init());
        if (!empty) Traverse(plan, x, y, ExtremePolicy<T, false>{});
      }
      return;
    }
    case Kind::kLogSumExp: {
      std::vector<T> max(static_cast<size_t>(plan.out_count), ExtremePolicy<T, true>::Init());
      std::vector<double> sum(static_cast<size_t>(plan.out_count), 0.0);
      if (!empty) {
        Traverse(plan, x, max.data(), ExtremePolicy<T, true>{});
        Traverse(plan, x, sum.data(), SumExpPolicy<T>{max.data()});
      }
      for (int64_t o = 0; o < plan.out_count; ++o) {
        const double m = static_cast<double>(max[o]);
        double v;
        if (empty)
          v = -std::numeric_limits<double>::infinity();
        else if (!std::isfinite(m))
          v = m;  // all -inf: -inf; any +inf: +inf; NaN: NaN
        else
          v = m + std::log(sum[o]);
        y[o] = FromDouble<T>(v);
      }
      return;
    }
  }
}

// --- The op -----------------------------------------------------------------

struct Attrs {
  Kind kind;
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  bool axes_from_input = false;
  std::vector<int64_t> axes;  // the attribute, when axes are not an input
};

Status RunReduce(const Attrs& at, KernelContext& ctx) {
  if (!ctx.has_input(0)) return InputError(0, "(data) is required");
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  std::vector<int64_t> axes = at.axes;
  bool noop = false;
  if (at.axes_from_input && ctx.has_input(1)) {
    const Tensor& a = ctx.input(1);
    if (a.dtype() != DType::kInt64 && a.dtype() != DType::kInt32) return DTypeError(1, a.dtype(), "int64 (axes)");
    if (a.rank() > 1) return InputError(1, "(axes) must be 1-D, got shape " + ShapeToString(a.shape()));
    axes = ReadInts(a);
  }
  std::vector<bool> mask;
  if (axes.empty()) {
    noop = at.axes_from_input && at.noop_with_empty_axes;
    mask.assign(static_cast<size_t>(rank), !noop);
  } else {
    SEQTO_ASSIGN_OR_RETURN(mask, AxesMask(axes, rank, at.axes_from_input ? "input 1 (axes)" : "attribute 'axes'"));
  }
  Shape out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!mask[d])
      out_shape.push_back(x.dim(d));
    else if (at.keepdims)
      out_shape.push_back(1);
  }
  bool empty = x.numel() == 0;
  // A reduced, empty input gives identities; an empty output needs no work.
  Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
  if (y.numel() == 0) return Status::Ok();
  const Plan plan = empty ? Plan{} : MakePlan(x.shape(), mask);
  Plan empty_plan;
  if (empty) {  // every output reduces zero elements
    empty_plan.out_count = y.numel();
    empty_plan.count = 0;
  }
  const Plan& p = empty ? empty_plan : plan;

  if (reduce::IsHalfType(x.dtype())) {
    const Tensor xf = reduce::HalfToFloat32(x);
    Tensor yf(DType::kFloat32, out_shape);
    Reduce<float>(at.kind, p, xf.data<float>(), empty, yf.data<float>());
    reduce::Float32ToHalf(yf, y);
    return Status::Ok();
  }
  const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Reduce<T>(at.kind, p, x.data<T>(), empty, y.data<T>());
  });
  if (!ok) return DTypeError(0, x.dtype(), "numeric types");
  return Status::Ok();
}

void RegisterOne(OpRegistry& r, const char* name, Kind kind) {
  r.Register({name, "", 1, [kind](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                Attrs at;
                at.kind = kind;
                const int64_t axes_input_since = kind == Kind::kSum ? 13 : 18;
                at.axes_from_input = init.opset >= axes_input_since;
                SEQTO_ASSIGN_OR_RETURN(int64_t keepdims, init.node.attr_int("keepdims", 1));
                at.keepdims = keepdims != 0;
                if (at.axes_from_input) {
                  if (init.node.has_attr("axes"))
                    return UserError("attribute 'axes' was replaced by input 1 at opset " +
                                     std::to_string(axes_input_since));
                  SEQTO_ASSIGN_OR_RETURN(int64_t noop, init.node.attr_int("noop_with_empty_axes", 0));
                  at.noop_with_empty_axes = noop != 0;
                } else {
                  if (init.node.num_present_inputs() > 1)
                    return UserError("takes one input before opset " + std::to_string(axes_input_since) +
                                     " (axes is an attribute)");
                  SEQTO_ASSIGN_OR_RETURN(at.axes, init.node.attr_ints("axes"));
                }
                if (init.node.inputs.empty() || init.node.inputs[0].empty())
                  return UserError("input 0 (data) is required");
                return MakeKernel([at](KernelContext& ctx) { return RunReduce(at, ctx); });
              }});
}

}  // namespace

void RegisterReduce(OpRegistry& r) {
  RegisterOne(r, "ReduceSum", Kind::kSum);
  RegisterOne(r, "ReduceMean", Kind::kMean);
  RegisterOne(r, "ReduceMax", Kind::kMax);
  RegisterOne(r, "ReduceMin", Kind::kMin);
  RegisterOne(r, "ReduceProd", Kind::kProd);
  RegisterOne(r, "ReduceL1", Kind::kL1);
  RegisterOne(r, "ReduceL2", Kind::kL2);
  RegisterOne(r, "ReduceLogSum", Kind::kLogSum);
  RegisterOne(r, "ReduceLogSumExp", Kind::kLogSumExp);
  RegisterOne(r, "ReduceSumSquare", Kind::kSumSquare);
}

}  // namespace seqto::ops
