#include "core/shape.h"

#include <algorithm>
#include <cstdint>

namespace seqto {

int64_t NumElements(const Shape& shape) {
  // Saturates instead of overflowing (a corrupt shape must not be undefined
  // behaviour); a zero extent anywhere gives 0.
  int64_t n = 1;
  bool saturated = false;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    if (!saturated && __builtin_mul_overflow(n, d, &n)) saturated = true;
  }
  return saturated ? INT64_MAX : n;
}

std::string ShapeToString(const Shape& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += "x";
    s += std::to_string(shape[i]);
  }
  return s;
}

std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

Expected<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return UserError("shapes " + ShapeToString(a) + " and " + ShapeToString(b) + " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Expected<int64_t> NormalizeAxis(int64_t axis, int64_t rank) {
  const int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  if (axis < lo || axis > hi)
    return UserError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + std::max<int64_t>(rank, 1) : axis;
}

}  // namespace seqto
