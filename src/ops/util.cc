#include "ops/util.h"

namespace seqto::ops {

Expected<BroadcastPlan> BroadcastPlan::Make(const Shape& a, const Shape& b) {
  BroadcastPlan plan;
  SEQTO_ASSIGN_OR_RETURN(plan.out_shape, BroadcastShapes(a, b));
  const size_t rank = plan.out_shape.size();
  auto strides_for = [&](const Shape& s) {
    std::vector<int64_t> st(rank, 0);
    const auto contiguous = ContiguousStrides(s);
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t d = rank - s.size() + i;
      st[d] = s[i] == 1 ? 0 : contiguous[i];
    }
    return st;
  };
  plan.a_strides = strides_for(a);
  plan.b_strides = strides_for(b);
  return plan;
}

Error InputError(int index, const std::string& what) { return UserError("input " + std::to_string(index) + ": " + what); }

Error DTypeError(int index, DType dtype, const std::string& supported) {
  return UserError("input " + std::to_string(index) + " has type " + DTypeName(dtype) + ", supported: " + supported);
}

std::vector<int64_t> ReadInts(const Tensor& t) { return t.ToInt64s(); }

}  // namespace seqto::ops
