// Unary elementwise ops from one table: activations (Sigmoid, HardSigmoid,
// HardSwish, Tanh, Elu, Selu, Celu, LeakyRelu, ThresholdedRelu, Softplus, Softsign,
// Mish, Shrink), math (Exp, Log, Sqrt, Reciprocal, Erf, Neg, Abs, Sign, Floor, Ceil,
// Round, Sin, Cos, Tan, their inverses and the hyperbolic functions), Not, and the
// bool-valued IsNaN and IsInf.
//
// Each op is a struct with the types it accepts, its float attributes, a reference
// `Ref<T>` (std:: math in T) and, where it pays, a `Fast` float32 version built from
// branch-free polynomial approximations that GCC vectorizes (ExpF, TanhF, ErfF
// below; accurate to a few ulp). `init.reference_only` selects Ref; the 16-bit
// floats are computed in float32.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

// ---------------------------------------------------------------- float32 approximations

// exp(x): Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, a degree-7
// polynomial for exp(r) (Cephes' expf coefficients) and 2^n applied as two
// factors so that results near the overflow and denormal limits stay right.
inline float ExpF(float x0) {
  float x = Select(Less(x0, -104.0f), -104.0f, x0);  // below: 0 after scaling
  x = Select(Greater(x, 89.0f), 89.0f, x);           // above: inf after scaling
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: adding it rounds to an integer
  const float nr = x * 1.44269504088896341f + kRound;
  const float n = nr - kRound;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(nr) - std::bit_cast<int32_t>(kRound);  // n as an integer
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  return Select(IsNan(x0), x0, y * s1 * s2);
}

// exp(x) - 1 without the cancellation near 0 (Taylor series there).
inline float ExpM1F(float x) {
  float p = 1.0f / 5040;
  p = p * x + 1.0f / 720;
  p = p * x + 1.0f / 120;
  p = p * x + 1.0f / 24;
  p = p * x + 1.0f / 6;
  p = p * x + 0.5f;
  p = p * x * x + x;
  return Select(Less(std::fabs(x), 0.25f), p, ExpF(x) - 1.0f);
}

// tanh(x): odd rational approximation on [-7.9, 7.9] (Eigen's and MLAS's), ±1 beyond.
inline float TanhF(float x0) {
  float x = Select(Less(x0, -7.90531110763549805f), -7.90531110763549805f, x0);
  x = Select(Greater(x, 7.90531110763549805f), 7.90531110763549805f, x);
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}

// erf(x): odd rational approximation on [-4, 4] (Eigen's), ±1 beyond.
inline float ErfF(float x0) {
  float x = Select(Less(x0, -4.0f), -4.0f, x0);
  x = Select(Greater(x, 4.0f), 4.0f, x);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
}

// Round half to even for |x| < 2^23 by adding and subtracting 2^23 (in the default
// rounding mode); larger floats are integers already. Keeps the sign (-0.4 -> -0).
inline float RoundF(float x) {
  const float a = std::fabs(x);
  const float r = std::copysign((a + 8388608.0f) - 8388608.0f, x);
  return Select(Less(a, 8388608.0f), r, x);
}
inline float FloorF(float x) {
  const float r = RoundF(x);
  return Select(Greater(r, x), r - 1.0f, r);
}
inline float CeilF(float x) {
  const float r = RoundF(x);
  return Select(Less(r, x), r + 1.0f, r);
}

// ---------------------------------------------------------------- the ops

struct UnaryBase;
// A float attribute: its name, default, and the member of UnaryBase that holds it.
struct AttrSpec {
  const char* name;
  float def;
  float UnaryBase::*slot;
};

// Defaults for the op structs: no attributes, cheap, floats only.
struct UnaryBase {
  float alpha = 0, beta = 0, gamma = 0;  // attribute values (see kAttrs)
  static constexpr std::array<AttrSpec, 0> kAttrs{};
  static constexpr int64_t kCost = kCheap;
  static constexpr TypeSet kTypes = kFloatTypes;
};

struct SigmoidOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return T(1) / (T(1) + std::exp(-x));
  }
  float Fast(float x) const { return 1.0f / (1.0f + ExpF(-x)); }
};

struct HardSigmoidOp : UnaryBase {
  static constexpr std::array<AttrSpec, 2> kAttrs{
      {{"alpha", 0.2f, &UnaryBase::alpha}, {"beta", 0.5f, &UnaryBase::beta}}};
  template <typename T>
  T Ref(T x) const {
    return std::clamp(T(alpha) * x + T(beta), T(0), T(1));
  }
  float Fast(float x) const {
    const float v = alpha * x + beta;
    const float lo = Select(Less(v, 0.0f), 0.0f, v);
    return Select(Greater(lo, 1.0f), 1.0f, lo);
  }
};

struct HardSwishOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return x * std::clamp(x / T(6) + T(0.5), T(0), T(1));
  }
  float Fast(float x) const {
    const float v = x * (1.0f / 6) + 0.5f;
    const float lo = Select(Less(v, 0.0f), 0.0f, v);
    return x * Select(Greater(lo, 1.0f), 1.0f, lo);
  }
};

// GELU, exact form: x/2 * (1 + erf(x / sqrt 2)). Only as com.seqto.Gelu, which the
// fuse-patterns pass makes of the written-out chain (ONNX's own Gelu is opset 20).
struct GeluOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
  }
  float Fast(float x) const { return 0.5f * x * (1.0f + ErfF(x * 0.707106781186547524f)); }
};

struct TanhOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::tanh(x);
  }
  float Fast(float x) const { return TanhF(x); }
};

struct ErfOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::erf(x);
  }
  float Fast(float x) const { return ErfF(x); }
};

struct EluOp : UnaryBase {
  static constexpr std::array<AttrSpec, 1> kAttrs{{{"alpha", 1.0f, &UnaryBase::alpha}}};
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return x < T(0) ? T(alpha) * std::expm1(x) : x;
  }
  float Fast(float x) const { return Select(Less(x, 0.0f), alpha * ExpM1F(x), x); }
};

struct SeluOp : UnaryBase {
  static constexpr std::array<AttrSpec, 2> kAttrs{{{"alpha", 1.67326319217681884765625f, &UnaryBase::alpha},
                                                   {"gamma", 1.05070102214813232421875f, &UnaryBase::gamma}}};
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return T(gamma) * (x > T(0) ? x : T(alpha) * std::expm1(x));
  }
  float Fast(float x) const { return gamma * Select(Greater(x, 0.0f), x, alpha * ExpM1F(x)); }
};

struct CeluOp : UnaryBase {
  static constexpr std::array<AttrSpec, 1> kAttrs{{{"alpha", 1.0f, &UnaryBase::alpha}}};
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    if (IsNan(x)) return x;
    return std::max(T(0), x) + std::min(T(0), T(alpha) * std::expm1(x / T(alpha)));
  }
  float Fast(float x) const {
    const float e = alpha * ExpM1F(x / alpha);
    return Select(IsNan(x), x, Select(Greater(x, 0.0f), x, 0.0f) + Select(Less(e, 0.0f), e, 0.0f));
  }
};

struct LeakyReluOp : UnaryBase {
  static constexpr std::array<AttrSpec, 1> kAttrs{{{"alpha", 0.01f, &UnaryBase::alpha}}};
  template <typename T>
  T Ref(T x) const {
    return x < T(0) ? T(alpha) * x : x;
  }
  float Fast(float x) const { return Select(Less(x, 0.0f), alpha * x, x); }
};

struct ThresholdedReluOp : UnaryBase {
  static constexpr std::array<AttrSpec, 1> kAttrs{{{"alpha", 1.0f, &UnaryBase::alpha}}};
  template <typename T>
  T Ref(T x) const {
    return x > T(alpha) ? x : T(0);
  }
  float Fast(float x) const { return Select(Greater(x, alpha), x, 0.0f); }
};

struct SoftplusOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {  // log(1 + exp(x)) without overflow
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};

struct SoftsignOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return x / (T(1) + std::fabs(x));
  }
};

struct MishOp : UnaryBase {
  static constexpr int64_t kCost = 3 * kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return x * std::tanh(SoftplusOp().Ref(x));
  }
};

struct ExpOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::exp(x);
  }
  float Fast(float x) const { return ExpF(x); }
};

struct LogOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::log(x);
  }
};

struct SqrtOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return std::sqrt(x);
  }
};

struct ReciprocalOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return T(1) / x;
  }
};

struct SinOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::sin(x);
  }
};

struct CosOp : UnaryBase {
  static constexpr int64_t kCost = kTranscendental;
  template <typename T>
  T Ref(T x) const {
    return std::cos(x);
  }
};

// Further trigonometric and hyperbolic functions (reference only).
#define SEQTO_STD_UNARY(Name, fn)                     \
  struct Name : UnaryBase {                           \
    static constexpr int64_t kCost = kTranscendental; \
    template <typename T>                             \
    T Ref(T x) const {                                \
      return std::fn(x);                              \
    }                                                 \
  };
SEQTO_STD_UNARY(TanOp, tan)
SEQTO_STD_UNARY(AsinOp, asin)
SEQTO_STD_UNARY(AcosOp, acos)
SEQTO_STD_UNARY(AtanOp, atan)
SEQTO_STD_UNARY(SinhOp, sinh)
SEQTO_STD_UNARY(CoshOp, cosh)
SEQTO_STD_UNARY(AsinhOp, asinh)
SEQTO_STD_UNARY(AcoshOp, acosh)
SEQTO_STD_UNARY(AtanhOp, atanh)
#undef SEQTO_STD_UNARY

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
struct ShrinkOp : UnaryBase {
  static constexpr std::array<AttrSpec, 2> kAttrs{
      {{"bias", 0.0f, &UnaryBase::alpha}, {"lambd", 0.5f, &UnaryBase::beta}}};
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T Ref(T x) const {
    const double v = static_cast<double>(x), bias = alpha, lambd = beta;
    return ConvertElement<T>(v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
  }
  float Fast(float x) const { return Select(Less(x, -beta), x + alpha, Select(Greater(x, beta), x - alpha, 0.0f)); }
};

struct NegOp : UnaryBase {
  static constexpr TypeSet kTypes = kFloatTypes | kSignedTypes;
  template <typename T>
  T Ref(T x) const {
    return WrapNeg(x);
  }
};

struct AbsOp : UnaryBase {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T Ref(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return std::fabs(x);
    else if constexpr (std::is_signed_v<T>)
      return x < 0 ? WrapNeg(x) : x;
    else
      return x;
  }
};

struct SignOp : UnaryBase {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T Ref(T x) const {
    if constexpr (std::is_floating_point_v<T>)
      return Select(IsNan(x), x, T(Greater(x, T(0))) - T(Less(x, T(0))));
    else
      return static_cast<T>((x > T(0)) - (x < T(0)));
  }
};

struct FloorOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return std::floor(x);
  }
  float Fast(float x) const { return FloorF(x); }
};

struct CeilOp : UnaryBase {
  template <typename T>
  T Ref(T x) const {
    return std::ceil(x);
  }
  float Fast(float x) const { return CeilF(x); }
};

struct RoundOp : UnaryBase {  // half to even
  template <typename T>
  T Ref(T x) const {
    return std::nearbyint(x);
  }
  float Fast(float x) const { return RoundF(x); }
};

struct NotOp : UnaryBase {
  static constexpr TypeSet kTypes = kBoolType;
  template <typename T>
  T Ref(T x) const {
    return !x;
  }
};

// ---------------------------------------------------------------- kernel

template <typename Op>
constexpr bool kHasFast = requires(const Op& op) {
  op.Fast(0.0f);
};

// The fast float32 loop, also compiled for wider vectors (SEQTO_WIDE_CLONES, ops/util.h):
// Fast is an approximation within a few ulp on every path.
template <typename Op>
SEQTO_WIDE_CLONES void FastRange(const Op& op, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = op.Fast(x[i]);
}

template <typename Op, typename T>
void RunTyped(const Op& op, bool reference, const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if constexpr (kHasFast<Op>) {
      if (!reference) {
        ParallelFor(n, Op::kCost,
                    [&](int64_t begin, int64_t end) { FastRange(op, x + begin, y + begin, end - begin); });
        return;
      }
    }
    MapUnary(x, y, n, Op::kCost, [op](float v) { return op.template Ref<float>(v); });
  } else if constexpr (kIsHalf<T>) {
    // In float32, a block at a time.
    ParallelFor(n, Op::kCost + 2, [&](int64_t begin, int64_t end) {
      constexpr int64_t kBlock = 256;
      float buf[kBlock];
      for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t m = std::min(kBlock, end - b);
        for (int64_t i = 0; i < m; ++i) buf[i] = Load(x[b + i]);
        if constexpr (kHasFast<Op>) {
          if (!reference) {
            for (int64_t i = 0; i < m; ++i) buf[i] = op.Fast(buf[i]);
          } else {
            for (int64_t i = 0; i < m; ++i) buf[i] = op.template Ref<float>(buf[i]);
          }
        } else {
          for (int64_t i = 0; i < m; ++i) buf[i] = op.template Ref<float>(buf[i]);
        }
        for (int64_t i = 0; i < m; ++i) y[b + i] = Store<T>(buf[i]);
      }
    });
  } else {
    MapUnary(x, y, n, Op::kCost, [op](T v) { return op.template Ref<T>(v); });
  }
}

template <typename Op>
void AddUnary(OpRegistry& r, const char* name, int since, const char* domain = "") {
  r.Register({name, domain, since, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                Op op;
                for (const AttrSpec& a : Op::kAttrs) {
                  SEQTO_ASSIGN_OR_RETURN(op.*a.slot, init.node.attr_float(a.name, a.def));
                }
                const bool reference = init.reference_only;
                return MakeKernel([op, reference](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (!InSet(x.dtype(), Op::kTypes)) return TypeError(0, x.dtype(), Op::kTypes);
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  VisitType(x.dtype(), [&](auto tag) {
                    using T = decltype(tag);
                    if constexpr (Allows<T>(Op::kTypes)) RunTyped(op, reference, x.data<T>(), y.data<T>(), x.numel());
                  });
                  return Status::Ok();
                });
              }});
}

// IsNaN and IsInf: float input, bool output.
void AddFloatTest(OpRegistry& r, const char* name, int since, bool is_inf) {
  r.Register({name, "", since, [is_inf](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const int64_t negative, init.node.attr_int("detect_negative", 1));
                SEQTO_ASSIGN_OR_RETURN(const int64_t positive, init.node.attr_int("detect_positive", 1));
                return MakeKernel([is_inf, negative, positive](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (!InSet(x.dtype(), kFloatTypes)) return TypeError(0, x.dtype(), kFloatTypes);
                  Tensor& y = ctx.Allocate(0, DType::kBool, x.shape());
                  VisitType(x.dtype(), [&](auto tag) {
                    using T = decltype(tag);
                    if constexpr (kIsFloat<T>) {
                      using C = Compute<T>;
                      const C inf = std::numeric_limits<C>::infinity();
                      MapUnary(x.data<T>(), y.data<bool>(), x.numel(), kCheap, [=](T v) {
                        const C c = Load(v);
                        if (!is_inf) return IsNan(c);
                        return (positive != 0 && c == inf) || (negative != 0 && c == -inf);
                      });
                    }
                  });
                  return Status::Ok();
                });
              }});
}

}  // namespace

void RegisterUnary(OpRegistry& r) {
  AddUnary<SigmoidOp>(r, "Sigmoid", 1);
  AddUnary<HardSigmoidOp>(r, "HardSigmoid", 1);
  // From opset 1 (ONNX: 14), as LayerNormalization: the fuse-patterns pass makes it
  // of x * Clip(x + 3, 0, 6) / 6 in models of any opset (and channels-last knows it).
  AddUnary<HardSwishOp>(r, "HardSwish", 1);
  AddUnary<GeluOp>(r, "Gelu", 1, "com.seqto");
  AddUnary<TanhOp>(r, "Tanh", 1);
  AddUnary<ErfOp>(r, "Erf", 9);
  AddUnary<EluOp>(r, "Elu", 1);
  AddUnary<SeluOp>(r, "Selu", 1);
  AddUnary<CeluOp>(r, "Celu", 12);
  AddUnary<LeakyReluOp>(r, "LeakyRelu", 1);
  AddUnary<ThresholdedReluOp>(r, "ThresholdedRelu", 1);
  AddUnary<SoftplusOp>(r, "Softplus", 1);
  AddUnary<SoftsignOp>(r, "Softsign", 1);
  AddUnary<MishOp>(r, "Mish", 18);
  AddUnary<ExpOp>(r, "Exp", 1);
  AddUnary<LogOp>(r, "Log", 1);
  AddUnary<SqrtOp>(r, "Sqrt", 1);
  AddUnary<ReciprocalOp>(r, "Reciprocal", 1);
  AddUnary<SinOp>(r, "Sin", 7);
  AddUnary<CosOp>(r, "Cos", 7);
  AddUnary<NegOp>(r, "Neg", 1);
  AddUnary<AbsOp>(r, "Abs", 1);
  AddUnary<SignOp>(r, "Sign", 9);
  AddUnary<FloorOp>(r, "Floor", 1);
  AddUnary<CeilOp>(r, "Ceil", 1);
  AddUnary<RoundOp>(r, "Round", 11);
  AddUnary<NotOp>(r, "Not", 1);
  AddUnary<TanOp>(r, "Tan", 7);
  AddUnary<AsinOp>(r, "Asin", 7);
  AddUnary<AcosOp>(r, "Acos", 7);
  AddUnary<AtanOp>(r, "Atan", 7);
  AddUnary<SinhOp>(r, "Sinh", 9);
  AddUnary<CoshOp>(r, "Cosh", 9);
  AddUnary<AsinhOp>(r, "Asinh", 9);
  AddUnary<AcoshOp>(r, "Acosh", 9);
  AddUnary<AtanhOp>(r, "Atanh", 9);
  AddUnary<ShrinkOp>(r, "Shrink", 9);
  AddFloatTest(r, "IsNaN", 9, /*is_inf=*/false);
  AddFloatTest(r, "IsInf", 10, /*is_inf=*/true);
}

}  // namespace seqto::ops
