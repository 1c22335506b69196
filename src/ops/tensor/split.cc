// Split: cuts a tensor into parts along an axis. Part sizes come from the `split`
// attribute (opsets 2-12), input 1 (opset 1 and 13+), or equal parts (an uneven last
// part with num_outputs, opset 18).
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateSplit(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 0));
  const bool has_split_attr = init.node.has_attr("split");
  SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> split_attr, init.node.attr_ints("split"));
  const bool has_num_outputs = init.node.has_attr("num_outputs");
  SEQTO_ASSIGN_OR_RETURN(const int64_t num_outputs, init.node.attr_int("num_outputs", 0));
  const bool split_from_input = init.opset == 1 || init.opset >= 13;
  for (int64_t s : split_attr)
    if (s < 0) return UserError("attribute 'split' " + tensorops::ListToString(split_attr) + " has a negative size");
  if (has_num_outputs && num_outputs < 1) return UserError("attribute 'num_outputs' must be positive");
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t r = x.rank();
    if (r == 0) return InputError(0, "cannot split a scalar");
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, r));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    const int64_t dim = x.dim(axis);
    const int64_t n_out = ctx.num_outputs();
    std::vector<int64_t> sizes;
    if (split_from_input && ctx.has_input(1)) {
      SEQTO_ASSIGN_OR_RETURN(sizes, tensorops::ReadIntList(ctx.input(1), 1, "split"));
    } else if (has_split_attr && !split_from_input) {
      sizes = split_attr;
    }
    if (!sizes.empty()) {  // an empty list means "not given"
      if (static_cast<int64_t>(sizes.size()) != n_out)
        return UserError("split " + tensorops::ListToString(sizes) + " has " + std::to_string(sizes.size()) +
                         " parts, the node has " + std::to_string(n_out) + " outputs");
      int64_t total = 0;
      for (int64_t s : sizes) {
        if (s < 0) return UserError("split " + tensorops::ListToString(sizes) + " has a negative size");
        SEQTO_ASSIGN_OR_RETURN(total, tensorops::CheckedAdd(total, s));
      }
      if (total != dim)
        return UserError("split " + tensorops::ListToString(sizes) + " sums to " + std::to_string(total) + ", axis " +
                         std::to_string(axis) + " of " + ShapeToString(x.shape()) + " has " + std::to_string(dim));
    } else if (has_num_outputs) {
      if (num_outputs != n_out)
        return UserError("attribute 'num_outputs' is " + std::to_string(num_outputs) + ", the node has " +
                         std::to_string(n_out) + " outputs");
      const int64_t part = (dim + n_out - 1) / n_out;
      for (int64_t i = 0; i < n_out; ++i) sizes.push_back(std::max<int64_t>(0, std::min(part, dim - i * part)));
    } else {
      if (n_out == 0 || dim % n_out != 0)
        return UserError("axis " + std::to_string(axis) + " of " + ShapeToString(x.shape()) + " cannot be split into " +
                         std::to_string(n_out) + " equal parts");
      sizes.assign(n_out, dim / n_out);
    }
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    int64_t inner = static_cast<int64_t>(es);
    for (int64_t d = axis + 1; d < r; ++d) inner *= x.dim(d);
    const int64_t in_row = dim * inner;
    const auto* src = static_cast<const std::byte*>(x.raw());
    int64_t offset = 0;
    for (int64_t i = 0; i < n_out; ++i) {
      const int64_t block = sizes[i] * inner;
      if (ctx.wants_output(static_cast<int>(i))) {
        Shape shape = x.shape();
        shape[axis] = sizes[i];
        Tensor& y = ctx.Allocate(static_cast<int>(i), x.dtype(), shape);
        auto* dst = static_cast<std::byte*>(y.raw());
        if (block > 0)
          ParallelFor(outer, block / 4 + 1, [&](int64_t b, int64_t e) {
            for (int64_t o = b; o < e; ++o)
              std::memcpy(dst + o * block, src + o * in_row + offset, static_cast<size_t>(block));
          });
      }
      offset += block;
    }
    return Status::Ok();
  });
}

}  // namespace

void RegisterSplit(OpRegistry& r) { r.Register({"Split", "", 1, CreateSplit}); }

}  // namespace seqto::ops
