#include "ops/quant/quant_util.h"

#include <atomic>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/op.h"
#include "ops/util.h"

namespace seqto::ops::quant {

bool IsQuantType(DType t) {
  return t == DType::kUInt8 || t == DType::kInt8 || t == DType::kUInt16 || t == DType::kInt16;
}

IntRange RangeOf(DType t) {
  switch (t) {
    case DType::kUInt8:
      return {0, 255};
    case DType::kInt8:
      return {-128, 127};
    case DType::kUInt16:
      return {0, 65535};
    case DType::kInt16:
      return {-32768, 32767};
    default:
      return {INT32_MIN, INT32_MAX};
  }
}

std::vector<int32_t> ReadInt32s(const Tensor& t) {
  const int64_t n = t.numel();
  std::vector<int32_t> v(static_cast<size_t>(n));
  auto read = [&](const auto* p) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(p[i]);
  };
  switch (t.dtype()) {
    case DType::kUInt8:
      read(t.data<uint8_t>());
      break;
    case DType::kInt8:
      read(t.data<int8_t>());
      break;
    case DType::kUInt16:
      read(t.data<uint16_t>());
      break;
    case DType::kInt16:
      read(t.data<int16_t>());
      break;
    case DType::kInt32:
      read(t.data<int32_t>());
      break;
    default:
      v.assign(v.size(), 0);
      break;
  }
  return v;
}

Expected<std::vector<float>> ReadScales(const Tensor& t, int index, const char* name) {
  const int64_t n = t.numel();
  std::vector<float> v(static_cast<size_t>(n));
  if (t.dtype() == DType::kFloat32) {
    for (int64_t i = 0; i < n; ++i) v[i] = t.data<float>()[i];
  } else if (t.dtype() == DType::kFloat16) {
    for (int64_t i = 0; i < n; ++i) v[i] = HalfToFloat(t.data<Float16>()[i].bits);
  } else if (t.dtype() == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) v[i] = BFloat16ToFloat(t.data<BFloat16>()[i].bits);
  } else {
    return InputError(
        index, std::string(name) + " has type " + DTypeName(t.dtype()) + ", expected float32, float16 or bfloat16");
  }
  return v;
}

Expected<std::vector<int32_t>> ReadZeroPoints(const Tensor& zp, DType expected, int index, const char* name) {
  if (zp.dtype() != expected)
    return InputError(index, std::string(name) + " has type " + DTypeName(zp.dtype()) + ", expected " +
                                 DTypeName(expected) + " (the type of the tensor it quantizes)");
  return ReadInt32s(zp);
}

template <typename T>
Expected<MatrixParam<T>> ExpandMatrixParam(std::vector<T> values, const Shape& param_shape, const Shape& batch,
                                           int64_t count, bool per_row, int index, const char* name) {
  MatrixParam<T> p;
  if (values.size() == 1) {
    p.values = std::move(values);
    return p;
  }
  auto bad = [&] {
    return InputError(index, std::string(name) + " has shape " + ShapeToString(param_shape) +
                                 ", expected one value or " + std::to_string(count) +
                                 (per_row ? " (one per row of A)" : " (one per column of B)"));
  };
  // The parameter's batch dims and its count dim.
  Shape p_batch;
  if (param_shape.size() == 1) {
    if (param_shape[0] != count) return bad();
  } else if (param_shape.size() >= 2) {
    const int64_t r = static_cast<int64_t>(param_shape.size());
    const int64_t row = param_shape[r - 2], col = param_shape[r - 1];
    if (per_row ? (row != count || col != 1) : (row != 1 || col != count)) return bad();
    p_batch.assign(param_shape.begin(), param_shape.end() - 2);
    if (p_batch.size() > batch.size()) return bad();
    for (size_t i = 0; i < p_batch.size(); ++i) {
      const int64_t d = p_batch[p_batch.size() - 1 - i], b = batch[batch.size() - 1 - i];
      if (d != 1 && d != b) return bad();
    }
  } else {
    return bad();
  }
  // Expand to batch x count (row-major over the operand's batch dims).
  const int64_t batches = NumElements(batch);
  p.values.resize(static_cast<size_t>(batches * count));
  const int64_t rank = static_cast<int64_t>(batch.size());
  const int64_t p_rank = static_cast<int64_t>(p_batch.size());
  std::vector<int64_t> p_strides(rank, 0);  // in units of `count`
  for (int64_t d = p_rank - 1, s = 1; d >= 0; --d) {
    p_strides[rank - p_rank + d] = p_batch[d] == 1 ? 0 : s;
    s *= p_batch[d];
  }
  for (int64_t b = 0; b < batches; ++b) {
    int64_t off = 0;
    for (int64_t d = rank - 1, rest = b; d >= 0; --d) {
      off += (rest % batch[d]) * p_strides[d];
      rest /= batch[d];
    }
    for (int64_t i = 0; i < count; ++i) p.values[b * count + i] = values[off * count + i];
  }
  return p;
}

template Expected<MatrixParam<int32_t>> ExpandMatrixParam<int32_t>(std::vector<int32_t>, const Shape&, const Shape&,
                                                                   int64_t, bool, int, const char*);
template Expected<MatrixParam<float>> ExpandMatrixParam<float>(std::vector<float>, const Shape&, const Shape&, int64_t,
                                                               bool, int, const char*);

Expected<AxisLayout> ResolveAxis(const Shape& x, const Shape& scale_shape, int64_t axis, int64_t opset,
                                 int scale_index) {
  AxisLayout l;
  const int64_t n = NumElements(scale_shape);
  if (n == 1 && scale_shape.size() <= 1) {
    l.inner = NumElements(x);
    return l;
  }
  if (opset < 13)
    return InputError(scale_index, "scale has shape " + ShapeToString(scale_shape) +
                                       ", expected a scalar (per-axis quantization needs opset 13)");
  SEQTO_ASSIGN_OR_RETURN(int64_t a,
                         NormalizeAxis(axis, static_cast<int64_t>(x.size())).WithContext("attribute 'axis'"));
  if (scale_shape.size() != 1 || scale_shape[0] != x[a])
    return InputError(scale_index, "scale has shape " + ShapeToString(scale_shape) + ", expected a scalar or " +
                                       std::to_string(x[a]) + " values (x's dim " + std::to_string(a) + ")");
  l.per_axis = true;
  l.axis_dim = x[a];
  for (int64_t d = 0; d < a; ++d) l.outer *= x[d];
  for (int64_t d = a + 1; d < static_cast<int64_t>(x.size()); ++d) l.inner *= x[d];
  return l;
}

bool ExactInt8Isa() {
  static const bool exact = [] {
    auto bits = [](dnnl::cpu_isa i) { return static_cast<unsigned>(i); };
    const unsigned isa = bits(dnnl::get_effective_cpu_isa());
    // The bits avx512_core_vnni adds to avx512_core and avx2_vnni to avx2 (AMX and
    // bf16 include the former).
    const unsigned kAvx512Vnni = bits(dnnl::cpu_isa::avx512_core_vnni) & ~bits(dnnl::cpu_isa::avx512_core);
    const unsigned kAvx2Vnni = bits(dnnl::cpu_isa::avx2_vnni) & ~bits(dnnl::cpu_isa::avx2);
    return (isa & kAvx512Vnni) != 0 || (isa & kAvx2Vnni) != 0;
  }();
  return exact;
}

namespace {
std::atomic<int64_t> fast_runs{0};
}  // namespace

void CountFastRun() { fast_runs.fetch_add(1, std::memory_order_relaxed); }
int64_t FastRuns() { return fast_runs.load(std::memory_order_relaxed); }

Expected<float> ScalarScale(const KernelContext& ctx, int index, const char* name) {
  if (!ctx.has_input(index)) return InputError(index, std::string(name) + " is missing");
  const Tensor& t = ctx.input(index);
  SEQTO_ASSIGN_OR_RETURN(std::vector<float> v, ReadScales(t, index, name));
  if (v.size() != 1)
    return InputError(index, std::string(name) + " has shape " + ShapeToString(t.shape()) + ", expected a scalar");
  return v[0];
}

Expected<int32_t> ScalarZp(const KernelContext& ctx, int index, DType type, const char* name) {
  if (!ctx.has_input(index)) return 0;
  const Tensor& t = ctx.input(index);
  SEQTO_ASSIGN_OR_RETURN(std::vector<int32_t> v, ReadZeroPoints(t, type, index, name));
  if (v.size() != 1)
    return InputError(index, std::string(name) + " has shape " + ShapeToString(t.shape()) + ", expected a scalar");
  return v[0];
}

}  // namespace seqto::ops::quant
