#include "ops/util.h"

#include <algorithm>

#include "ops/tensor/tensor_common.h"

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

Error InputError(int index, const std::string& what) {
  return UserError("input " + std::to_string(index) + ": " + what);
}

Error DTypeError(int index, DType dtype, const std::string& supported) {
  return UserError("input " + std::to_string(index) + " has type " + DTypeName(dtype) + ", supported: " + supported);
}

std::vector<int64_t> ReadInts(const Tensor& t) { return t.ToInt64s(); }

Shape ChannelsLastShape(const Shape& s) {
  Shape r = s;
  if (s.size() < 2) return r;
  std::copy(s.begin() + 2, s.end(), r.begin() + 1);
  r.back() = s[1];
  return r;
}

Shape ChannelsFirstShape(const Shape& s) {
  Shape r = s;
  if (s.size() < 2) return r;
  r[1] = s.back();
  std::copy(s.begin() + 1, s.end() - 1, r.begin() + 2);
  return r;
}

namespace {
// Copies `src` (of shape `from`) permuted so that dst dimension d is src dimension perm[d].
void PermutedCopy(const Tensor& src, Tensor& dst, const std::vector<size_t>& perm) {
  const Shape& from = src.shape();
  std::vector<int64_t> strides(from.size());
  int64_t stride = 1;
  for (size_t d = from.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= from[d];
  }
  std::vector<int64_t> src_strides(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) src_strides[d] = strides[perm[d]];
  tensorops::StridedCopy(src.raw(), dst.raw(), dst.shape(), src_strides, DTypeSize(src.dtype()));
}
}  // namespace

Tensor ToChannelsFirst(const Tensor& src) {
  Tensor dst(src.dtype(), ChannelsFirstShape(src.shape()));
  const size_t r = src.shape().size();
  std::vector<size_t> perm(r);  // dst [N, C, S...] <- src [N, S..., C]
  for (size_t d = 0; d < r; ++d) perm[d] = d == 0 ? 0 : d == 1 ? r - 1 : d - 1;
  if (r >= 2) PermutedCopy(src, dst, perm);
  return dst;
}

void CopyToChannelsLast(const Tensor& src, Tensor& dst) {
  const size_t r = src.shape().size();
  std::vector<size_t> perm(r);  // dst [N, S..., C] <- src [N, C, S...]
  for (size_t d = 0; d < r; ++d) perm[d] = d == 0 ? 0 : d == r - 1 ? 1 : d + 1;
  if (r >= 2) PermutedCopy(src, dst, perm);
}

}  // namespace seqto::ops
