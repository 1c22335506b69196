// Shape (the input's extents as int64, optionally a start:end range of them from
// opset 15) and Size (the element count as an int64 scalar).
#include <algorithm>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<std::unique_ptr<Kernel>> CreateShape(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const int64_t start_attr, init.node.attr_int("start", 0));
  const bool has_end = init.node.has_attr("end");
  SEQTO_ASSIGN_OR_RETURN(const int64_t end_attr, init.node.attr_int("end", 0));
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t r = x.rank();
    auto clamp_axis = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
    const int64_t start = clamp_axis(start_attr);
    const int64_t end = has_end ? clamp_axis(end_attr) : r;
    const int64_t n = std::max<int64_t>(0, end - start);
    Tensor& y = ctx.Allocate(0, DType::kInt64, {n});
    for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = x.dim(start + i);
    return Status::Ok();
  });
}

}  // namespace

void RegisterShape(OpRegistry& r) {
  r.Register({"Shape", "", 1, CreateShape});
  r.Register({"Size", "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  Tensor& y = ctx.Allocate(0, DType::kInt64, {});
                  y.data<int64_t>()[0] = ctx.input(0).numel();
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
