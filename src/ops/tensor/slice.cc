// Slice: starts/ends/axes as attributes (opsets 1-9) or inputs with steps (10+).
// Negative starts/ends count from the end; values are clamped as numpy does; a
// negative step walks backwards.
#include <algorithm>
#include <limits>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using tensorops::ListToString;

struct SliceSpec {
  std::vector<int64_t> starts, ends, axes, steps;
};

// Computes the output shape and the strided view of the input it selects.
Status PlanSlice(const Shape& in, const SliceSpec& spec, Shape& out, std::vector<int64_t>& strides, int64_t& base) {
  const int64_t r = static_cast<int64_t>(in.size());
  const size_t n = spec.starts.size();
  if (spec.ends.size() != n)
    return UserError("starts " + ListToString(spec.starts) + " and ends " + ListToString(spec.ends) +
                     " differ in length");
  std::vector<int64_t> axes = spec.axes;
  if (axes.empty())
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  if (axes.size() != n) return UserError("axes " + ListToString(axes) + " and starts differ in length");
  if (!spec.steps.empty() && spec.steps.size() != n)
    return UserError("steps " + ListToString(spec.steps) + " and starts differ in length");
  SEQTO_ASSIGN_OR_RETURN(axes, tensorops::NormalizeAxes(axes, r, "axes"));
  const std::vector<int64_t> in_strides = ContiguousStrides(in);
  out = in;
  strides = in_strides;
  base = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = axes[i], dim = in[a];
    // (-INT64_MAX keeps -step representable.)
    const int64_t step = spec.steps.empty() ? 1 : std::max(spec.steps[i], -std::numeric_limits<int64_t>::max());
    if (step == 0) return UserError("steps " + ListToString(spec.steps) + " has a 0");
    int64_t start = spec.starts[i], end = spec.ends[i];
    if (start < 0) start = start < -dim ? -1 : start + dim;  // -1 becomes 0 (or -1) by the clamp below
    if (end < 0) end = end < -dim ? -1 : end + dim;
    int64_t len;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      len = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      len = start > end ? (start - end - 1) / (-step) + 1 : 0;
    }
    out[a] = len;
    strides[a] = len > 1 ? in_strides[a] * step : 0;  // |step| < dim when len > 1: no overflow
    if (len > 0) base += start * in_strides[a];
  }
  return Status::Ok();
}

Status RunSlice(KernelContext& ctx, const SliceSpec& spec, bool ref) {
  const Tensor& x = ctx.input(0);
  SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
  Shape out;
  std::vector<int64_t> strides;
  int64_t base = 0;
  SEQTO_RETURN_IF_ERROR(PlanSlice(x.shape(), spec, out, strides, base));
  if (base == 0 && tensorops::IsContiguousView(out, strides) && NumElements(out) == x.numel()) {
    ctx.SetOutput(0, x.Reshaped(std::move(out)));  // the whole tensor
    return Status::Ok();
  }
  Tensor& y = ctx.Allocate(0, x.dtype(), out);
  if (y.numel() == 0) return Status::Ok();
  tensorops::StridedCopy(static_cast<const std::byte*>(x.raw()) + base * static_cast<int64_t>(es), y.raw(), out,
                         strides, es, ref);
  return Status::Ok();
}

Expected<std::unique_ptr<Kernel>> CreateSlice(const KernelInit& init) {
  const bool ref = init.reference_only;
  if (init.opset < 10) {
    SliceSpec spec;
    if (!init.node.has_attr("starts") || !init.node.has_attr("ends"))
      return UserError("attributes 'starts' and 'ends' are required");
    SEQTO_ASSIGN_OR_RETURN(spec.starts, init.node.attr_ints("starts"));
    SEQTO_ASSIGN_OR_RETURN(spec.ends, init.node.attr_ints("ends"));
    SEQTO_ASSIGN_OR_RETURN(spec.axes, init.node.attr_ints("axes"));
    return MakeKernel([=](KernelContext& ctx) -> Status { return RunSlice(ctx, spec, ref); });
  }
  return MakeKernel([ref](KernelContext& ctx) -> Status {
    if (!ctx.has_input(1) || !ctx.has_input(2)) return UserError("inputs 'starts' and 'ends' are required");
    SliceSpec spec;
    SEQTO_ASSIGN_OR_RETURN(spec.starts, tensorops::ReadIntList(ctx.input(1), 1, "starts"));
    SEQTO_ASSIGN_OR_RETURN(spec.ends, tensorops::ReadIntList(ctx.input(2), 2, "ends"));
    if (ctx.has_input(3)) {
      SEQTO_ASSIGN_OR_RETURN(spec.axes, tensorops::ReadIntList(ctx.input(3), 3, "axes"));
    }
    if (ctx.has_input(4)) {
      SEQTO_ASSIGN_OR_RETURN(spec.steps, tensorops::ReadIntList(ctx.input(4), 4, "steps"));
    }
    return RunSlice(ctx, spec, ref);
  });
}

}  // namespace

void RegisterSlice(OpRegistry& r) { r.Register({"Slice", "", 1, CreateSlice}); }

}  // namespace seqto::ops
