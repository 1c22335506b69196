// Binary arithmetic with numpy broadcasting (and, before opset 7, the legacy
// broadcast/axis attributes): Add, Sub, Mul, Div, Mod, BitShift, Pow.
//
// Integer semantics: results wrap around on overflow; Div truncates toward zero
// (C++, like ORT); division or Mod by zero gives 0 instead of trapping.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

struct AddOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return WrapAdd(a, b);
  }
};

struct SubOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return WrapSub(a, b);
  }
};

struct MulOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return WrapMul(a, b);
  }
};

struct DivOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return WrapNeg(a);  // min / -1 overflows
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};

// fmod=1: C's fmod / %, the sign of the dividend. fmod=0: numpy's mod (Python's
// %), the sign of the divisor.
struct ModOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  bool fmod = false;
  template <typename T>
  T operator()(T a, T b) const {
    T r;
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return 0;  // min % -1 overflows
      r = static_cast<T>(a % b);
    } else {
      r = std::fmod(a, b);
    }
    if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>)
      if (!fmod && r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
    return r;
  }
};

struct BitShiftOp {
  static constexpr TypeSet kTypes = kUnsignedTypes;
  bool left = true;
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b >= T(sizeof(T) * 8)) return 0;
      return static_cast<T>(left ? a << b : a >> b);
    } else {
      return a;  // not reached: kTypes has only unsigned integers
    }
  }
};

// The operands after legacy broadcasting, checked to share a type in `types`.
struct Operands {
  const Tensor* a;
  Tensor b;  // a view of input 1
};

Expected<Operands> GetOperands(KernelContext& ctx, const LegacyBroadcast& legacy, TypeSet types,
                               bool same_type = true) {
  const Tensor& a = ctx.input(0);
  if (!ctx.has_input(1)) return InputError(1, "missing");
  SEQTO_ASSIGN_OR_RETURN(Tensor b, legacy.AdjustB(a, ctx.input(1)));
  if (!InSet(a.dtype(), types)) return TypeError(0, a.dtype(), types);
  if (same_type && b.dtype() != a.dtype())
    return InputError(1, "has type " + DTypeName(b.dtype()) + ", expected input 0's type " + DTypeName(a.dtype()));
  return Operands{&a, std::move(b)};
}

template <typename Op>
Status RunArithmetic(const Op& op, const LegacyBroadcast& legacy, KernelContext& ctx) {
  SEQTO_ASSIGN_OR_RETURN(Operands in, GetOperands(ctx, legacy, Op::kTypes));
  const Tensor& a = *in.a;
  SEQTO_ASSIGN_OR_RETURN(BroadcastLoop<2> loop, BroadcastLoop<2>::Make({&a.shape(), &in.b.shape()}));
  Tensor& y = ctx.Allocate(0, a.dtype(), loop.out_shape);
  VisitType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Allows<T>(Op::kTypes))
      BinaryLoop(loop, a.data<T>(), in.b.data<T>(), y.data<T>(), kCheap, OnStorage<T>(op));
  });
  return Status::Ok();
}

// Registers op `name`; `make` builds the op struct from the node's attributes.
template <typename Op, typename Make>
void AddArithmetic(OpRegistry& r, const char* name, int since, Make make) {
  r.Register({name, "", since, [make](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const Op op, make(init.node));
                SEQTO_ASSIGN_OR_RETURN(const LegacyBroadcast legacy, LegacyBroadcast::Parse(init));
                return MakeKernel([op, legacy](KernelContext& ctx) { return RunArithmetic(op, legacy, ctx); });
              }});
}

template <typename Op>
Expected<Op> NoAttributes(const ir::Node&) {
  return Op{};
}

// ---------------------------------------------------------------- Pow

// base^e for an integer base and exponent, wrapping like repeated multiplication.
template <typename T>
T IntPow(T base, int64_t e) {
  if (e < 0) {  // |result| < 1 except for bases 1 and -1; truncated toward zero
    if (base == T(1)) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    return 0;
  }
  T result = 1;
  while (e > 0) {
    if (e & 1) result = WrapMul(result, base);
    base = WrapMul(base, base);
    e >>= 1;
  }
  return result;
}

// y = x^e for float32 x and one exponent value; false if e has no special case.
bool PowFloatScalar(const float* x, float* y, int64_t n, double e) {
  if (e == 1.0) {
    MapUnary(x, y, n, kCheap, [](float v) { return v; });
  } else if (e == 2.0) {
    MapUnary(x, y, n, kCheap, [](float v) { return v * v; });
  } else if (e == 3.0) {
    MapUnary(x, y, n, kCheap, [](float v) { return v * v * v; });
  } else if (e == -1.0) {
    MapUnary(x, y, n, kCheap, [](float v) { return 1.0f / v; });
  } else if (e == 0.5) {  // like powf: +0 for -0, +inf for -inf
    const float inf = std::numeric_limits<float>::infinity();
    MapUnary(x, y, n, kCheap, [inf](float v) { return Select(v == -inf, inf, std::sqrt(v) + 0.0f); });
  } else {
    return false;
  }
  return true;
}

Status RunPow(const LegacyBroadcast& legacy, bool reference, KernelContext& ctx) {
  SEQTO_ASSIGN_OR_RETURN(Operands in, GetOperands(ctx, legacy, kNumericTypes, /*same_type=*/false));
  const Tensor& a = *in.a;
  if (!InSet(in.b.dtype(), kNumericTypes)) return TypeError(1, in.b.dtype(), kNumericTypes);
  SEQTO_ASSIGN_OR_RETURN(BroadcastLoop<2> loop, BroadcastLoop<2>::Make({&a.shape(), &in.b.shape()}));
  Tensor& y = ctx.Allocate(0, a.dtype(), loop.out_shape);
  if (!reference && a.dtype() == DType::kFloat32 && in.b.numel() == 1 && loop.out_shape == a.shape() &&
      PowFloatScalar(a.data<float>(), y.data<float>(), a.numel(), in.b.ToDoubles()[0]))
    return Status::Ok();
  if (a.dtype() == DType::kFloat16 || a.dtype() == DType::kBFloat16) {  // in float32
    SEQTO_ASSIGN_OR_RETURN(const Tensor base, CastTensor(a, DType::kFloat32));
    SEQTO_ASSIGN_OR_RETURN(const Tensor e, CastTensor(in.b, DType::kFloat32));
    Tensor out(DType::kFloat32, loop.out_shape);
    BinaryLoop(loop, base.data<float>(), e.data<float>(), out.data<float>(), kTranscendental,
               [](float x, float p) { return std::pow(x, p); });
    SEQTO_ASSIGN_OR_RETURN(const Tensor converted, CastTensor(out, a.dtype()));
    std::copy_n(static_cast<const std::byte*>(converted.raw()), converted.nbytes(), static_cast<std::byte*>(y.raw()));
    return Status::Ok();
  }
  Status status;
  VisitNumeric(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {  // exponent converted to T
      auto e = CastTensor(in.b, DTypeOf<T>());
      if (!e) return void(status = e.status());
      BinaryLoop(loop, a.data<T>(), e->template data<T>(), y.data<T>(), kTranscendental,
                 [](T x, T p) { return std::pow(x, p); });
    } else if (InSet(in.b.dtype(), kIntTypes)) {  // integer powers, exactly
      auto e = CastTensor(in.b, DType::kInt64);
      if (!e) return void(status = e.status());
      BinaryLoop(loop, a.data<T>(), e->template data<int64_t>(), y.data<T>(), kCheap,
                 [](T x, int64_t p) { return IntPow(x, p); });
    } else {  // integer base, float exponent: in double, truncated
      auto e = CastTensor(in.b, DType::kFloat64);
      if (!e) return void(status = e.status());
      BinaryLoop(loop, a.data<T>(), e->template data<double>(), y.data<T>(), kTranscendental,
                 [](T x, double p) { return FloatToInt<T>(std::pow(static_cast<double>(x), p)); });
    }
  });
  return status;
}

}  // namespace

void RegisterBinary(OpRegistry& r) {
  AddArithmetic<AddOp>(r, "Add", 1, NoAttributes<AddOp>);
  AddArithmetic<SubOp>(r, "Sub", 1, NoAttributes<SubOp>);
  AddArithmetic<MulOp>(r, "Mul", 1, NoAttributes<MulOp>);
  AddArithmetic<DivOp>(r, "Div", 1, NoAttributes<DivOp>);
  AddArithmetic<ModOp>(r, "Mod", 10, [](const ir::Node& node) -> Expected<ModOp> {
    SEQTO_ASSIGN_OR_RETURN(const int64_t fmod, node.attr_int("fmod", 0));
    if (fmod != 0 && fmod != 1) return UserError("attribute 'fmod' is " + std::to_string(fmod) + ", expected 0 or 1");
    ModOp op;
    op.fmod = fmod == 1;
    return op;
  });
  AddArithmetic<BitShiftOp>(r, "BitShift", 11, [](const ir::Node& node) -> Expected<BitShiftOp> {
    SEQTO_ASSIGN_OR_RETURN(const std::string direction, node.attr_string("direction", ""));
    if (direction != "LEFT" && direction != "RIGHT")
      return UserError("attribute 'direction' is '" + direction + "', expected 'LEFT' or 'RIGHT'");
    BitShiftOp op;
    op.left = direction == "LEFT";
    return op;
  });
  r.Register({"Pow", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const LegacyBroadcast legacy, LegacyBroadcast::Parse(init));
                const bool reference = init.reference_only;
                return MakeKernel([legacy, reference](KernelContext& ctx) { return RunPow(legacy, reference, ctx); });
              }});
}

}  // namespace seqto::ops
