// com.seqto.QLinearAdd and QLinearMul: the sum (product) of two quantized tensors,
// requantized, with ONNX Runtime's com.microsoft.QLinearAdd inputs: A, a_scale,
// a_zero_point, B, b_scale, b_zero_point, y_scale, y_zero_point (scales and zero
// points scalars; zero points optional; A, B uint8/int8, broadcasting as numpy; Y has
// y_zero_point's type, else A's). Attributes y_min / y_max: the clamp of a fused
// activation (fused_util.h). What the QDQ fusion pass makes of
//   DQ(a), DQ(b) -> Add | Mul -> [Relu | Clip] -> Q(y).
//
// QLinearAdd computes as ONNX Runtime's QLinearAdd does (MLAS, the x86 AVX2 kernel),
// because ONNX Runtime makes the same fusion of the same QDQ graph and is where most
// users deploy: seqto's accuracy of a quantized model should be the accuracy they get
// there. MLAS folds the scales into two ratios and the zero points into one constant,
//   ra = a_scale / y_scale,  rb = b_scale / y_scale,
//   fixed = y_zp - fma(ra, a_zp, rb * b_zp),
//   Y = clamp(round_half_even(fma(A, ra, fma(B, rb, fixed)))),
// with A and B swapped (operands and parameters) where A is the broadcast scalar of
// each span. The float QDQ graph, round((DQ(A) + DQ(B)) / y_scale) + y_zp, gives the
// same integers except near .5 ties, where either may be one quantum off exact
// arithmetic; MobileNetV2 quantized to 8 bits amplifies those into a 5-7% top-1
// disagreement between the two (docs/design.md, section 2), so seqto follows the
// runtime rather than the graph. tests/interop/qdq_rounding_interop_test.cc checks
// this formula against ONNX Runtime over every pair of 8-bit inputs.
// QLinearMul computes the float QDQ graph's operations exactly (the product of the two
// dequantized values, divided by y_scale, rounded half to even, plus y_zp).
// (Built without FMA contraction, as the rest of ops/quant: the fmas above are
// explicit, so every ISA path gives the same integers.)
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum Input { kA = 0, kAScale, kAZp, kB, kBScale, kBZp, kYScale, kYZp };

struct AddParams {
  bool multiply = false;  // QLinearMul
  float sa, sb, sy;
  int32_t za, zb, zy;
  float lo, hi;  // QuantizeClamped's bounds for Y

  // QLinearAdd as ONNX Runtime computes it (the file's comment): the scale ratios and
  // the folded constant, with B the inner term, or A where A is a span's scalar
  // (`swapped`).
  struct OrtSum {
    float ra, rb, fixed_b_inner, fixed_a_inner;
  } ort;
  void FoldForOrt() {
    ort.ra = sa / sy;
    ort.rb = sb / sy;
    const float fa = static_cast<float>(za), fb = static_cast<float>(zb), fy = static_cast<float>(zy);
    ort.fixed_b_inner = fy - std::fma(ort.ra, fa, ort.rb * fb);
    ort.fixed_a_inner = fy - std::fma(ort.rb, fb, ort.ra * fa);
  }
};

// Y[i] for A[a_off + i * a_step], B[b_off + i * b_step], i in [0, n): the parameters
// are locals and the forms branch-free, so the loop vectorizes (see quant_util.h).
// The steps are template arguments where they are 0 or 1 (contiguous or broadcast
// operands: the common cases, a bias row or a scalar), which lets the loads
// vectorize too; kAny reads them from the arguments. Also compiled for AVX2 and
// AVX-512, without FMA contraction (the same float operations on every path).
constexpr int64_t kAny = -1;

template <int64_t kAStep, int64_t kBStep, typename A, typename B, typename Y>
SEQTO_WIDE_CLONES_EXACT void AddRow(const A* pa, int64_t a_step, const B* pb, int64_t b_step, Y* py, int64_t n,
                                    const AddParams& p, bool swapped) {
  const float sa = p.sa, sb = p.sb, sy = p.sy, lo = p.lo, hi = p.hi;
  const int32_t za = p.za, zb = p.zb, zy = p.zy;
  if constexpr (kAStep != kAny) a_step = kAStep;
  if constexpr (kBStep != kAny) b_step = kBStep;
  // Two loops rather than a select inside one: GCC vectorizes each, not the select.
  if (p.multiply) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float fa = static_cast<float>(static_cast<int32_t>(pa[i * a_step]) - za) * sa;
      const float fb = static_cast<float>(static_cast<int32_t>(pb[i * b_step]) - zb) * sb;
      py[i] = static_cast<Y>(quant::QuantizeClamped((fa * fb) / sy, lo, hi, zy));
    }
    return;
  }
  // Y's bounds with the zero point inside (the sum below includes it).
  const float ylo = lo + static_cast<float>(zy), yhi = hi + static_cast<float>(zy);
  const float ra = p.ort.ra, rb = p.ort.rb;
  if (swapped) {
    const float fixed = p.ort.fixed_a_inner;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float v =
          std::fma(static_cast<float>(pb[i * b_step]), rb, std::fma(static_cast<float>(pa[i * a_step]), ra, fixed));
      py[i] = static_cast<Y>(quant::QuantizeClamped(v, ylo, yhi, 0));
    }
    return;
  }
  const float fixed = p.ort.fixed_b_inner;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v =
        std::fma(static_cast<float>(pa[i * a_step]), ra, std::fma(static_cast<float>(pb[i * b_step]), rb, fixed));
    py[i] = static_cast<Y>(quant::QuantizeClamped(v, ylo, yhi, 0));
  }
}

template <typename A, typename B, typename Y>
void AddAnyRow(const A* pa, int64_t as, const B* pb, int64_t bs, Y* py, int64_t n, const AddParams& p) {
  // A constant along the row while B varies: A is the span's scalar (ORT's order).
  const bool swapped = as == 0 && bs != 0;
  if (as == 1 && bs == 1)
    AddRow<1, 1>(pa, as, pb, bs, py, n, p, false);
  else if (as == 1 && bs == 0)
    AddRow<1, 0>(pa, as, pb, bs, py, n, p, false);
  else if (as == 0 && bs == 1)
    AddRow<0, 1>(pa, as, pb, bs, py, n, p, true);
  else
    AddRow<kAny, kAny>(pa, as, pb, bs, py, n, p, swapped);
}

// How many elements of Y's flat index an operand takes to repeat itself: its
// strides are contiguous on Y's inner dims and 0 on the outer ones (a scalar: 1; a
// per-channel constant [1, 1, 1, C] of a channels-last tensor: C; an operand of Y's
// shape: Y's size). 0 when it does not repeat.
int64_t RepeatPeriod(const Shape& out, const std::vector<int64_t>& strides) {
  int64_t period = 1;
  size_t d = out.size();
  for (; d > 0 && (out[d - 1] == 1 || strides[d - 1] == period); --d) period *= out[d - 1];
  for (size_t k = 0; k < d; ++k)
    if (out[k] != 1 && strides[k] != 0) return 0;
  return period;
}

// One operand of Y's shape, the other repeating with a shorter period: the short one
// is tiled once into a block of whole periods, and Y is computed in rows of that
// block instead of one row per period (C elements per pixel, channels-last). False
// when the operands are not so.
template <typename A, typename B, typename Y>
bool AddRepeating(const A* pa, const B* pb, Y* py, const AddParams& p, const BroadcastPlan& plan) {
  const int64_t n = NumElements(plan.out_shape);
  const int64_t pa_period = RepeatPeriod(plan.out_shape, plan.a_strides);
  const int64_t pb_period = RepeatPeriod(plan.out_shape, plan.b_strides);
  const bool b_repeats = pa_period == n && pb_period > 0 && pb_period < n;
  const bool a_repeats = pb_period == n && pa_period > 0 && pa_period < n;
  if (!a_repeats && !b_repeats) return false;
  const int64_t period = b_repeats ? pb_period : pa_period;
  const int64_t block = period * std::max<int64_t>(1, 4096 / period);
  auto tile = [&](const auto* src) {
    std::vector<std::remove_cv_t<std::remove_pointer_t<decltype(src)>>> t(static_cast<size_t>(block));
    for (int64_t i = 0; i < block; ++i) t[i] = src[i % period];
    return t;
  };
  if (b_repeats) {
    const auto tb = tile(pb);
    ParallelFor((n + block - 1) / block, block * 4, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t off = r * block;
        AddRow<1, 1>(pa + off, 1, tb.data(), 1, py + off, std::min(block, n - off), p, false);
      }
    });
  } else {
    // A repeats: ONNX Runtime (NCHW) sees it as each span's scalar when it is one
    // value, or one value per channel of a 4-D tensor ([1, C, 1, 1], here
    // channels-last [1, 1, 1, C]); a row of the last dim is a vector there too.
    const bool swapped = period == 1 || (plan.out_shape.size() == 4 && period == plan.out_shape[3]);
    const auto ta = tile(pa);
    ParallelFor((n + block - 1) / block, block * 4, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t off = r * block;
        AddRow<1, 1>(ta.data(), 1, pb + off, 1, py + off, std::min(block, n - off), p, swapped);
      }
    });
  }
  return true;
}

template <typename A, typename B, typename Y>
void AddKernel(const Tensor& a, const Tensor& b, Tensor& y, const AddParams& p, const BroadcastPlan& plan) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  Y* py = y.data<Y>();
  if (a.shape() == b.shape()) {
    ParallelFor(y.numel(), 4, [&](int64_t begin, int64_t end) {
      // One element each: ONNX Runtime's broadcaster takes A for a scalar.
      AddRow<1, 1>(pa + begin, 1, pb + begin, 1, py + begin, end - begin, p, y.numel() == 1);
    });
    return;
  }
  if (AddRepeating(pa, pb, py, p, plan)) return;
  // Rows of the innermost dim, in parallel: each row's offsets from its index.
  const Shape& out = plan.out_shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  if (rank == 0) {
    AddRow<kAny, kAny>(pa, 0, pb, 0, py, 1, p, false);
    return;
  }
  const int64_t inner = out[rank - 1];
  if (inner == 0) return;
  const int64_t as = plan.a_strides[rank - 1], bs = plan.b_strides[rank - 1];
  ParallelFor(y.numel() / inner, inner * 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t ao = 0, bo = 0;
      for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
        const int64_t i = rest % out[d];
        rest /= out[d];
        ao += i * plan.a_strides[d];
        bo += i * plan.b_strides[d];
      }
      AddAnyRow(pa + ao, as, pb + bo, bs, py + r * inner, inner, p);
    }
  });
}

template <typename A, typename B>
void DispatchY(const Tensor& a, const Tensor& b, Tensor& y, const AddParams& p, const BroadcastPlan& plan) {
  if (y.dtype() == DType::kUInt8)
    AddKernel<A, B, uint8_t>(a, b, y, p, plan);
  else
    AddKernel<A, B, int8_t>(a, b, y, p, plan);
}

template <typename A>
void DispatchB(const Tensor& a, const Tensor& b, Tensor& y, const AddParams& p, const BroadcastPlan& plan) {
  if (b.dtype() == DType::kUInt8)
    DispatchY<A, uint8_t>(a, b, y, p, plan);
  else
    DispatchY<A, int8_t>(a, b, y, p, plan);
}

Expected<std::unique_ptr<Kernel>> MakeQLinearBinary(const KernelInit& init, bool multiply) {
  SEQTO_ASSIGN_OR_RETURN(quant::OutputClamp clamp, quant::OutputClamp::Parse(init.node));
  return MakeKernel([clamp, multiply](KernelContext& ctx) -> Status {
    const Tensor& a = ctx.input(kA);
    if (!ctx.has_input(kB)) return InputError(kB, "B is missing");
    const Tensor& b = ctx.input(kB);
    if (!quant::Is8Bit(a.dtype())) return DTypeError(kA, a.dtype(), "uint8, int8");
    if (!quant::Is8Bit(b.dtype())) return DTypeError(kB, b.dtype(), "uint8, int8");
    AddParams p;
    p.multiply = multiply;
    SEQTO_ASSIGN_OR_RETURN(p.sa, quant::ScalarScale(ctx, kAScale, "a_scale"));
    SEQTO_ASSIGN_OR_RETURN(p.sb, quant::ScalarScale(ctx, kBScale, "b_scale"));
    SEQTO_ASSIGN_OR_RETURN(p.sy, quant::ScalarScale(ctx, kYScale, "y_scale"));
    SEQTO_ASSIGN_OR_RETURN(p.za, quant::ScalarZp(ctx, kAZp, a.dtype(), "a_zero_point"));
    SEQTO_ASSIGN_OR_RETURN(p.zb, quant::ScalarZp(ctx, kBZp, b.dtype(), "b_zero_point"));
    DType y_type = a.dtype();
    if (ctx.has_input(kYZp)) {
      y_type = ctx.input(kYZp).dtype();
      if (!quant::Is8Bit(y_type)) return DTypeError(kYZp, y_type, "uint8, int8");
    }
    SEQTO_ASSIGN_OR_RETURN(p.zy, quant::ScalarZp(ctx, kYZp, y_type, "y_zero_point"));
    const quant::ClampBounds bounds(clamp.Narrow(y_type), p.zy);
    p.lo = bounds.lo;
    p.hi = bounds.hi;
    p.FoldForOrt();
    SEQTO_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(a.shape(), b.shape()));
    Tensor& y = ctx.Allocate(0, y_type, plan.out_shape);
    if (y.numel() == 0) return Status::Ok();
    if (a.dtype() == DType::kUInt8)
      DispatchB<uint8_t>(a, b, y, p, plan);
    else
      DispatchB<int8_t>(a, b, y, p, plan);
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> MakeQLinearAdd(const KernelInit& init) { return MakeQLinearBinary(init, false); }
Expected<std::unique_ptr<Kernel>> MakeQLinearMul(const KernelInit& init) { return MakeQLinearBinary(init, true); }

}  // namespace

void RegisterQLinearAdd(OpRegistry& r) {
  r.Register({"QLinearAdd", "com.seqto", 1, MakeQLinearAdd});
  r.Register({"QLinearMul", "com.seqto", 1, MakeQLinearMul});
  // ONNX Runtime's contrib ops (QOperator models, e.g. the ONNX Model Zoo's int8 CNNs):
  // the same inputs, without the clamp attributes. ORT computes them with precomputed
  // scale ratios, so the two may differ by one quantum where a value is near a tie.
  r.Register({"QLinearAdd", "com.microsoft", 1, MakeQLinearAdd});
  r.Register({"QLinearMul", "com.microsoft", 1, MakeQLinearMul});
}

}  // namespace seqto::ops
