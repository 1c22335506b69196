#include "core/tensor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace seqto {

Storage::Storage(size_t cap) : capacity(cap) {
  if (cap > (SIZE_MAX >> 1)) throw std::bad_alloc();  // also keeps the rounding below from wrapping
  const size_t rounded = ((cap + 63) / 64) * 64;
  data = static_cast<std::byte*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
  if (!data) throw std::bad_alloc();
}

Storage::~Storage() { std::free(data); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  storage_ = std::make_shared<Storage>(nbytes());
  std::memset(storage_->data, 0, storage_->capacity);
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<Storage> storage)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)) {}

template <>
Tensor Tensor::FromVector<bool>(Shape shape, const std::vector<bool>& values) {
  Tensor t(DType::kBool, std::move(shape));
  bool* out = t.data<bool>();
  for (size_t i = 0; i < values.size() && i < static_cast<size_t>(t.numel()); ++i) out[i] = values[i];
  return t;
}

Tensor Tensor::Reshaped(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

std::vector<double> Tensor::ToDoubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  const int64_t n = numel();
  switch (dtype_) {
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) out[i] = data<bool>()[i];
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(data<uint16_t>()[i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(data<uint16_t>()[i]);
      break;
    default:
      VisitNumeric(dtype_, [&](auto tag) {
        using T = decltype(tag);
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(data<T>()[i]);
      });
  }
  return out;
}

std::vector<int64_t> Tensor::ToInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  const int64_t n = numel();
  if (dtype_ == DType::kBool) {
    for (int64_t i = 0; i < n; ++i) out[i] = data<bool>()[i];
    return out;
  }
  VisitNumeric(dtype_, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(data<T>()[i]);
  });
  return out;
}

std::string Tensor::Describe() const { return DTypeName(dtype_) + "[" + ShapeToString(shape_) + "]"; }

namespace {
// True if no element has all exponent bits set (the IEEE encoding of NaN and infinity).
template <typename Bits>
bool NoneHasFullExponent(const void* data, int64_t n, Bits exponent) {
  const auto* u = static_cast<const Bits*>(data);
  Bits bad = 0;  // or-ed without branches, so the loop vectorizes
  // omp simd: -O2's cost model leaves a loop with a remainder scalar, and a session
  // runs this over every float input of every run.
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= static_cast<Bits>((u[i] & exponent) == exponent);
  return bad == 0;
}
}  // namespace

bool AllFinite(const Tensor& t) {
  if (!t.defined()) return true;
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32:
      return NoneHasFullExponent<uint32_t>(t.raw(), n, 0x7f800000u);
    case DType::kFloat64:
      return NoneHasFullExponent<uint64_t>(t.raw(), n, 0x7ff0000000000000ull);
    case DType::kFloat16:
      return NoneHasFullExponent<uint16_t>(t.raw(), n, 0x7c00u);
    case DType::kBFloat16:
      return NoneHasFullExponent<uint16_t>(t.raw(), n, 0x7f80u);
    default:
      return true;
  }
}

}  // namespace seqto
