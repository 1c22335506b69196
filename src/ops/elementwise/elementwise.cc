// Non-template parts of elementwise.h (no op is registered here).
#include "ops/elementwise/elementwise.h"

#include "ops/util.h"

namespace seqto::ops::ew {

std::string TypeSetNames(TypeSet set) {
  static constexpr DType kOrder[] = {
      DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,   DType::kInt16, DType::kInt32,
      DType::kInt64,   DType::kUInt8,   DType::kUInt16,  DType::kUInt32,   DType::kUInt64, DType::kBool};
  std::string out;
  for (DType t : kOrder)
    if (Bit(t) & set) out += (out.empty() ? "" : ", ") + DTypeName(t);
  return out;
}

Error TypeError(int index, DType dtype, TypeSet set) { return DTypeError(index, dtype, TypeSetNames(set)); }

Expected<LegacyBroadcast> LegacyBroadcast::Parse(const KernelInit& init) {
  LegacyBroadcast lb;
  if (init.opset >= 7) return lb;  // numpy broadcasting; the attributes no longer exist
  SEQTO_ASSIGN_OR_RETURN(const int64_t broadcast, init.node.attr_int("broadcast", 0));
  if (broadcast != 0 && broadcast != 1)
    return UserError("attribute 'broadcast' is " + std::to_string(broadcast) + ", expected 0 or 1");
  lb.enabled = broadcast == 1;
  lb.has_axis = init.node.has_attr("axis");
  if (lb.has_axis) {
    SEQTO_ASSIGN_OR_RETURN(lb.axis, init.node.attr_int("axis", 0));
  }
  return lb;
}

Expected<Shape> LegacyBroadcast::ShapeOfB(const Shape& a, const Shape& b) const {
  if (!enabled) return b;
  const int64_t rank_a = static_cast<int64_t>(a.size()), rank_b = static_cast<int64_t>(b.size());
  auto bad = [&](const std::string& why) {
    return InputError(1, "shape " + ShapeToString(b) + " cannot be broadcast to input 0's shape " + ShapeToString(a) +
                             " (broadcast=1" + (has_axis ? ", axis=" + std::to_string(axis) : "") + "): " + why);
  };
  if (rank_b > rank_a) return bad("it has more dimensions");
  int64_t start = has_axis ? axis : rank_a - rank_b;
  if (start < 0) start += rank_a;
  if (start < 0 || start + rank_b > rank_a) return bad("axis out of range");
  Shape out(static_cast<size_t>(rank_a), 1);
  for (int64_t i = 0; i < rank_b; ++i) {
    if (b[i] != a[start + i] && b[i] != 1) return bad("dimension " + std::to_string(i) + " differs");
    out[start + i] = b[i];
  }
  return out;
}

Expected<Tensor> LegacyBroadcast::AdjustB(const Tensor& a, const Tensor& b) const {
  if (!enabled) return b;
  SEQTO_ASSIGN_OR_RETURN(Shape shape, ShapeOfB(a.shape(), b.shape()));
  return b.Reshaped(std::move(shape));
}

}  // namespace seqto::ops::ew
