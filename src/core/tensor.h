// Tensor: a typed, shaped, contiguous (row-major) block of memory. Copies share the
// storage; use Clone() for a deep copy. Storage is 64-byte aligned so vector kernels
// and oneDNN can use it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace seqto {

// A block of raw memory. `capacity` may exceed what the tensor using it needs:
// the executor recycles storages between values of different sizes.
struct Storage {
  explicit Storage(size_t capacity);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  std::byte* data = nullptr;
  size_t capacity = 0;
};

class Tensor {
 public:
  Tensor() = default;
  // A new, zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  // A tensor over existing storage (which must be large enough).
  Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage);

  template <typename T>
  static Tensor FromVector(Shape shape, const std::vector<T>& values);
  template <typename T>
  static Tensor Scalar(T value) {
    return FromVector<T>({}, {value});
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t numel() const { return NumElements(shape_); }
  // SIZE_MAX when the shape is too large to exist (allocating it then fails).
  size_t nbytes() const {
    size_t n;
    if (numel() < 0 || __builtin_mul_overflow(static_cast<size_t>(numel()), DTypeSize(dtype_), &n)) return SIZE_MAX;
    return n;
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw() { return storage_ ? storage_->data : nullptr; }
  const void* raw() const { return storage_ ? storage_->data : nullptr; }
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(raw());
  }

  // Same storage, new shape with the same element count.
  Tensor Reshaped(Shape shape) const;
  Tensor Clone() const;
  // Elements converted to double (for tests, statistics and messages).
  std::vector<double> ToDoubles() const;
  // Elements converted to int64 (for shape-like inputs).
  std::vector<int64_t> ToInt64s() const;
  // "float32[1x3x224x224]".
  std::string Describe() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
};

template <typename T>
Tensor Tensor::FromVector(Shape shape, const std::vector<T>& values) {
  Tensor t(DTypeOf<T>(), std::move(shape));
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.numel()); ++i) out[i] = values[i];
  return t;
}
template <>
Tensor Tensor::FromVector<bool>(Shape shape, const std::vector<bool>& values);

// False if a floating-point tensor holds a NaN or an infinity (any float type); true
// for integer and bool tensors and for undefined ones. One pass over the bits.
bool AllFinite(const Tensor& t);

}  // namespace seqto
