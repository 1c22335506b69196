#include "ops/tensor/tensor_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "ops/util.h"

namespace seqto::ops::tensorops {

Expected<size_t> ElementSize(int index, DType dtype) {
  const size_t size = DTypeSize(dtype);
  if (size == 0 || size > 8) return DTypeError(index, dtype, "any numeric or bool type");
  return size;
}

namespace {

// Dimensions after dropping extents of 1 and merging neighbours that are contiguous
// with each other in the source.
struct Collapsed {
  Shape shape;
  std::vector<int64_t> strides;
};

Collapsed Collapse(const Shape& shape, const std::vector<int64_t>& strides) {
  Collapsed c;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!c.shape.empty() && c.strides.back() == strides[d] * shape[d]) {
      c.shape.back() *= shape[d];
      c.strides.back() = strides[d];
    } else {
      c.shape.push_back(shape[d]);
      c.strides.push_back(strides[d]);
    }
  }
  return c;
}

// Source offset (elements) of row `row` over the outer dims [0, dims) of `c`, and
// the multi-index of that row.
int64_t RowOffset(const Collapsed& c, size_t dims, int64_t row, std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = dims; d-- > 0;) {
    idx[d] = row % c.shape[d];
    row /= c.shape[d];
    off += idx[d] * c.strides[d];
  }
  return off;
}

// Advances idx over the outer dims [0, dims) like an odometer; returns the change of
// the source offset.
int64_t NextRow(const Collapsed& c, size_t dims, std::vector<int64_t>& idx) {
  int64_t delta = 0;
  for (size_t d = dims; d-- > 0;) {
    ++idx[d];
    delta += c.strides[d];
    if (idx[d] < c.shape[d]) break;
    delta -= c.strides[d] * c.shape[d];
    idx[d] = 0;
  }
  return delta;
}

// Rows of the innermost dim, each read with a stride (0: broadcast).
template <typename U>
void CopyStridedRows(const U* src, U* dst, const Collapsed& c) {
  const size_t r = c.shape.size();
  const int64_t inner = c.shape[r - 1], step = c.strides[r - 1];
  const int64_t rows = NumElements(c.shape) / inner;
  ParallelFor(rows, inner, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(r, 0);
    int64_t off = RowOffset(c, r - 1, begin, idx);
    for (int64_t row = begin; row < end; ++row) {
      U* out = dst + row * inner;
      const U* in = src + off;
      if (step == 0) {
        std::fill(out, out + inner, *in);
      } else {
        for (int64_t i = 0; i < inner; ++i) out[i] = in[i * step];
      }
      off += NextRow(c, r - 1, idx);
    }
  });
}

// A transpose: the innermost output dim is strided in the source, and dim k is the
// source's contiguous one. Copies tiles of (k, last) so both sides stay in cache.
template <typename U>
void CopyTiled(const U* src, U* dst, const Collapsed& c, size_t k) {
  constexpr int64_t kTile = 32;
  const size_t r = c.shape.size();
  const size_t last = r - 1;
  const std::vector<int64_t> dst_strides = ContiguousStrides(c.shape);
  // Outer dims: all but k and last.
  Collapsed outer;
  std::vector<int64_t> outer_dst;
  for (size_t d = 0; d < last; ++d) {
    if (d == k) continue;
    outer.shape.push_back(c.shape[d]);
    outer.strides.push_back(c.strides[d]);
    outer_dst.push_back(dst_strides[d]);
  }
  const int64_t n_outer = NumElements(outer.shape);
  const int64_t k_tiles = (c.shape[k] + kTile - 1) / kTile;
  const int64_t k_len = c.shape[k], l_len = c.shape[last];
  const int64_t k_dst = dst_strides[k], l_src = c.strides[last];
  ParallelFor(n_outer * k_tiles, kTile * l_len, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(outer.shape.size(), 0);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t o = item / k_tiles, kt = item % k_tiles;
      const int64_t src_off = RowOffset(outer, outer.shape.size(), o, idx);
      int64_t dst_off = 0;
      for (size_t d = 0; d < idx.size(); ++d) dst_off += idx[d] * outer_dst[d];
      const int64_t k0 = kt * kTile, k1 = std::min(k_len, k0 + kTile);
      for (int64_t l0 = 0; l0 < l_len; l0 += kTile) {
        const int64_t l1 = std::min(l_len, l0 + kTile);
        for (int64_t a = k0; a < k1; ++a) {
          const U* in = src + src_off + a;
          U* out = dst + dst_off + a * k_dst;
          for (int64_t b = l0; b < l1; ++b) out[b] = in[b * l_src];
        }
      }
    }
  });
}

// out[a * kC + b] = in[a + b * l_src] for a in [a0, a1): kC stores per a, a group
// the compiler vectorizes with permutes.
template <typename U, int kC>
SEQTO_WIDE_CLONES void InterleaveRows(const U* __restrict in, U* __restrict out, int64_t l_src, int64_t a0,
                                      int64_t a1) {
#pragma omp simd
  for (int64_t a = a0; a < a1; ++a)
    for (int b = 0; b < kC; ++b) out[a * kC + b] = in[a + b * l_src];
}

// A transpose whose output rows hold 2 or 3 elements and whose next dim out is the
// source's contiguous one (an image's NCHW -> NHWC): CopyStridedRows would pay an
// index update per row of 3, CopyTiled a scalar loop per element.
template <typename U, int kC>
void CopyInterleaved(const U* src, U* dst, const Collapsed& c) {
  const size_t k = c.shape.size() - 2;
  Collapsed outer;
  outer.shape.assign(c.shape.begin(), c.shape.begin() + static_cast<std::ptrdiff_t>(k));
  outer.strides.assign(c.strides.begin(), c.strides.begin() + static_cast<std::ptrdiff_t>(k));
  constexpr int64_t kBlock = 1024;
  const int64_t k_len = c.shape[k], l_src = c.strides[k + 1];
  const int64_t blocks = (k_len + kBlock - 1) / kBlock;
  ParallelFor(NumElements(outer.shape) * blocks, kBlock * kC, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(outer.shape.size(), 0);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t o = item / blocks, a0 = item % blocks * kBlock;
      const int64_t src_off = RowOffset(outer, outer.shape.size(), o, idx);
      InterleaveRows<U, kC>(src + src_off, dst + o * k_len * kC, l_src, a0, std::min(k_len, a0 + kBlock));
    }
  });
}

}  // namespace

void StridedCopy(const void* src_v, void* dst_v, const Shape& shape, const std::vector<int64_t>& src_strides,
                 size_t elem_size) {
  const int64_t n = NumElements(shape);
  if (n <= 0) return;
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  const Collapsed c = Collapse(shape, src_strides);
  if (c.shape.empty()) {  // a single element
    std::memcpy(dst, src, elem_size);
    return;
  }
  const size_t r = c.shape.size();
  const int64_t inner = c.shape[r - 1];
  if (c.strides[r - 1] == 1) {  // contiguous rows: memcpy each
    const int64_t rows = n / inner;
    const size_t row_bytes = static_cast<size_t>(inner) * elem_size;
    if (rows == 1) {
      // One big block: split it so several threads copy.
      constexpr int64_t kChunk = 1 << 16;
      const int64_t chunks = (static_cast<int64_t>(row_bytes) + kChunk - 1) / kChunk;
      ParallelFor(chunks, kChunk / 4, [&](int64_t b, int64_t e) {
        const size_t from = static_cast<size_t>(b * kChunk);
        const size_t to = std::min(row_bytes, static_cast<size_t>(e * kChunk));
        std::memcpy(dst + from, src + from, to - from);
      });
      return;
    }
    ParallelFor(rows, inner * static_cast<int64_t>(elem_size) / 4 + 1, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> idx(r, 0);
      int64_t off = RowOffset(c, r - 1, begin, idx);
      for (int64_t row = begin; row < end; ++row) {
        std::memcpy(dst + row * row_bytes, src + off * static_cast<int64_t>(elem_size), row_bytes);
        off += NextRow(c, r - 1, idx);
      }
    });
    return;
  }
  // A transpose-like copy: tile it if some other dim is contiguous in the source.
  size_t k = r;
  for (size_t d = 0; d + 1 < r; ++d)
    if (c.strides[d] == 1) k = d;
  const bool tiled = k < r && c.shape[k] >= 4 && inner >= 4;
  const bool interleave = k + 2 == r && c.shape[k] >= 16 && (inner == 2 || inner == 3);
  VisitElementSize(elem_size, [&](auto tag) {
    using U = decltype(tag);
    if (interleave && inner == 2)
      CopyInterleaved<U, 2>(reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), c);
    else if (interleave)
      CopyInterleaved<U, 3>(reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), c);
    else if (tiled)
      CopyTiled(reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), c, k);
    else
      CopyStridedRows(reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), c);
  });
}

void StridedCopyReference(const void* src_v, void* dst_v, const Shape& shape, const std::vector<int64_t>& src_strides,
                          size_t elem_size) {
  const int64_t n = NumElements(shape);
  const auto* src = static_cast<const std::byte*>(src_v);
  auto* dst = static_cast<std::byte*>(dst_v);
  const size_t r = shape.size();
  std::vector<int64_t> idx(r, 0);
  const auto es = static_cast<int64_t>(elem_size);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += idx[d] * src_strides[d];
    std::memcpy(dst + i * es, src + off * es, elem_size);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

bool IsContiguousView(const Shape& shape, const std::vector<int64_t>& strides) {
  if (NumElements(shape) == 0) return true;
  const Collapsed c = Collapse(shape, strides);
  return c.shape.empty() || (c.shape.size() == 1 && c.strides[0] == 1);
}

void FillElements(void* dst, int64_t n, const void* value, size_t elem_size) {
  if (n <= 0) return;
  VisitElementSize(elem_size, [&](auto tag) {
    using U = decltype(tag);
    U v;
    std::memcpy(&v, value, sizeof(U));
    U* out = static_cast<U*>(dst);
    ParallelFor(n, 1, [&](int64_t b, int64_t e) { std::fill(out + b, out + e, v); });
  });
}

namespace {
template <typename T>
T SaturatingCast(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T(0);
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::lowest();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}
}  // namespace

Status ValueToBytes(double v, DType dtype, void* out) {
  switch (dtype) {
    case DType::kBool: {
      const bool b = v != 0;
      std::memcpy(out, &b, 1);
      return Status::Ok();
    }
    case DType::kFloat16: {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(out, &h, 2);
      return Status::Ok();
    }
    case DType::kBFloat16: {
      const uint16_t h = FloatToBFloat16(static_cast<float>(v));
      std::memcpy(out, &h, 2);
      return Status::Ok();
    }
    default:
      break;
  }
  const bool ok = VisitNumeric(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T t = SaturatingCast<T>(v);
    std::memcpy(out, &t, sizeof(T));
  });
  if (!ok) return UserError("type " + DTypeName(dtype) + " has no numeric values");
  return Status::Ok();
}

Expected<std::vector<int64_t>> ReadIntList(const Tensor& t, int index, const std::string& what) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)
    return InputError(index, what + " must be int64 (or int32), got " + DTypeName(t.dtype()));
  if (t.rank() > 1) return InputError(index, what + " must be 1-D, got shape " + ShapeToString(t.shape()));
  return t.ToInt64s();
}

Expected<double> ReadScalar(const Tensor& t, int index, const std::string& what) {
  if (t.numel() != 1) return InputError(index, what + " must have one element, got shape " + ShapeToString(t.shape()));
  if (DTypeSize(t.dtype()) == 0) return DTypeError(index, t.dtype(), "a numeric type");
  return t.ToDoubles()[0];
}

Expected<std::vector<int64_t>> NdIndexOffsets(const Tensor& indices, int index, const Shape& shape,
                                              int64_t batch_dims) {
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32)
    return DTypeError(index, indices.dtype(), "int32, int64");
  const int64_t q = indices.rank(), r = static_cast<int64_t>(shape.size());
  if (q < 1) return InputError(index, "indices must have rank >= 1");
  const int64_t k = indices.dim(q - 1);
  if (batch_dims < 0 || batch_dims >= std::min(q, r + 1) || k < 0 || k > r - batch_dims)
    return InputError(index, "indices of shape " + ShapeToString(indices.shape()) + " do not fit data of shape " +
                                 ShapeToString(shape) + " with batch_dims " + std::to_string(batch_dims));
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  const std::vector<int64_t> idx = indices.ToInt64s();
  const int64_t tuples = k == 0 ? NumElements(Shape(indices.shape().begin(), indices.shape().end() - 1))
                                : static_cast<int64_t>(idx.size()) / k;
  int64_t batches = 1;
  for (int64_t d = 0; d < batch_dims; ++d) batches *= shape[d];
  const int64_t per_batch = batches == 0 ? 0 : tuples / batches;
  const int64_t batch_stride = batch_dims == 0 ? 0 : strides[batch_dims - 1];
  std::vector<int64_t> out(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch == 0 ? 0 : (t / per_batch) * batch_stride;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t dim = shape[batch_dims + i];
      int64_t v = idx[t * k + i];
      if (v < -dim || v >= dim)
        return InputError(index, "index " + std::to_string(v) + " is out of range for dimension " +
                                     std::to_string(batch_dims + i) + " of shape " + ShapeToString(shape));
      if (v < 0) v += dim;
      off += v * strides[batch_dims + i];
    }
    out[t] = off;
  }
  return out;
}

Expected<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what) {
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 1)), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      return UserError(what + ": axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    const int64_t n = a < 0 ? a + rank : a;
    if (seen[n]) return UserError(what + ": axis " + std::to_string(a) + " is repeated in " + ListToString(axes));
    seen[n] = true;
    out.push_back(n);
  }
  return out;
}

namespace {
constexpr int64_t kMaxExtent = int64_t{1} << 48;
Error TooLarge(const std::string& what) { return UserError(what + " is too large (more than 2^48 elements)"); }
}  // namespace

Expected<int64_t> CheckedMul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return UserError("negative extent");
  if (a != 0 && b > kMaxExtent / a) return TooLarge("extent " + std::to_string(a) + " x " + std::to_string(b));
  return a * b;
}

Expected<int64_t> CheckedAdd(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return UserError("negative extent");
  if (a > kMaxExtent || b > kMaxExtent - a) return TooLarge("extent " + std::to_string(a) + " + " + std::to_string(b));
  return a + b;
}

Expected<int64_t> CheckedNumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return UserError("shape " + ShapeToString(shape) + " has a negative extent");
    if (d != 0 && n > kMaxExtent / d) return TooLarge("shape " + ShapeToString(shape));
    n *= d;
  }
  for (int64_t d : shape)
    if (d > kMaxExtent) return TooLarge("shape " + ShapeToString(shape));
  return n;
}

std::string ListToString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace seqto::ops::tensorops
