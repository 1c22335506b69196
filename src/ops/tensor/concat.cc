// Concat: joins tensors along an axis. Each input contributes one contiguous block
// per outer row; blocks are copied with memcpy, split over threads when big.
#include <algorithm>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateConcat(const KernelInit& init) {
  if (init.opset >= 4 && !init.node.has_attr("axis")) return UserError("attribute 'axis' is required");
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis_attr, init.node.attr_int("axis", 1));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    if (ctx.num_inputs() == 0 || !ctx.has_input(0)) return InputError(0, "Concat needs at least one input");
    const Tensor& first = ctx.input(0);
    const int64_t r = first.rank();
    if (r == 0) return InputError(0, "cannot concatenate scalars");
    SEQTO_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_attr, r));
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, first.dtype()));
    Shape out_shape = first.shape();
    out_shape[axis] = 0;
    std::vector<const Tensor*> ins;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i)) return InputError(i, "is missing");
      const Tensor& t = ctx.input(i);
      if (t.dtype() != first.dtype())
        return InputError(i, "has type " + DTypeName(t.dtype()) + ", input 0 has " + DTypeName(first.dtype()));
      if (t.rank() != r)
        return InputError(i, "has shape " + ShapeToString(t.shape()) + ", input 0 has " + ShapeToString(first.shape()));
      for (int64_t d = 0; d < r; ++d)
        if (d != axis && t.dim(d) != first.dim(d))
          return InputError(i, "has shape " + ShapeToString(t.shape()) + ", which differs from input 0's " +
                                   ShapeToString(first.shape()) + " outside axis " + std::to_string(axis));
      out_shape[axis] += t.dim(axis);
      ins.push_back(&t);
    }
    Tensor& y = ctx.Allocate(0, first.dtype(), out_shape);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out_shape[d];
    int64_t inner = static_cast<int64_t>(es);
    for (int64_t d = axis + 1; d < r; ++d) inner *= out_shape[d];
    const int64_t out_row = out_shape[axis] * inner;  // bytes per outer row of the output
    std::vector<int64_t> block(ins.size()), offset(ins.size());
    int64_t off = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      block[i] = ins[i]->dim(axis) * inner;
      offset[i] = off;
      off += block[i];
    }
    auto* dst = static_cast<std::byte*>(y.raw());
    const int64_t n_in = static_cast<int64_t>(ins.size());
    // Work items: (outer row, input) pairs; big single blocks are split further.
    constexpr int64_t kChunk = 1 << 16;
    if (outer == 1) {
      std::vector<int64_t> first_chunk(ins.size() + 1, 0);
      for (size_t i = 0; i < ins.size(); ++i)
        first_chunk[i + 1] = first_chunk[i] + std::max<int64_t>(1, (block[i] + kChunk - 1) / kChunk);
      ParallelFor(first_chunk.back(), kChunk / 4, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const size_t i = std::upper_bound(first_chunk.begin(), first_chunk.end(), c) - first_chunk.begin() - 1;
          const int64_t from = (c - first_chunk[i]) * kChunk;
          const int64_t len = std::min(kChunk, block[i] - from);
          if (len > 0)
            std::memcpy(dst + offset[i] + from, static_cast<const std::byte*>(ins[i]->raw()) + from,
                        static_cast<size_t>(len));
        }
      });
      return Status::Ok();
    }
    ParallelFor(outer * n_in, std::max<int64_t>(1, out_row / n_in / 4), [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t o = item / n_in, i = item % n_in;
        if (block[i] == 0) continue;
        std::memcpy(dst + o * out_row + offset[i], static_cast<const std::byte*>(ins[i]->raw()) + o * block[i],
                    static_cast<size_t>(block[i]));
      }
    });
    return Status::Ok();
  });
}

}  // namespace

void RegisterConcat(OpRegistry& r) { r.Register({"Concat", "", 1, CreateConcat}); }

}  // namespace seqto::ops
