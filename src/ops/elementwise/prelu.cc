// PRelu: y = x < 0 ? slope * x : x, with slope broadcast to x's shape (numpy rules,
// one direction only). Before opset 7 a 1-D slope of length C applies per channel
// (dimension 1) of an input [N, C, ...], as the PyTorch-exported models expect.
#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

struct PReluOp {
  template <typename T>
  T operator()(T x, T slope) const {
    if constexpr (std::is_floating_point_v<T>)
      return Select(Less(x, T(0)), x * slope, x);
    else if constexpr (std::is_signed_v<T>)
      return x < 0 ? WrapMul(x, slope) : x;
    else
      return x;
  }
};

Status RunPRelu(int64_t opset, KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!ctx.has_input(1)) return InputError(1, "missing (the slope)");
  Tensor slope = ctx.input(1);
  if (!InSet(x.dtype(), kNumericTypes)) return TypeError(0, x.dtype(), kNumericTypes);
  if (slope.dtype() != x.dtype())
    return InputError(
        1, "(slope) has type " + DTypeName(slope.dtype()) + ", expected input 0's type " + DTypeName(x.dtype()));
  if (opset < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1)) {
    Shape per_channel(static_cast<size_t>(x.rank() - 1), 1);
    per_channel[0] = slope.dim(0);
    slope = slope.Reshaped(per_channel);
  }
  auto loop = BroadcastLoop<2>::Make({&x.shape(), &slope.shape()});
  if (!loop || loop->out_shape != x.shape())
    return InputError(1, "(slope) has shape " + ShapeToString(ctx.input(1).shape()) +
                             ", which does not broadcast to input 0's shape " + ShapeToString(x.shape()));
  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
  VisitType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Allows<T>(kNumericTypes))
      BinaryLoop(*loop, x.data<T>(), slope.data<T>(), y.data<T>(), kCheap, OnStorage<T>(PReluOp{}));
  });
  return Status::Ok();
}

}  // namespace

void RegisterPRelu(OpRegistry& r) {
  r.Register({"PRelu", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                const int64_t opset = init.opset;
                return MakeKernel([opset](KernelContext& ctx) { return RunPRelu(opset, ctx); });
              }});
}

}  // namespace seqto::ops
