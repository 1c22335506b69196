// BatchNormalization, inference: y = (x - mean) / sqrt(var + epsilon) * scale + B
// per channel (dim 1) of an N x C x D1 ... input.
//
// Opsets 1-15. Legacy attributes: is_test and consumed_inputs (ignored: seqto runs
// inference), spatial = 0 before opset 9 (parameters of shape C x D1 x ... , one
// value per element of a sample). From opset 14, training_mode = 1 normalizes with
// the batch's own statistics and produces running_mean/running_var; the training
// outputs of opsets before 14 (mean, var, saved_mean, saved_var) are not supported.
// From opset 15 the parameters may have another float type than X.
//
// The fast kernel computes y = (x - mean[c]) * a[c] + B[c] over contiguous spatial
// blocks; the reference kernel evaluates the formula in double.
#include <cmath>
#include <vector>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

struct BatchNormAttrs {
  float epsilon = 1e-5f;
  float momentum = 0.9f;
  bool spatial = true;
  bool training = false;
  bool reference_only = false;
  int64_t opset = 15;
};

bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Writes doubles into a float32/float64/float16/bfloat16 tensor.
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

// Per-channel (or per-element for spatial = 0) parameters as doubles.
struct Params {
  std::vector<double> scale, bias, mean, var;
};

// Reference: the formula, in double, element by element.
template <typename T>
void BatchNormReference(const T* x, int64_t n, int64_t c, int64_t hw, bool per_element, const Params& p, double eps,
                        T* y) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < hw; ++s) {
        const int64_t k = per_element ? ch * hw + s : ch;
        const int64_t idx = (i * c + ch) * hw + s;
        y[idx] = static_cast<T>((static_cast<double>(x[idx]) - p.mean[k]) / std::sqrt(p.var[k] + eps) * p.scale[k] +
                                p.bias[k]);
      }
}

// Fast: y = (x - mean) * a + B with a = scale / sqrt(var + epsilon) per channel (or
// per element of a sample). Subtracting the mean first keeps y accurate when the
// mean is large next to y (folding it into one bias, x * a + b, would cancel).
template <typename T>
void BatchNormFast(const T* x, int64_t n, int64_t c, int64_t hw, bool per_element, const Params& p, double eps, T* y) {
  const size_t k = p.scale.size();
  std::vector<T> m(k), a(k), b(k);
  for (size_t i = 0; i < k; ++i) {
    m[i] = static_cast<T>(p.mean[i]);
    a[i] = static_cast<T>(p.scale[i] / std::sqrt(p.var[i] + eps));
    b[i] = static_cast<T>(p.bias[i]);
  }
  if (per_element) {
    const int64_t sample = c * hw;
    ParallelFor(n, sample, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T* xi = x + i * sample;
        T* yi = y + i * sample;
#pragma omp simd
        for (int64_t s = 0; s < sample; ++s) yi[s] = (xi[s] - m[s]) * a[s] + b[s];
      }
    });
    return;
  }
  ParallelFor(n * c, hw, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk) {
      const int64_t ch = blk % c;
      const T mc = m[ch], ac = a[ch], bc = b[ch];
      const T* xi = x + blk * hw;
      T* yi = y + blk * hw;
#pragma omp simd
      for (int64_t s = 0; s < hw; ++s) yi[s] = (xi[s] - mc) * ac + bc;
    }
  });
}

// Per-channel mean and (population) variance of x, in double.
template <typename T>
void ChannelStats(const T* x, int64_t n, int64_t c, int64_t hw, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(static_cast<size_t>(c), 0.0);
  var.assign(static_cast<size_t>(c), 0.0);
  ParallelFor(c, n * hw * 2, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* p = x + (i * c + ch) * hw;
        for (int64_t j = 0; j < hw; ++j) s += static_cast<double>(p[j]);
      }
      const double count = static_cast<double>(n * hw);
      const double m = s / count;
      double q = 0;
      for (int64_t i = 0; i < n; ++i) {
        const T* p = x + (i * c + ch) * hw;
        for (int64_t j = 0; j < hw; ++j) {
          const double d = static_cast<double>(p[j]) - m;
          q += d * d;
        }
      }
      mean[ch] = m;
      var[ch] = q / count;
    }
  });
}

template <typename T>
void BatchNormTyped(const BatchNormAttrs& at, const T* x, int64_t n, int64_t c, int64_t hw, bool per_element,
                    const Params& p, T* y) {
  if (at.reference_only)
    BatchNormReference(x, n, c, hw, per_element, p, at.epsilon, y);
  else
    BatchNormFast(x, n, c, hw, per_element, p, at.epsilon, y);
}

Status RunBatchNorm(const BatchNormAttrs& at, KernelContext& ctx) {
  const char* names[] = {"X", "scale", "B", "mean", "var"};
  for (int i = 0; i < 5; ++i)
    if (!ctx.has_input(i)) return InputError(i, std::string("(") + names[i] + ") is required");
  const Tensor& x = ctx.input(0);
  if (!IsFloatType(x.dtype())) return DTypeError(0, x.dtype(), "float32, float64, float16, bfloat16");
  if (x.rank() < 2)
    return InputError(0, "(X) must have rank >= 2 (N x C x ...), got shape " + ShapeToString(x.shape()));
  const int64_t n = x.dim(0), c = x.dim(1);
  const int64_t hw = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  bool per_element = false;
  if (!at.spatial) {
    int64_t spatial = 1;
    for (int64_t d = 2; d < x.rank(); ++d) spatial *= x.dim(d);
    per_element = spatial != 1;
  }
  const int64_t k = per_element ? c * hw : c;
  Params p;
  std::vector<double>* dst[] = {&p.scale, &p.bias, &p.mean, &p.var};
  for (int i = 1; i < 5; ++i) {
    const Tensor& t = ctx.input(i);
    if (!IsFloatType(t.dtype())) return DTypeError(i, t.dtype(), "float32, float64, float16, bfloat16");
    if (at.opset < 15 && t.dtype() != x.dtype())
      return InputError(i, std::string("(") + names[i] + ") has type " + DTypeName(t.dtype()) + ", expected " +
                               DTypeName(x.dtype()) + " like X (different types need opset 15)");
    if (t.numel() != k)
      return InputError(i, std::string("(") + names[i] + ") has shape " + ShapeToString(t.shape()) + ", expected " +
                               std::to_string(k) + " values (" +
                               (per_element ? "C x D1 x ... for spatial = 0" : "one per channel") + ")");
    *dst[i - 1] = t.ToDoubles();
  }
  const Tensor& mean_in = ctx.input(3);
  const Tensor& var_in = ctx.input(4);
  std::vector<double> batch_mean, batch_var;
  Tensor xf;  // float32 copy of a 16-bit X
  const Tensor& xc = reduce::IsHalfType(x.dtype()) ? (xf = reduce::HalfToFloat32(x)) : x;
  if (at.training) {
    if (xc.dtype() == DType::kFloat64)
      ChannelStats(xc.data<double>(), n, c, hw, batch_mean, batch_var);
    else
      ChannelStats(xc.data<float>(), n, c, hw, batch_mean, batch_var);
    p.mean = batch_mean;
    p.var = batch_var;
  }

  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
  if (x.numel() > 0) {
    if (x.dtype() == DType::kFloat64) {
      BatchNormTyped(at, x.data<double>(), n, c, hw, per_element, p, y.data<double>());
    } else if (x.dtype() == DType::kFloat32) {
      BatchNormTyped(at, x.data<float>(), n, c, hw, per_element, p, y.data<float>());
    } else {
      Tensor yf(DType::kFloat32, x.shape());
      BatchNormTyped(at, xc.data<float>(), n, c, hw, per_element, p, yf.data<float>());
      reduce::Float32ToHalf(yf, y);
    }
  }
  if (at.training) {
    const double mom = at.momentum;
    const std::vector<double> in_mean = mean_in.ToDoubles(), in_var = var_in.ToDoubles();
    if (ctx.wants_output(1)) {
      std::vector<double> v(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) v[i] = in_mean[i] * mom + batch_mean[i] * (1 - mom);
      StoreDoubles(v, ctx.Allocate(1, mean_in.dtype(), mean_in.shape()));
    }
    if (ctx.wants_output(2)) {
      std::vector<double> v(static_cast<size_t>(c));
      for (int64_t i = 0; i < c; ++i) v[i] = in_var[i] * mom + batch_var[i] * (1 - mom);
      StoreDoubles(v, ctx.Allocate(2, var_in.dtype(), var_in.shape()));
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterBatchNormalization(OpRegistry& r) {
  r.Register({"BatchNormalization", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                const ir::Node& node = init.node;
                BatchNormAttrs at;
                at.opset = init.opset;
                at.reference_only = init.reference_only;
                SEQTO_ASSIGN_OR_RETURN(at.epsilon, node.attr_float("epsilon", 1e-5f));
                SEQTO_ASSIGN_OR_RETURN(at.momentum, node.attr_float("momentum", 0.9f));
                if (!(at.epsilon >= 0))
                  return UserError("attribute 'epsilon' is " + std::to_string(at.epsilon) + ", expected >= 0");
                if (init.opset < 9) {
                  SEQTO_ASSIGN_OR_RETURN(const int64_t spatial, node.attr_int("spatial", 1));
                  at.spatial = spatial != 0;
                }
                if (init.opset >= 14) {
                  SEQTO_ASSIGN_OR_RETURN(const int64_t training, node.attr_int("training_mode", 0));
                  at.training = training != 0;
                }
                if (node.num_present_inputs() != 5)
                  return UserError("expects 5 inputs (X, scale, B, mean, var), got " +
                                   std::to_string(node.num_present_inputs()));
                bool extra_outputs = false;
                for (size_t i = 1; i < node.outputs.size(); ++i) extra_outputs |= !node.outputs[i].empty();
                if (extra_outputs && init.opset < 14)
                  return UserError(
                      "training outputs (mean, var, saved_mean, saved_var) are not supported before "
                      "opset 14; only Y can be computed");
                if (extra_outputs && !at.training)
                  return UserError("outputs running_mean and running_var exist only with training_mode = 1");
                if (node.outputs.size() > 3) return UserError("has at most 3 outputs from opset 14");
                return MakeKernel([at](KernelContext& ctx) { return RunBatchNorm(at, ctx); });
              }});
}

}  // namespace seqto::ops
