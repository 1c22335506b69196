// Clip: y = min(max(x, min), max). Before opset 11 the bounds are float attributes;
// from 11 they are optional scalar inputs of x's type (integer types from 12). An
// absent bound does not clip (±infinity for floats, the type's range for integers).
// When min > max every element becomes max (numpy's behaviour). NaN stays NaN.
#include <limits>

#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

struct ClipAttrs {
  bool from_attributes = false;  // opset < 11
  bool has_min = false, has_max = false;
  float min = 0, max = 0;
};

template <typename T>
Status RunClipTyped(const ClipAttrs& attrs, KernelContext& ctx, const Tensor& x, Tensor& y) {
  using C = Compute<T>;
  C lo, hi;
  if constexpr (std::is_floating_point_v<C>) {
    lo = -std::numeric_limits<C>::infinity();
    hi = std::numeric_limits<C>::infinity();
  } else {
    lo = std::numeric_limits<C>::lowest();
    hi = std::numeric_limits<C>::max();
  }
  if (attrs.from_attributes) {
    if (attrs.has_min) lo = ConvertElement<C>(attrs.min);
    if (attrs.has_max) hi = ConvertElement<C>(attrs.max);
  } else {
    for (int i = 1; i <= 2; ++i) {
      if (!ctx.has_input(i)) continue;
      const Tensor& bound = ctx.input(i);
      const char* name = i == 1 ? "min" : "max";
      if (bound.dtype() != x.dtype())
        return InputError(i, std::string("(") + name + ") has type " + DTypeName(bound.dtype()) +
                                 ", expected input 0's type " + DTypeName(x.dtype()));
      if (bound.numel() != 1)
        return InputError(
            i, std::string("(") + name + ") has shape " + ShapeToString(bound.shape()) + ", expected a scalar");
      (i == 1 ? lo : hi) = Load(bound.data<T>()[0]);
    }
  }
  MapUnary(x.data<T>(), y.data<T>(), x.numel(), kCheap, [lo, hi](T v) {
    const C c = Load(v);
    const C above = Select(Less(c, lo), lo, c);
    return Store<T>(Select(Greater(above, hi), hi, above));
  });
  return Status::Ok();
}

}  // namespace

void RegisterClip(OpRegistry& r) {
  r.Register({"Clip", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                ClipAttrs attrs;
                attrs.from_attributes = init.opset < 11;
                if (attrs.from_attributes) {
                  attrs.has_min = init.node.has_attr("min");
                  attrs.has_max = init.node.has_attr("max");
                  SEQTO_ASSIGN_OR_RETURN(attrs.min, init.node.attr_float("min", 0));
                  SEQTO_ASSIGN_OR_RETURN(attrs.max, init.node.attr_float("max", 0));
                }
                return MakeKernel([attrs](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  if (!InSet(x.dtype(), kNumericTypes)) return TypeError(0, x.dtype(), kNumericTypes);
                  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
                  Status status;
                  VisitType(x.dtype(), [&](auto tag) {
                    using T = decltype(tag);
                    if constexpr (Allows<T>(kNumericTypes)) status = RunClipTyped<T>(attrs, ctx, x, y);
                  });
                  return status;
                });
              }});
}

}  // namespace seqto::ops
