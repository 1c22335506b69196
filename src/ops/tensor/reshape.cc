// Ops that only change a tensor's shape: Reshape, Flatten, Squeeze, Unsqueeze. The
// output shares the input's storage.
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using tensorops::ListToString;

// The output shape of Reshape: 0 copies the input's extent (unless allowzero), -1 is
// inferred from the element count.
Expected<Shape> ReshapeTarget(const Shape& in, const std::vector<int64_t>& spec, bool allowzero) {
  Shape out(spec.size());
  int infer = -1;
  int64_t known = 1;
  bool has_zero = false;
  for (size_t i = 0; i < spec.size(); ++i) {
    const int64_t v = spec[i];
    if (v == -1) {
      if (infer >= 0) return UserError("shape " + ListToString(spec) + " has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (v < -1) return UserError("shape " + ListToString(spec) + " has a negative extent " + std::to_string(v));
    if (v == 0 && !allowzero) {
      if (i >= in.size())
        return UserError("shape " + ListToString(spec) + " copies dim " + std::to_string(i) + " (0) but the input " +
                         ShapeToString(in) + " has rank " + std::to_string(in.size()));
      out[i] = in[i];
    } else {
      out[i] = v;
    }
    has_zero |= v == 0;
    SEQTO_ASSIGN_OR_RETURN(known, tensorops::CheckedMul(known, out[i]));
  }
  const int64_t n = NumElements(in);
  if (infer >= 0) {
    if (allowzero && has_zero) return UserError("shape " + ListToString(spec) + " has both 0 and -1 with allowzero=1");
    if (known == 0) {
      if (n != 0)
        return UserError("cannot infer -1 in shape " + ListToString(spec) + " for input " + ShapeToString(in));
      out[infer] = 0;
    } else {
      if (n % known != 0) return UserError("cannot reshape " + ShapeToString(in) + " to " + ListToString(spec));
      out[infer] = n / known;
    }
  }
  SEQTO_ASSIGN_OR_RETURN(const int64_t out_n, tensorops::CheckedNumElements(out));
  if (out_n != n)
    return UserError("cannot reshape " + ShapeToString(in) + " (" + std::to_string(n) + " elements) to " +
                     ShapeToString(out));
  return out;
}

Expected<std::unique_ptr<Kernel>> CreateReshape(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t allowzero, init.node.attr_int("allowzero", 0));
  if (init.opset < 5) {  // Reshape-1: the shape is an attribute
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> spec, init.node.attr_ints("shape"));
    return MakeKernel([=](KernelContext& ctx) -> Status {
      SEQTO_ASSIGN_OR_RETURN(Shape out, ReshapeTarget(ctx.input(0).shape(), spec, false));
      ctx.SetOutput(0, ctx.input(0).Reshaped(std::move(out)));
      return Status::Ok();
    });
  }
  return MakeKernel([=](KernelContext& ctx) -> Status {
    if (!ctx.has_input(1)) return InputError(1, "'shape' is required");
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> spec, tensorops::ReadIntList(ctx.input(1), 1, "shape"));
    SEQTO_ASSIGN_OR_RETURN(Shape out, ReshapeTarget(ctx.input(0).shape(), spec, allowzero != 0));
    ctx.SetOutput(0, ctx.input(0).Reshaped(std::move(out)));
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateFlatten(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis, init.node.attr_int("axis", 1));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t r = x.rank();
    if (axis < -r || axis > r)
      return UserError("attribute 'axis' " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
    const int64_t a = axis < 0 ? axis + r : axis;
    int64_t outer = 1;
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
    int64_t inner = 1;
    for (int64_t d = a; d < r; ++d) inner *= x.dim(d);
    ctx.SetOutput(0, x.Reshaped({outer, inner}));
    return Status::Ok();
  });
}

// Axes from the attribute (before `input_since`) or from input 1 (from it on).
struct AxesSource {
  bool from_input = false;
  bool given = false;
  std::vector<int64_t> axes;
};

Expected<AxesSource> ReadAxesSource(const KernelInit& init, int64_t input_since) {
  AxesSource s;
  if (init.opset >= input_since) {
    s.from_input = true;
    return s;
  }
  s.given = init.node.has_attr("axes");
  SEQTO_ASSIGN_OR_RETURN(s.axes, init.node.attr_ints("axes"));
  return s;
}

Expected<std::vector<int64_t>> AxesAtRun(const AxesSource& src, KernelContext& ctx, bool* given) {
  if (!src.from_input) {
    *given = src.given;
    return src.axes;
  }
  *given = ctx.has_input(1);
  if (!ctx.has_input(1)) return std::vector<int64_t>{};
  return tensorops::ReadIntList(ctx.input(1), 1, "axes");
}

Expected<std::unique_ptr<Kernel>> CreateSqueeze(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const AxesSource src, ReadAxesSource(init, 13));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    bool given = false;
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> raw, AxesAtRun(src, ctx, &given));
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, tensorops::NormalizeAxes(raw, x.rank(), "axes"));
    std::vector<bool> drop(x.rank(), false);
    if (given && !axes.empty()) {
      for (int64_t a : axes) {
        if (x.dim(a) != 1)
          return UserError("cannot squeeze axis " + std::to_string(a) + " of shape " + ShapeToString(x.shape()) +
                           ": its extent is not 1");
        drop[a] = true;
      }
    } else {
      for (int64_t d = 0; d < x.rank(); ++d) drop[d] = x.dim(d) == 1;
    }
    Shape out;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (!drop[d]) out.push_back(x.dim(d));
    ctx.SetOutput(0, x.Reshaped(std::move(out)));
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateUnsqueeze(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const AxesSource src, ReadAxesSource(init, 13));
  if (!src.from_input && !src.given) return UserError("attribute 'axes' is required");
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    bool given = false;
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> raw, AxesAtRun(src, ctx, &given));
    if (!given) return InputError(1, "'axes' is required");
    const int64_t out_rank = x.rank() + static_cast<int64_t>(raw.size());
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, tensorops::NormalizeAxes(raw, out_rank, "axes"));
    std::vector<bool> inserted(out_rank, false);
    for (int64_t a : axes) inserted[a] = true;
    Shape out(out_rank);
    int64_t next = 0;
    for (int64_t d = 0; d < out_rank; ++d) out[d] = inserted[d] ? 1 : x.dim(next++);
    ctx.SetOutput(0, x.Reshaped(std::move(out)));
    return Status::Ok();
  });
}

}  // namespace

void RegisterReshape(OpRegistry& r) {
  r.Register({"Reshape", "", 1, CreateReshape});
  r.Register({"Flatten", "", 1, CreateFlatten});
  r.Register({"Squeeze", "", 1, CreateSqueeze});
  r.Register({"Unsqueeze", "", 1, CreateUnsqueeze});
}

}  // namespace seqto::ops
