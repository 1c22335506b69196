// Scale/zero-point math and tensor (de)quantization with ONNX Runtime's semantics
// (onnxruntime/python/tools/quantization/quant_utils.py: get_qmin_qmax_for_qType,
// compute_scale_zp, quantize_nparray; base_quantizer.py: quantize_bias_static_impl).
// Where ORT's arithmetic happens in float32 (the range difference, x / scale, the bias
// scale product) seqto does the same, so scales and quantized values are bit-identical
// to ORT's and to what QuantizeLinear computes at run time.
#include "quant/scheme.h"

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <limits>
#include <sstream>

namespace seqto::quant {
namespace {

std::string Num(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The full range of a type: where quantized values are clamped (ORT clamps with the
// default range even when the scale was computed with a symmetric or reduced one).
QRange FullRange(QuantType t) { return GetQRange(t, /*symmetric=*/false, /*reduce_range=*/false); }

// Channel layout of a tensor for a per-channel axis: element i belongs to channel
// (i / inner) % channels.
struct ChannelLayout {
  int64_t channels = 1, inner = 1;
};

Expected<ChannelLayout> Layout(const Shape& shape, int64_t axis, size_t num_params) {
  SEQTO_ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(axis, static_cast<int64_t>(shape.size())));
  ChannelLayout l;
  l.channels = shape[a];
  for (size_t d = a + 1; d < shape.size(); ++d) l.inner *= shape[d];
  if (static_cast<size_t>(l.channels) != num_params)
    return UserError("axis " + std::to_string(axis) + " has " + std::to_string(l.channels) + " channels but " +
                     std::to_string(num_params) + " scales were given");
  return l;
}

Status CheckParams(const QuantParams& p) {
  if (p.scale.empty() || p.scale.size() != p.zero_point.size())
    return UserError("quantization parameters have " + std::to_string(p.scale.size()) + " scales and " +
                     std::to_string(p.zero_point.size()) + " zero points");
  if (!p.per_channel() && p.scale.size() != 1)
    return UserError("per-tensor quantization needs one scale, got " + std::to_string(p.scale.size()));
  const QRange r = FullRange(p.type);
  for (size_t i = 0; i < p.scale.size(); ++i) {
    if (!std::isfinite(p.scale[i]) || p.scale[i] <= 0)
      return UserError("scale " + Num(p.scale[i]) + " is not a positive finite number");
    if (p.zero_point[i] < r.qmin || p.zero_point[i] > r.qmax)
      return UserError("zero point " + std::to_string(p.zero_point[i]) + " is outside the range of " +
                       QuantTypeName(p.type));
  }
  return Status::Ok();
}

// ESP-DL: scale = 2^e with the smallest e such that [-a, a] fits in [qmin, qmax],
// i.e. a <= qmax * 2^e (|qmin| >= qmax for every symmetric range). The test uses
// ldexp, which is exact, so the boundary case a == qmax * 2^e picks that e.
ScaleZeroPoint PowerOfTwo(double a, const QRange& r) {
  ScaleZeroPoint out;
  if (a == 0) return out;  // scale 1, zp 0, as for any empty range
  int e = std::ilogb(a / static_cast<double>(r.qmax));
  while (std::ldexp(static_cast<double>(r.qmax), e) < a) ++e;
  while (std::ldexp(static_cast<double>(r.qmax), e - 1) >= a) --e;
  const double scale = std::ldexp(1.0, e);
  if (scale < FLT_MIN) return out;  // as ORT's "scale < tiny" rule: scale 1, zp 0
  out.scale = static_cast<float>(scale);
  out.zero_point = static_cast<int64_t>(std::nearbyint((r.qmin + r.qmax) / 2.0));
  return out;
}

}  // namespace

std::string QuantTypeName(QuantType t) {
  switch (t) {
    case QuantType::kUInt8:
      return "uint8";
    case QuantType::kInt8:
      return "int8";
    case QuantType::kUInt16:
      return "uint16";
    case QuantType::kInt16:
      return "int16";
    case QuantType::kUInt4:
      return "uint4";
    case QuantType::kInt4:
      return "int4";
    case QuantType::kInt32:
      return "int32";
  }
  return "unknown";
}

Expected<QuantType> ParseQuantType(const std::string& name) {
  std::string n = Lower(name);
  if (n.size() > 1 && n[0] == 'q') n = n.substr(1);  // ORT's QUInt8, QInt8, ...
  for (QuantType t : {QuantType::kUInt8, QuantType::kInt8, QuantType::kUInt16, QuantType::kInt16, QuantType::kUInt4,
                      QuantType::kInt4})
    if (n == QuantTypeName(t)) return t;
  return UserError("unknown quantization type '" + name + "' (expected uint8, int8, uint16, int16, uint4 or int4)");
}

DType StorageDType(QuantType t) {
  switch (t) {
    case QuantType::kUInt8:
    case QuantType::kUInt4:
      return DType::kUInt8;
    case QuantType::kInt8:
    case QuantType::kInt4:
      return DType::kInt8;
    case QuantType::kUInt16:
      return DType::kUInt16;
    case QuantType::kInt16:
      return DType::kInt16;
    case QuantType::kInt32:
      return DType::kInt32;
  }
  return DType::kUndefined;
}

bool IsSigned(QuantType t) {
  return t == QuantType::kInt8 || t == QuantType::kInt16 || t == QuantType::kInt4 || t == QuantType::kInt32;
}

QRange GetQRange(QuantType t, bool symmetric, bool reduce_range) {
  // ORT's tables ONNX_INT_TYPE_RANGE / _SYMMETRIC_RANGE / _REDUCED_RANGE; reduce_range
  // is looked up first, so it wins over symmetric. 4-bit types have no symmetric row.
  switch (t) {
    case QuantType::kUInt8:
      if (reduce_range) return {0, 127};
      return symmetric ? QRange{0, 254} : QRange{0, 255};
    case QuantType::kInt8:
      if (reduce_range) return {-64, 64};
      return symmetric ? QRange{-127, 127} : QRange{-128, 127};
    case QuantType::kUInt16:
      if (reduce_range) return {0, 32767};
      return symmetric ? QRange{0, 65534} : QRange{0, 65535};
    case QuantType::kInt16:
      if (reduce_range) return {-16384, 16384};
      return symmetric ? QRange{-32767, 32767} : QRange{-32768, 32767};
    case QuantType::kUInt4:
      return reduce_range ? QRange{0, 7} : QRange{0, 15};
    case QuantType::kInt4:
      return reduce_range ? QRange{-4, 3} : QRange{-8, 7};
    case QuantType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
  return {};
}

Expected<ScaleZeroPoint> ComputeScaleZeroPoint(double rmin, double rmax, const RangeOptions& options,
                                               const std::string& what) {
  if (!std::isfinite(rmin) || !std::isfinite(rmax))
    return UserError(what + ": range [" + Num(rmin) + ", " + Num(rmax) + "] is not finite");
  if (rmin > rmax) return UserError(what + ": range [" + Num(rmin) + ", " + Num(rmax) + "] has min > max");
  if (options.power_of_two && options.type != QuantType::kInt8 && options.type != QuantType::kInt16)
    return UserError(what + ": power-of-two scales need int8 or int16, not " + QuantTypeName(options.type));
  // ORT holds the range in the tensor's dtype (float32): round it there first.
  float fmin = static_cast<float>(rmin), fmax = static_cast<float>(rmax);
  if (!std::isfinite(fmin) || !std::isfinite(fmax))
    return UserError(what + ": range [" + Num(rmin) + ", " + Num(rmax) + "] exceeds float32");
  // Zero must be exactly representable, so the range always includes it.
  fmin = std::min(fmin, 0.0f);
  fmax = std::max(fmax, 0.0f);
  const bool symmetric = options.symmetric || options.power_of_two;
  if (symmetric) {
    const float a = std::max(std::fabs(fmin), std::fabs(fmax));
    fmin = -a;
    fmax = a;
  }
  const QRange r = GetQRange(options.type, symmetric, options.reduce_range);
  if (options.power_of_two) return PowerOfTwo(static_cast<double>(fmax), r);

  // ORT: dr = float64(rmax - rmin) with the subtraction in float32, then a float64
  // division by (qmax - qmin).
  const float dr = fmax - fmin;
  if (!std::isfinite(dr))
    return UserError(what + ": range [" + Num(rmin) + ", " + Num(rmax) + "] is too wide for float32");
  const double scale = static_cast<double>(dr) / (static_cast<double>(r.qmax) - static_cast<double>(r.qmin));
  ScaleZeroPoint out;
  if (scale < FLT_MIN) return out;  // empty or denormal range: scale 1, zero point 0
  double zp = symmetric ? std::nearbyint((static_cast<double>(r.qmin) + r.qmax) / 2.0)
                        : std::nearbyint(static_cast<double>(r.qmin) - static_cast<double>(fmin) / scale);
  // Mathematically qmin <= zp <= qmax because 0 is in the range; clamp against
  // rounding at the ends.
  zp = std::clamp(zp, static_cast<double>(r.qmin), static_cast<double>(r.qmax));
  out.scale = static_cast<float>(scale);
  out.zero_point = static_cast<int64_t>(zp);
  return out;
}

Expected<QuantParams> ComputeWeightParams(const Tensor& weight, const RangeOptions& options,
                                          std::optional<int64_t> axis, const std::string& name) {
  const std::string what = "tensor '" + name + "'";
  if (weight.dtype() != DType::kFloat32)
    return UserError(what + ": cannot quantize " + weight.Describe() + " (expected float32)");
  ChannelLayout l;
  if (axis) {
    if (weight.rank() == 0) return UserError(what + ": per-channel quantization needs rank >= 1, got a scalar");
    auto a = NormalizeAxis(*axis, weight.rank());
    if (!a.ok()) return std::move(a).WithContext(what).error();
    l.channels = weight.dim(*a);
    for (int64_t d = *a + 1; d < weight.rank(); ++d) l.inner *= weight.dim(d);
  }
  // Per-channel min/max in one pass. An empty channel keeps [0, 0] (scale 1, zp 0),
  // as ORT does for empty data.
  std::vector<float> mins(l.channels, std::numeric_limits<float>::infinity());
  std::vector<float> maxs(l.channels, -std::numeric_limits<float>::infinity());
  const float* x = weight.data<float>();
  const int64_t n = weight.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v))
      return UserError(what + ": element " + std::to_string(i) + " is " + (std::isnan(v) ? "NaN" : "infinite") +
                       "; cannot quantize");
    const int64_t c = axis ? (i / l.inner) % l.channels : 0;
    mins[c] = std::min(mins[c], v);
    maxs[c] = std::max(maxs[c], v);
  }
  QuantParams p;
  p.type = options.type;
  if (axis) p.axis = *axis;
  for (int64_t c = 0; c < l.channels; ++c) {
    const bool empty = mins[c] > maxs[c];
    auto sz = ComputeScaleZeroPoint(empty ? 0.0 : mins[c], empty ? 0.0 : maxs[c], options,
                                    axis ? what + " channel " + std::to_string(c) : what);
    if (!sz.ok()) return sz.error();
    p.scale.push_back(sz->scale);
    p.zero_point.push_back(sz->zero_point);
  }
  return p;
}

Expected<Tensor> QuantizeTensor(const Tensor& x, const QuantParams& params) {
  if (x.dtype() != DType::kFloat32) return UserError("cannot quantize " + x.Describe() + " (expected float32)");
  SEQTO_RETURN_IF_ERROR(CheckParams(params));
  ChannelLayout l;
  if (params.per_channel()) {
    SEQTO_ASSIGN_OR_RETURN(l, Layout(x.shape(), *params.axis, params.scale.size()));
  }
  const QRange r = FullRange(params.type);
  Tensor q(StorageDType(params.type), x.shape());
  const float* in = x.data<float>();
  const int64_t n = x.numel();
  Status status;
  VisitNumeric(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = q.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(in[i])) {
        status = UserError("element " + std::to_string(i) + " is " + (std::isnan(in[i]) ? "NaN" : "infinite") +
                           "; cannot quantize");
        return;
      }
      const size_t c = params.per_channel() ? static_cast<size_t>((i / l.inner) % l.channels) : 0;
      // Division and rounding in float32, as QuantizeLinear and ORT's quantize_nparray.
      const float rounded = std::nearbyint(in[i] / params.scale[c]);
      const double v = static_cast<double>(rounded) + static_cast<double>(params.zero_point[c]);
      out[i] = static_cast<T>(std::clamp(v, static_cast<double>(r.qmin), static_cast<double>(r.qmax)));
    }
  });
  if (!status.ok()) return status.error();
  return q;
}

Expected<Tensor> DequantizeTensor(const Tensor& q, const QuantParams& params) {
  if (q.dtype() != StorageDType(params.type))
    return UserError("cannot dequantize " + q.Describe() + " as " + QuantTypeName(params.type) + " (expected " +
                     DTypeName(StorageDType(params.type)) + ")");
  SEQTO_RETURN_IF_ERROR(CheckParams(params));
  ChannelLayout l;
  if (params.per_channel()) {
    SEQTO_ASSIGN_OR_RETURN(l, Layout(q.shape(), *params.axis, params.scale.size()));
  }
  Tensor x(DType::kFloat32, q.shape());
  float* out = x.data<float>();
  const int64_t n = q.numel();
  VisitNumeric(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = q.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const size_t c = params.per_channel() ? static_cast<size_t>((i / l.inner) % l.channels) : 0;
      // (q - zp) in integers, then one float32 multiply, as DequantizeLinear.
      out[i] = static_cast<float>(static_cast<int64_t>(in[i]) - params.zero_point[c]) * params.scale[c];
    }
  });
  return x;
}

Expected<Tensor> QuantizeBias(const Tensor& bias, float input_scale, const QuantParams& weight_params,
                              QuantParams* bias_params) {
  if (bias.dtype() != DType::kFloat32)
    return UserError("cannot quantize bias " + bias.Describe() + " (expected float32)");
  if (!std::isfinite(input_scale) || input_scale <= 0)
    return UserError("input scale " + Num(input_scale) + " is not a positive finite number");
  if (weight_params.scale.empty()) return UserError("weight quantization parameters have no scale");
  const size_t channels = weight_params.scale.size();
  const bool per_channel = weight_params.per_channel();
  if (per_channel && static_cast<size_t>(bias.numel()) != channels)
    return UserError("bias " + bias.Describe() + " has " + std::to_string(bias.numel()) +
                     " elements but the weight has " + std::to_string(channels) + " channels");
  // ORT: bias_scale = input_scale * weight_scale, a float32 product; the division is
  // then done in float64 and rounded half to even.
  std::vector<float> scales(channels);
  for (size_t c = 0; c < channels; ++c) {
    scales[c] = input_scale * weight_params.scale[c];
    if (!(scales[c] > 0) || !std::isfinite(scales[c]))
      return UserError("bias scale " + Num(input_scale) + " * " + Num(weight_params.scale[c]) +
                       " is not representable in float32");
  }
  Tensor q(DType::kInt32, bias.shape());
  const float* in = bias.data<float>();
  int32_t* out = q.data<int32_t>();
  constexpr double kLo = std::numeric_limits<int32_t>::min(), kHi = std::numeric_limits<int32_t>::max();
  for (int64_t i = 0; i < bias.numel(); ++i) {
    if (!std::isfinite(in[i]))
      return UserError("bias element " + std::to_string(i) + " is " + (std::isnan(in[i]) ? "NaN" : "infinite") +
                       "; cannot quantize");
    const float s = scales[per_channel ? static_cast<size_t>(i) : 0];
    const double v = std::nearbyint(static_cast<double>(in[i]) / static_cast<double>(s));
    out[i] = static_cast<int32_t>(std::clamp(v, kLo, kHi));
  }
  if (bias_params) {
    bias_params->type = QuantType::kInt32;
    bias_params->scale = scales;
    bias_params->zero_point.assign(channels, 0);
    bias_params->axis = per_channel ? std::optional<int64_t>(0) : std::nullopt;
  }
  return q;
}

Expected<std::vector<int>> BiasScaleExponents(const Tensor& bias, float input_scale, const QuantParams& weight_params,
                                              int32_t limit) {
  if (bias.dtype() != DType::kFloat32)
    return UserError("cannot quantize bias " + bias.Describe() + " (expected float32)");
  if (!std::isfinite(input_scale) || input_scale <= 0)
    return UserError("input scale " + Num(input_scale) + " is not a positive finite number");
  if (limit <= 0) return UserError("bias limit " + std::to_string(limit) + " is not positive");
  const size_t channels = weight_params.scale.size();
  const bool per_channel = weight_params.per_channel();
  if (channels == 0) return UserError("weight quantization parameters have no scale");
  if (per_channel && static_cast<size_t>(bias.numel()) != channels)
    return UserError("bias " + bias.Describe() + " has " + std::to_string(bias.numel()) +
                     " elements but the weight has " + std::to_string(channels) + " channels");
  // The largest |bias| per scale decides: QuantizeBias's rounding is monotonic in it.
  std::vector<float> amax(channels, 0.0f);
  const float* in = bias.data<float>();
  for (int64_t i = 0; i < bias.numel(); ++i) {
    if (!std::isfinite(in[i]))
      return UserError("bias element " + std::to_string(i) + " is " + (std::isnan(in[i]) ? "NaN" : "infinite") +
                       "; cannot quantize");
    float& a = amax[per_channel ? static_cast<size_t>(i) : 0];
    a = std::max(a, std::fabs(in[i]));
  }
  // QuantizeBias's arithmetic: a float32 scale product, a float64 division.
  auto fits = [&](float a, float weight_scale) {
    const float s = input_scale * weight_scale;
    return s > 0 && std::isfinite(s) && std::nearbyint(static_cast<double>(a) / s) <= limit;
  };
  std::vector<int> exponents(channels, 0);
  for (size_t c = 0; c < channels; ++c) {
    const float a = amax[c], s = weight_params.scale[c];
    if (!std::isfinite(s) || s <= 0) return UserError("weight scale " + Num(s) + " is not a positive finite number");
    if (fits(a, s)) continue;
    // The scale a / limit just holds it; the power of two that reaches it is at most
    // one step off (rounding), which the checks below settle. Float64 holds the
    // product of two float32 scales exactly, however small.
    const double needed = std::max(static_cast<double>(a) / limit, static_cast<double>(FLT_TRUE_MIN));
    int k = std::max(1, static_cast<int>(std::ceil(std::log2(needed / (static_cast<double>(input_scale) * s)))));
    // Multiplying by 2^k is exact in float32 (the same as doubling k times) until
    // it overflows, which ends the search: no finite scale holds this bias.
    for (; !fits(a, std::ldexp(s, k)); ++k)
      if (!std::isfinite(input_scale * std::ldexp(s, k)))
        return UserError(std::string(per_channel ? "bias channel " + std::to_string(c) : "bias") + ": magnitude " +
                         Num(a) + " does not fit int32 at any float32 weight scale (input scale " + Num(input_scale) +
                         ")");
    while (k > 1 && fits(a, std::ldexp(s, k - 1))) --k;
    exponents[c] = k;
  }
  return exponents;
}

}  // namespace seqto::quant
