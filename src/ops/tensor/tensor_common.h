// Helpers shared by the tensor-manipulation ops (ops/tensor/): most of them only
// move elements, so they work on raw bytes of the element size and are written once
// for every element type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/op.h"

namespace seqto::ops::tensorops {

// Calls f(U{}) with an unsigned integer type of `size` bytes (1, 2, 4 or 8): element
// copies through U move any element type of that size.
template <typename F>
void VisitElementSize(size_t size, F&& f) {
  switch (size) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}

// Bytes per element of input `index`, or an error for a type seqto cannot store.
Expected<size_t> ElementSize(int index, DType dtype);

// dst (contiguous, `shape`) = the strided view of src: element [i0, i1, ...] is read
// at src + sum(i_d * src_strides[d]) elements. Strides may be 0 (broadcast) or
// negative (reversed slices). Merges dimensions, copies contiguous runs with memcpy,
// transposes in cache tiles and splits big copies over threads.
void StridedCopy(const void* src, void* dst, const Shape& shape, const std::vector<int64_t>& src_strides,
                 size_t elem_size);

// The same copy, one element at a time (the reference the fast copy is tested against).
void StridedCopyReference(const void* src, void* dst, const Shape& shape, const std::vector<int64_t>& src_strides,
                          size_t elem_size);
// StridedCopyReference if `reference`, else StridedCopy.
inline void StridedCopy(const void* src, void* dst, const Shape& shape, const std::vector<int64_t>& src_strides,
                        size_t elem_size, bool reference) {
  if (reference)
    StridedCopyReference(src, dst, shape, src_strides, elem_size);
  else
    StridedCopy(src, dst, shape, src_strides, elem_size);
}

// True when the strided view over `shape` is the contiguous row-major layout of its
// elements (so a copy is a no-op and the result may alias the input).
bool IsContiguousView(const Shape& shape, const std::vector<int64_t>& strides);

// Fills n elements at dst with the elem_size bytes at value.
void FillElements(void* dst, int64_t n, const void* value, size_t elem_size);

// Writes `v` converted to `dtype` into out (DTypeSize(dtype) bytes). Error for a type
// without numbers.
Status ValueToBytes(double v, DType dtype, void* out);

// Reads an optional 1-D (or scalar) integer input as int64 values; error naming the
// input for other types.
Expected<std::vector<int64_t>> ReadIntList(const Tensor& t, int index, const std::string& what);

// Reads a scalar (or one-element) input as double.
Expected<double> ReadScalar(const Tensor& t, int index, const std::string& what);

// The index tuples of a GatherND/ScatterND `indices` input (last dim k) as element
// offsets into a tensor of shape `shape` whose first `batch_dims` dims are shared:
// tuple j of batch b addresses shape[batch_dims + i] with index i. Negative
// indices count from the end; an index out of range is an error.
Expected<std::vector<int64_t>> NdIndexOffsets(const Tensor& indices, int index, const Shape& shape, int64_t batch_dims);

// Normalizes a list of axes against `rank`; error on a duplicate or an axis out of range.
Expected<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank, const std::string& what);

// The element count of `shape`, or an error if an extent is negative or the count
// exceeds 2^48 (before it could overflow). For shapes computed from model data.
Expected<int64_t> CheckedNumElements(const Shape& shape);
// a * b and a + b for extents, with the same limit.
Expected<int64_t> CheckedMul(int64_t a, int64_t b);
Expected<int64_t> CheckedAdd(int64_t a, int64_t b);

// "[1, 2, 3]" for messages.
std::string ListToString(const std::vector<int64_t>& v);

}  // namespace seqto::ops::tensorops
