#include "ops/quant/fused_util.h"

#include <stdexcept>

#include "core/parallel.h"
#include "ops/registry.h"

namespace seqto::ops::quant {

namespace {
template <typename T>
void ClampKernel(T* y, int64_t n, int32_t lo, int32_t hi) {
  const T l = static_cast<T>(std::clamp<int32_t>(lo, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  const T h = static_cast<T>(std::clamp<int32_t>(hi, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      T v = y[i] < l ? l : y[i];
      y[i] = v > h ? h : v;
    }
  });
}
}  // namespace

void ClampInPlace(Tensor& y, int32_t lo, int32_t hi) {
  if (y.dtype() == DType::kUInt8)
    ClampKernel(y.data<uint8_t>(), y.numel(), lo, hi);
  else if (y.dtype() == DType::kInt8)
    ClampKernel(y.data<int8_t>(), y.numel(), lo, hi);
}

Tensor& InnerContext::Allocate(int i, DType dtype, Shape shape) {
  if (i < 0 || i >= num_outputs()) throw std::logic_error("inner kernel allocated output " + std::to_string(i));
  size_t bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes))
      throw std::length_error("inner kernel output of shape " + ShapeToString(shape) + " is too large");
  }
  outputs_[i] = Tensor();  // the previous run's tensor no longer holds the storage
  auto& storage = storages_[i];
  // Reuse the previous run's memory unless someone still holds it or it is too small.
  if (!storage || storage.use_count() > 1 || storage->capacity < bytes) storage = std::make_shared<Storage>(bytes);
  outputs_[i] = Tensor(dtype, std::move(shape), storage);
  return outputs_[i];
}

Expected<std::unique_ptr<Kernel>> MakeInnerKernel(const ir::Node& node, int64_t opset,
                                                  std::vector<const Tensor*> constant_inputs, bool reference_only) {
  const OpDef* def = OpRegistry::Global().Find(node.domain, node.op_type, opset);
  if (!def) return InternalError("the built-in op " + node.op_type + " is not registered");
  KernelInit init{node, opset, std::move(constant_inputs), reference_only};
  return def->create(init);
}

}  // namespace seqto::ops::quant
