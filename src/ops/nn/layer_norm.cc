// LayerNormalization (opset 17): each row of prod(shape[axis:]) elements is
// normalized, y = (x - mean) / sqrt(var + epsilon) * Scale + B, with Scale and the
// optional B broadcast (numpy rules, towards the row shape). Optional outputs Mean
// and InvStdDev have shape shape[:axis] + [1, ...] and the type stash_type names
// (float32 by default). Statistics are computed in double (two passes).
//
// Registered from opset 1 as ONNX Runtime does (exporters used it before 17).
#include <cmath>
#include <vector>

#include "ops/nn/moments.h"
#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

struct LayerNormAttrs {
  int64_t axis = -1;
  float epsilon = 1e-5f;
  DType stash = DType::kFloat32;
};

bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Expands a parameter broadcastable to `row` (numpy rules, the parameter may not
// grow the shape) into one value per element of a row.
Expected<std::vector<double>> ExpandToRow(const Tensor& t, const Shape& row, int index, const char* name) {
  const int64_t r = static_cast<int64_t>(row.size());
  // Leading 1s beyond the row's rank are harmless: drop them.
  Shape ts = t.shape();
  while (static_cast<int64_t>(ts.size()) > r && ts.front() == 1) ts.erase(ts.begin());
  const int64_t tr = static_cast<int64_t>(ts.size());
  bool ok = tr <= r;
  for (int64_t d = 0; ok && d < tr; ++d) {
    const int64_t td = ts[d], rd = row[r - tr + d];
    ok = td == rd || td == 1;
  }
  if (!ok)
    return InputError(index, std::string("(") + name + ") has shape " + ShapeToString(t.shape()) +
                                 ", which does not broadcast to the normalized shape " + ShapeToString(row));
  const std::vector<double> v = t.ToDoubles();
  const int64_t d_total = NumElements(row);
  if (t.numel() == d_total) return v;
  std::vector<int64_t> strides(static_cast<size_t>(r), 0);  // strides of t over row's dims, 0 where broadcast
  int64_t s = 1;
  for (int64_t d = tr - 1; d >= 0; --d) {
    if (ts[d] != 1) strides[r - tr + d] = s;
    s *= ts[d];
  }
  std::vector<double> out(static_cast<size_t>(d_total));
  for (int64_t i = 0; i < d_total; ++i) {
    int64_t rem = i, off = 0;
    for (int64_t d = r - 1; d >= 0; --d) {
      off += (rem % row[d]) * strides[d];
      rem /= row[d];
    }
    out[i] = v[off];
  }
  return out;
}

// One row: statistics in double (two passes), then the normalized row. Also
// compiled for AVX2 and AVX-512 (SEQTO_WIDE_CLONES): four times the double lanes.
template <typename T>
SEQTO_WIDE_CLONES void LayerNormRow(const T* p, T* q, int64_t d, const T* sp, const T* bp, double eps, double& mean_out,
                                    double& inv_out) {
  double mean = 0, variance = 0;
  RowMoments(p, d, mean, variance);
  const double inv = 1.0 / std::sqrt(variance + eps);
  mean_out = mean;
  inv_out = inv;
  const T mt = static_cast<T>(mean), it = static_cast<T>(inv);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) q[i] = (p[i] - mt) * it * sp[i] + bp[i];
}

template <typename T>
void LayerNormKernel(const T* x, int64_t rows, int64_t d, const std::vector<double>& scale,
                     const std::vector<double>* bias, double eps, T* y, double* mean_out, double* inv_out) {
  std::vector<T> sc(scale.begin(), scale.end()), bi(static_cast<size_t>(d), T(0));
  if (bias) bi.assign(bias->begin(), bias->end());
  ParallelFor(rows, d * 3, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      LayerNormRow(x + r * d, y + r * d, d, sc.data(), bi.data(), eps, mean_out[r], inv_out[r]);
  });
}

void StoreDoubles(const std::vector<double>& v, Tensor& t) {
  const size_t n = v.size();
  switch (t.dtype()) {
    case DType::kFloat32:
      for (size_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(v[i]);
      break;
    case DType::kFloat64:
      for (size_t i = 0; i < n; ++i) t.data<double>()[i] = v[i];
      break;
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i) t.data<uint16_t>()[i] = FloatToHalf(static_cast<float>(v[i]));
      break;
    default:
      for (size_t i = 0; i < n; ++i) t.data<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v[i]));
      break;
  }
}

Status RunLayerNorm(const LayerNormAttrs& at, KernelContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return UserError("inputs 0 (X) and 1 (Scale) are required");
  const Tensor& x = ctx.input(0);
  if (!IsFloatType(x.dtype())) return DTypeError(0, x.dtype(), "float32, float64, float16, bfloat16");
  const int64_t rank = x.rank();
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis, reduce::CheckAxis(at.axis, rank, "attribute 'axis'"));
  const Shape row_shape(x.shape().begin() + axis, x.shape().end());
  const int64_t d = NumElements(row_shape);
  const int64_t rows = NumElements(Shape(x.shape().begin(), x.shape().begin() + axis));
  for (int i = 1; i < 3; ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != x.dtype())
      return InputError(i, std::string(i == 1 ? "(Scale)" : "(B)") + " has type " + DTypeName(ctx.input(i).dtype()) +
                               ", expected " + DTypeName(x.dtype()) + " like X");
  SEQTO_ASSIGN_OR_RETURN(const std::vector<double> scale, ExpandToRow(ctx.input(1), row_shape, 1, "Scale"));
  std::vector<double> bias;
  if (ctx.has_input(2)) {
    SEQTO_ASSIGN_OR_RETURN(bias, ExpandToRow(ctx.input(2), row_shape, 2, "B"));
  }
  Shape stat_shape = x.shape();
  for (int64_t i = axis; i < rank; ++i) stat_shape[i] = 1;
  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
  std::vector<double> mean(static_cast<size_t>(rows)), inv(static_cast<size_t>(rows));
  if (x.numel() > 0) {
    const std::vector<double>* b = ctx.has_input(2) ? &bias : nullptr;
    switch (x.dtype()) {
      case DType::kFloat32:
        LayerNormKernel(x.data<float>(), rows, d, scale, b, at.epsilon, y.data<float>(), mean.data(), inv.data());
        break;
      case DType::kFloat64:
        LayerNormKernel(x.data<double>(), rows, d, scale, b, at.epsilon, y.data<double>(), mean.data(), inv.data());
        break;
      default: {
        const Tensor xf = reduce::HalfToFloat32(x);
        Tensor yf(DType::kFloat32, x.shape());
        LayerNormKernel(xf.data<float>(), rows, d, scale, b, at.epsilon, yf.data<float>(), mean.data(), inv.data());
        reduce::Float32ToHalf(yf, y);
      }
    }
  } else if (d == 0) {  // empty rows: NaN statistics, as 0/0
    mean.assign(mean.size(), std::nan(""));
    inv.assign(inv.size(), std::nan(""));
  }
  if (ctx.wants_output(1)) StoreDoubles(mean, ctx.Allocate(1, at.stash, stat_shape));
  if (ctx.wants_output(2)) StoreDoubles(inv, ctx.Allocate(2, at.stash, stat_shape));
  return Status::Ok();
}

}  // namespace

void RegisterLayerNormalization(OpRegistry& r) {
  r.Register({"LayerNormalization", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                LayerNormAttrs at;
                SEQTO_ASSIGN_OR_RETURN(at.axis, init.node.attr_int("axis", -1));
                SEQTO_ASSIGN_OR_RETURN(at.epsilon, init.node.attr_float("epsilon", 1e-5f));
                SEQTO_ASSIGN_OR_RETURN(const int64_t stash, init.node.attr_int("stash_type", 1));
                at.stash = static_cast<DType>(stash);
                if (!IsFloatType(at.stash))
                  return UserError("attribute 'stash_type' is " + std::to_string(stash) +
                                   ", expected a float type (1 = float32)");
                if (!(at.epsilon >= 0))
                  return UserError("attribute 'epsilon' is " + std::to_string(at.epsilon) + ", expected >= 0");
                const size_t n_in = init.node.num_present_inputs();
                if (n_in < 2 || n_in > 3 || init.node.inputs[0].empty() || init.node.inputs[1].empty())
                  return UserError("expects inputs X, Scale and optionally B");
                return MakeKernel([at](KernelContext& ctx) { return RunLayerNorm(at, ctx); });
              }});
}

}  // namespace seqto::ops
