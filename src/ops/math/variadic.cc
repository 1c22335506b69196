// Variadic elementwise ops with numpy broadcasting: Sum, Mean, Min, Max. The inputs
// are folded pairwise into the output (in place once the running result has the
// output's shape). Min and Max propagate NaN like numpy.
#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

struct SumOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return WrapAdd(a, b);
  }
};
struct MeanOp : SumOp {
  static constexpr TypeSet kTypes = kFloatTypes;
};
struct MinOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return Select(Less(a, b) || IsNan(a), a, b);
  }
};
struct MaxOp {
  static constexpr TypeSet kTypes = kNumericTypes;
  template <typename T>
  T operator()(T a, T b) const {
    return Select(Greater(a, b) || IsNan(a), a, b);
  }
};

template <typename T, typename Op>
Status Fold(const Op& op, KernelContext& ctx, Tensor& y) {
  Tensor acc = ctx.input(0);
  for (int k = 1; k < ctx.num_inputs(); ++k) {
    const Tensor& in = ctx.input(k);
    SEQTO_ASSIGN_OR_RETURN(const BroadcastLoop<2> loop, BroadcastLoop<2>::Make({&acc.shape(), &in.shape()}));
    // The running result goes to the output once it has the output's shape (then
    // acc is y and the loop reads and writes each element in place).
    Tensor dst = loop.out_shape == y.shape() ? y : Tensor(y.dtype(), loop.out_shape);
    BinaryLoop(loop, acc.data<T>(), in.data<T>(), dst.data<T>(), kCheap, OnStorage<T>(op));
    acc = dst;
  }
  if constexpr (std::is_same_v<Op, MeanOp>) {
    const Compute<T> count = static_cast<Compute<T>>(ctx.num_inputs());
    MapUnary(y.data<T>(), y.data<T>(), y.numel(), kCheap, [count](T v) { return Store<T>(Load(v) / count); });
  }
  return Status::Ok();
}

template <typename Op>
Status RunVariadic(KernelContext& ctx) {
  const int n = ctx.num_inputs();
  if (n == 0 || !ctx.has_input(0)) return UserError("needs at least one input");
  const DType dtype = ctx.input(0).dtype();
  if (!InSet(dtype, Op::kTypes)) return TypeError(0, dtype, Op::kTypes);
  Shape shape = ctx.input(0).shape();
  for (int k = 1; k < n; ++k) {
    if (!ctx.has_input(k)) return InputError(k, "missing");
    const Tensor& in = ctx.input(k);
    if (in.dtype() != dtype)
      return InputError(k, "has type " + DTypeName(in.dtype()) + ", expected input 0's type " + DTypeName(dtype));
    SEQTO_ASSIGN_OR_RETURN(shape, BroadcastShapes(shape, in.shape()));
  }
  if (n == 1) {
    ctx.SetOutput(0, ctx.input(0));
    return Status::Ok();
  }
  Tensor& y = ctx.Allocate(0, dtype, shape);
  Status status;
  VisitType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Allows<T>(Op::kTypes)) status = Fold<T>(Op{}, ctx, y);
  });
  return status;
}

template <typename Op>
void AddVariadic(OpRegistry& r, const char* name) {
  r.Register({name, "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) { return RunVariadic<Op>(ctx); });
              }});
}

}  // namespace

void RegisterVariadic(OpRegistry& r) {
  AddVariadic<SumOp>(r, "Sum");
  AddVariadic<MeanOp>(r, "Mean");
  AddVariadic<MinOp>(r, "Min");
  AddVariadic<MaxOp>(r, "Max");
}

}  // namespace seqto::ops
