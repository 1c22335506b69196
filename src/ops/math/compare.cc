// Comparisons and logical ops with numpy broadcasting (and, before opset 7, the
// legacy broadcast/axis attributes); all produce bool: Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual, And, Or, Xor.
#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

struct EqualOp {
  static constexpr TypeSet kTypes = kAllTypes;
  template <typename T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct LessOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  bool operator()(T a, T b) const {
    return Less(a, b);
  }
};
struct GreaterOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  bool operator()(T a, T b) const {
    return Greater(a, b);
  }
};
struct LessOrEqualOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  bool operator()(T a, T b) const {
    return LessEq(a, b);
  }
};
struct GreaterOrEqualOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  bool operator()(T a, T b) const {
    return GreaterEq(a, b);
  }
};
struct AndOp {
  static constexpr TypeSet kTypes = kBoolType;
  template <typename T>
  bool operator()(T a, T b) const {
    return a && b;
  }
};
struct OrOp {
  static constexpr TypeSet kTypes = kBoolType;
  template <typename T>
  bool operator()(T a, T b) const {
    return a || b;
  }
};
struct XorOp {
  static constexpr TypeSet kTypes = kBoolType;
  template <typename T>
  bool operator()(T a, T b) const {
    return a != b;
  }
};

template <typename Op>
Status RunCompare(const LegacyBroadcast& legacy, KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  if (!ctx.has_input(1)) return InputError(1, "missing");
  SEQTO_ASSIGN_OR_RETURN(const Tensor b, legacy.AdjustB(a, ctx.input(1)));
  if (!InSet(a.dtype(), Op::kTypes)) return TypeError(0, a.dtype(), Op::kTypes);
  if (b.dtype() != a.dtype())
    return InputError(1, "has type " + DTypeName(b.dtype()) + ", expected input 0's type " + DTypeName(a.dtype()));
  SEQTO_ASSIGN_OR_RETURN(const BroadcastLoop<2> loop, BroadcastLoop<2>::Make({&a.shape(), &b.shape()}));
  Tensor& y = ctx.Allocate(0, DType::kBool, loop.out_shape);
  VisitType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Allows<T>(Op::kTypes))
      BinaryLoop(loop, a.data<T>(), b.data<T>(), y.data<bool>(), kCheap, OnStorage<T>(Op{}));
  });
  return Status::Ok();
}

template <typename Op>
void AddCompare(OpRegistry& r, const char* name, int since) {
  r.Register({name, "", since, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const LegacyBroadcast legacy, LegacyBroadcast::Parse(init));
                return MakeKernel([legacy](KernelContext& ctx) { return RunCompare<Op>(legacy, ctx); });
              }});
}

}  // namespace

void RegisterCompare(OpRegistry& r) {
  AddCompare<EqualOp>(r, "Equal", 1);
  AddCompare<LessOp>(r, "Less", 1);
  AddCompare<GreaterOp>(r, "Greater", 1);
  AddCompare<LessOrEqualOp>(r, "LessOrEqual", 12);
  AddCompare<GreaterOrEqualOp>(r, "GreaterOrEqual", 12);
  AddCompare<AndOp>(r, "And", 1);
  AddCompare<OrOp>(r, "Or", 1);
  AddCompare<XorOp>(r, "Xor", 1);
}

}  // namespace seqto::ops
