// Resize (opsets 10, 11, 13, 18 without antialias) and Upsample (opsets 7-9): nearest,
// (multi)linear and cubic interpolation over any number of dimensions, following
// the ONNX reference implementation:
//  - x_original comes from the coordinate_transformation_mode, with the scale
//    (given, or output/input size when sizes are given) and output_width = scale *
//    input_width (not rounded) where the formula uses the output length;
//  - nearest rounds x_original by nearest_mode; linear and cubic take the 2 or 4
//    nearest input points of an edge-padded input (so points past the border repeat
//    the border), weighted by coefficients of the fractional part (cubic_coeff_a),
//    with exclude_outside dropping and renormalising points outside the input;
//  - tf_crop_and_resize maps through the roi and gives extrapolation_value outside.
// Opset 10 Resize and Upsample use asymmetric coordinates, and nearest rounds down
// when upsampling and up when downsampling (as ONNX Runtime did for them).
// Nearest moves elements, so it works for every type; linear and cubic interpolate
// separably, one dimension at a time, in double precision.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class Rounding { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class AspectPolicy { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kHalfPixel;
  Rounding rounding = Rounding::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  std::vector<int64_t> axes;  // opset 18; empty: all
  AspectPolicy aspect = AspectPolicy::kStretch;
  bool scales_from_attr = false;  // Upsample-7
  std::vector<float> attr_scales;
  int roi_input = -1, scales_input = -1, sizes_input = -1;
};

// How one output dimension samples its input dimension.
struct AxisPlan {
  int64_t in = 0, out = 0;
  double scale = 1;
  float roi_start = 0, roi_end = 1;
  // Nearest: the input index per output index (-1: extrapolation value).
  std::vector<int64_t> index;
  // Linear/cubic: `taps` input indices (already clamped) and weights per output
  // index; extrapolated[j] marks outputs that take the extrapolation value.
  int taps = 0;
  std::vector<int64_t> tap_index;
  std::vector<double> tap_weight;
  std::vector<char> extrapolated;
  bool identity = false;
};

double OriginalCoordinate(const ResizeAttrs& a, const AxisPlan& p, int64_t x, bool* outside) {
  const double in = static_cast<double>(p.in), scale = p.scale;
  const double out_width = scale * in;
  const double xd = static_cast<double>(x);
  *outside = false;
  switch (a.coord) {
    case Coord::kAlignCorners:
      return out_width == 1 ? 0.0 : xd * (in - 1) / (out_width - 1);
    case Coord::kAsymmetric:
      return xd / scale;
    case Coord::kTfCropAndResize: {
      const double extent = static_cast<double>(p.roi_end - p.roi_start);  // float subtraction, as numpy does
      double x_ori = out_width == 1 ? extent * (in - 1) / 2 : xd * extent * (in - 1) / (out_width - 1);
      x_ori += static_cast<double>(p.roi_start * static_cast<float>(p.in - 1));
      *outside = x_ori < 0 || x_ori > in - 1;
      return x_ori;
    }
    case Coord::kPytorchHalfPixel:
      return out_width == 1 ? -0.5 : (xd + 0.5) / scale - 0.5;
    case Coord::kHalfPixel:
      return (xd + 0.5) / scale - 0.5;
    case Coord::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(p.out) / out_width;
      const double center = in / 2;
      const double offset = center * (1 - adjustment);
      return offset + (xd + 0.5) / scale - 0.5;
    }
    case Coord::kTfHalfPixelForNn:
      return (xd + 0.5) / scale;
  }
  return xd;
}

void CubicCoeffs(double ratio, double A, double* c) {
  const double r1 = ratio + 1, r2 = 1 - ratio, r3 = (1 - ratio) + 1;
  c[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
  c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
  c[2] = ((A + 2) * r2 - (A + 3)) * r2 * r2 + 1;
  c[3] = ((A * r3 - 5 * A) * r3 + 8 * A) * r3 - 4 * A;
}

void PlanAxis(const ResizeAttrs& a, AxisPlan& p) {
  const int64_t in = p.in;
  if (a.mode == Mode::kNearest) {
    p.index.resize(p.out);
    for (int64_t x = 0; x < p.out; ++x) {
      bool outside = false;
      const double x_ori = OriginalCoordinate(a, p, x, &outside);
      if (outside) {
        p.index[x] = -1;
        continue;
      }
      const double fl = std::floor(x_ori);
      const double ratio = x_ori - fl;
      int64_t i;
      if (a.rounding == Rounding::kSimple) {
        i = p.scale < 1 ? static_cast<int64_t>(std::ceil(x_ori)) : static_cast<int64_t>(fl);
      } else if (ratio == 0) {
        i = static_cast<int64_t>(fl);
      } else {
        bool up = false;
        switch (a.rounding) {
          case Rounding::kRoundPreferFloor:
            up = ratio > 0.5;
            break;
          case Rounding::kRoundPreferCeil:
            up = ratio >= 0.5;
            break;
          case Rounding::kFloor:
            up = false;
            break;
          default:
            up = true;
            break;
        }
        i = static_cast<int64_t>(fl) + (up ? 1 : 0);
      }
      p.index[x] = std::clamp<int64_t>(i, 0, in - 1);
    }
    return;
  }
  const int n = a.mode == Mode::kLinear ? 2 : 4;
  const int64_t pad = n / 2;
  p.taps = n;
  p.tap_index.assign(p.out * n, 0);
  p.tap_weight.assign(p.out * n, 0.0);
  p.extrapolated.assign(p.out, 0);
  bool identity = p.in == p.out;
  for (int64_t x = 0; x < p.out; ++x) {
    bool outside = false;
    const double x_ori = OriginalCoordinate(a, p, x, &outside);
    if (outside) {
      p.extrapolated[x] = 1;
      identity = false;
      continue;
    }
    int64_t base = static_cast<int64_t>(std::floor(x_ori));
    double ratio = x_ori - std::floor(x_ori);
    if (ratio == 0) {  // prefer the point on the left: ratio in (0, 1]
      base -= 1;
      ratio = 1;
      if (base + 1 != x) identity = false;
    } else {
      identity = false;
    }
    double c[4];
    if (n == 2) {
      c[0] = 1 - ratio;
      c[1] = ratio;
    } else {
      CubicCoeffs(ratio, a.cubic_a, c);
    }
    // The n nearest points of the edge-padded input (padding n/2 on each side).
    const int64_t start = std::clamp<int64_t>(base - (n / 2 - 1), -pad, in + pad - n);
    double sum = 0;
    for (int t = 0; t < n; ++t) {
      const int64_t i = start + t;
      if (a.exclude_outside && (i < 0 || i >= in)) c[t] = 0;
      sum += c[t];
    }
    for (int t = 0; t < n; ++t) {
      p.tap_index[x * n + t] = std::clamp<int64_t>(start + t, 0, in - 1);
      p.tap_weight[x * n + t] = a.exclude_outside ? c[t] / sum : c[t];
    }
  }
  p.identity = identity;
}

// Nearest: out[o0, o1, ...] = in[index0[o0], index1[o1], ...] (elements as bytes).
// Trailing axes that map every index to itself are copied as blocks (a channels-last
// upsampling copies whole pixels), and an output row that reads the same input row
// as the row before it is a copy of that output row (an upsampling repeats rows).
template <typename U>
void NearestKernel(const U* src, U* dst, const std::vector<AxisPlan>& plans, U extrapolation) {
  const int64_t r = static_cast<int64_t>(plans.size());
  Shape in_shape(r), out_shape(r);
  for (int64_t d = 0; d < r; ++d) {
    in_shape[d] = plans[d].in;
    out_shape[d] = plans[d].out;
  }
  const std::vector<int64_t> in_strides = ContiguousStrides(in_shape);
  auto maps_to_itself = [](const AxisPlan& p) {
    if (p.in != p.out) return false;
    for (int64_t k = 0; k < p.out; ++k)
      if (p.index[k] != k) return false;
    return true;
  };
  int64_t t = r;  // axes t.. are copied as blocks of `block` elements
  int64_t block = 1;
  while (t > 1 && maps_to_itself(plans[t - 1])) block *= out_shape[--t];
  const int64_t a = t - 1;  // the innermost resized axis
  const int64_t inner = out_shape[a];
  const int64_t rows = NumElements(out_shape) / std::max<int64_t>(inner * block, 1);
  if (inner == 0 || block == 0) return;
  const std::vector<int64_t>& last = plans[a].index;
  const int64_t row_size = inner * block;
  ParallelFor(rows, row_size, [&](int64_t begin, int64_t end) {
    int64_t prev_off = -1;
    for (int64_t row = begin; row < end; ++row) {
      int64_t rem = row, off = 0;
      bool outside = false;
      for (int64_t d = a - 1; d >= 0; --d) {
        const int64_t i = plans[d].index[rem % out_shape[d]];
        rem /= out_shape[d];
        if (i < 0)
          outside = true;
        else
          off += i * in_strides[d];
      }
      U* o = dst + row * row_size;
      if (outside) {
        std::fill(o, o + row_size, extrapolation);
        prev_off = -1;
        continue;
      }
      if (off == prev_off) {  // the same input row as the row before
        std::copy_n(o - row_size, row_size, o);
        continue;
      }
      prev_off = off;
      const U* in = src + off;
      const int64_t stride = in_strides[a];
      if (block == 1) {
        for (int64_t k = 0; k < inner; ++k) o[k] = last[k] < 0 ? extrapolation : in[last[k] * stride];
        continue;
      }
      for (int64_t k = 0; k < inner; ++k, o += block) {
        if (last[k] < 0)
          std::fill(o, o + block, extrapolation);
        else
          std::copy_n(in + last[k] * stride, block, o);
      }
    }
  });
}

// One separable pass: resizes dimension d of `cur` (shape `shape`) into `next`.
void InterpolateAxis(const std::vector<double>& cur, std::vector<double>& next, Shape& shape, int64_t d,
                     const AxisPlan& p, double extrapolation) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[k];
  for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  next.assign(static_cast<size_t>(outer * p.out * inner), 0.0);
  const int n = p.taps;
  ParallelFor(outer * p.out, inner * n, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / p.out, j = item % p.out;
      double* dst = next.data() + item * inner;
      if (p.extrapolated[j]) {
        std::fill(dst, dst + inner, extrapolation);
        continue;
      }
      for (int t = 0; t < n; ++t) {
        const double w = p.tap_weight[j * n + t];
        if (w == 0) continue;
        const double* src = cur.data() + (o * p.in + p.tap_index[j * n + t]) * inner;
        for (int64_t k = 0; k < inner; ++k) dst[k] += w * src[k];
      }
    }
  });
  shape[d] = p.out;
}

template <typename T>
double ToDouble(T v) {
  return static_cast<double>(v);
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    return static_cast<T>(std::clamp(std::nearbyint(v), lo, hi));
  }
}

Status InterpolateKernel(const Tensor& x, Tensor& y, const std::vector<AxisPlan>& plans, double extrapolation) {
  const int64_t n = x.numel();
  std::vector<double> cur(static_cast<size_t>(n)), next;
  switch (x.dtype()) {
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) cur[i] = HalfToFloat(x.data<uint16_t>()[i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) cur[i] = BFloat16ToFloat(x.data<uint16_t>()[i]);
      break;
    default: {
      const bool ok = VisitNumeric(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        for (int64_t i = 0; i < n; ++i) cur[i] = ToDouble(x.data<T>()[i]);
      });
      if (!ok) return DTypeError(0, x.dtype(), "numeric types (for linear and cubic modes)");
    }
  }
  Shape shape = x.shape();
  // Shrinking dimensions first keeps the intermediate buffers small.
  std::vector<int64_t> order;
  for (size_t d = 0; d < plans.size(); ++d)
    if (!plans[d].identity) order.push_back(static_cast<int64_t>(d));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return plans[a].out * plans[b].in < plans[b].out * plans[a].in; });
  for (int64_t d : order) {
    InterpolateAxis(cur, next, shape, d, plans[d], extrapolation);
    std::swap(cur, next);
  }
  const int64_t m = y.numel();
  switch (y.dtype()) {
    case DType::kFloat16:
      for (int64_t i = 0; i < m; ++i) y.data<uint16_t>()[i] = FloatToHalf(static_cast<float>(cur[i]));
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < m; ++i) y.data<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(cur[i]));
      break;
    default:
      VisitNumeric(y.dtype(), [&](auto tag) {
        using T = decltype(tag);
        for (int64_t i = 0; i < m; ++i) y.data<T>()[i] = FromDouble<T>(cur[i]);
      });
  }
  return Status::Ok();
}

// Values of a float tensor input as floats; empty if absent or empty.
Expected<std::vector<float>> ReadFloats(KernelContext& ctx, int index, const std::string& what) {
  if (index < 0 || !ctx.has_input(index)) return std::vector<float>{};
  const Tensor& t = ctx.input(index);
  if (t.numel() == 0) return std::vector<float>{};
  if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64 && t.dtype() != DType::kFloat16)
    return InputError(index, what + " must be float, got " + DTypeName(t.dtype()));
  std::vector<float> out;
  for (double v : t.ToDoubles()) out.push_back(static_cast<float>(v));
  return out;
}

Status RunResize(const ResizeAttrs& a, KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  if (r == 0) return InputError(0, "cannot resize a scalar");
  SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
  std::vector<int64_t> axes = a.axes;
  if (axes.empty()) {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  } else {
    SEQTO_ASSIGN_OR_RETURN(axes, tensorops::NormalizeAxes(axes, r, "attribute 'axes'"));
  }
  const size_t na = axes.size();
  std::vector<AxisPlan> plans(r);
  for (int64_t d = 0; d < r; ++d) {
    plans[d].in = x.dim(d);
    plans[d].out = x.dim(d);
  }
  if (a.coord == Coord::kTfCropAndResize) {
    SEQTO_ASSIGN_OR_RETURN(const std::vector<float> roi, ReadFloats(ctx, a.roi_input, "roi"));
    if (!roi.empty()) {
      if (roi.size() != 2 * na)
        return InputError(a.roi_input,
                          "roi has " + std::to_string(roi.size()) + " values, expected " + std::to_string(2 * na));
      for (size_t i = 0; i < na; ++i) {
        plans[axes[i]].roi_start = roi[i];
        plans[axes[i]].roi_end = roi[i + na];
      }
    }
  }
  std::vector<float> scales = a.attr_scales;
  if (!a.scales_from_attr) {
    SEQTO_ASSIGN_OR_RETURN(scales, ReadFloats(ctx, a.scales_input, "scales"));
  }
  std::vector<int64_t> sizes;
  if (a.sizes_input >= 0 && ctx.has_input(a.sizes_input) && ctx.input(a.sizes_input).numel() > 0) {
    SEQTO_ASSIGN_OR_RETURN(sizes, tensorops::ReadIntList(ctx.input(a.sizes_input), a.sizes_input, "sizes"));
  }
  if (!scales.empty() && !sizes.empty()) return UserError("only one of 'scales' and 'sizes' may be given");
  if (scales.empty() && sizes.empty()) return UserError("one of 'scales' and 'sizes' is required");
  if (!scales.empty()) {
    if (scales.size() != na)
      return UserError("scales has " + std::to_string(scales.size()) + " values, the input " +
                       ShapeToString(x.shape()) + " needs " + std::to_string(na));
    for (size_t i = 0; i < na; ++i) {
      if (!(scales[i] > 0)) return UserError("scales must be positive, got " + std::to_string(scales[i]));
      AxisPlan& p = plans[axes[i]];
      p.scale = static_cast<double>(scales[i]);
      const double out = std::floor(p.scale * static_cast<double>(p.in));
      if (out > 281474976710656.0)  // 2^48
        return UserError("scale " + std::to_string(scales[i]) + " makes dimension " + std::to_string(axes[i]) +
                         " too large");
      p.out = static_cast<int64_t>(out);
    }
  } else {
    if (sizes.size() != na)
      return UserError("sizes has " + std::to_string(sizes.size()) + " values, the input " + ShapeToString(x.shape()) +
                       " needs " + std::to_string(na));
    for (size_t i = 0; i < na; ++i) {
      if (sizes[i] < 0) return UserError("sizes " + tensorops::ListToString(sizes) + " has a negative extent");
      if (plans[axes[i]].in == 0 && sizes[i] > 0)
        return InputError(
            0, "cannot resize the empty dimension " + std::to_string(axes[i]) + " of " + ShapeToString(x.shape()));
    }
    if (a.aspect == AspectPolicy::kStretch) {
      for (size_t i = 0; i < na; ++i) {
        AxisPlan& p = plans[axes[i]];
        p.out = sizes[i];
        p.scale = p.in == 0 ? 1.0 : static_cast<double>(p.out) / static_cast<double>(p.in);
      }
    } else {
      double s = a.aspect == AspectPolicy::kNotLarger ? 1e300 : 0;
      for (size_t i = 0; i < na; ++i) {
        const AxisPlan& p = plans[axes[i]];
        if (p.in == 0) continue;
        const double si = static_cast<double>(sizes[i]) / static_cast<double>(p.in);
        s = a.aspect == AspectPolicy::kNotLarger ? std::min(s, si) : std::max(s, si);
      }
      for (size_t i = 0; i < na; ++i) {
        AxisPlan& p = plans[axes[i]];
        p.scale = s;
        const double out = std::round(s * static_cast<double>(p.in));
        if (out > 281474976710656.0) return UserError("sizes " + tensorops::ListToString(sizes) + " are too large");
        p.out = static_cast<int64_t>(out);
      }
    }
  }
  Shape out_shape(r);
  for (int64_t d = 0; d < r; ++d) {
    if (plans[d].in == 0 && plans[d].out > 0)
      return InputError(0,
                        "cannot resize the empty dimension " + std::to_string(d) + " of " + ShapeToString(x.shape()));
    out_shape[d] = plans[d].out;
  }
  SEQTO_RETURN_IF_ERROR(tensorops::CheckedNumElements(out_shape).status());
  Tensor& y = ctx.Allocate(0, x.dtype(), out_shape);
  if (y.numel() == 0) return Status::Ok();
  for (auto& p : plans) PlanAxis(a, p);
  if (a.mode == Mode::kNearest) {
    std::byte extrapolation[8] = {};
    if (a.coord == Coord::kTfCropAndResize && x.dtype() != DType::kBool) {
      SEQTO_RETURN_IF_ERROR(tensorops::ValueToBytes(a.extrapolation, x.dtype(), extrapolation));
    }
    tensorops::VisitElementSize(es, [&](auto tag) {
      using U = decltype(tag);
      U e;
      std::memcpy(&e, extrapolation, sizeof(U));
      NearestKernel(x.data<U>(), y.data<U>(), plans, e);
    });
    return Status::Ok();
  }
  return InterpolateKernel(x, y, plans, a.extrapolation);
}

Expected<Mode> ParseMode(const std::string& s, bool allow_cubic) {
  if (s == "nearest") return Mode::kNearest;
  if (s == "linear" || s == "bilinear" || s == "trilinear") return Mode::kLinear;
  if (s == "cubic" && allow_cubic) return Mode::kCubic;
  return UserError("attribute 'mode' is '" + s + "', expected nearest, linear" + (allow_cubic ? " or cubic" : ""));
}

Expected<std::unique_ptr<Kernel>> CreateResize(const KernelInit& init) {
  const ir::Node& node = init.node;
  ResizeAttrs a;
  SEQTO_ASSIGN_OR_RETURN(const std::string mode, node.attr_string("mode", "nearest"));
  SEQTO_ASSIGN_OR_RETURN(a.mode, ParseMode(mode, init.opset >= 11));
  if (init.opset < 11) {
    a.coord = Coord::kAsymmetric;
    a.rounding = Rounding::kSimple;
    a.scales_input = 1;
  } else {
    a.roi_input = 1;
    a.scales_input = 2;
    a.sizes_input = 3;
    SEQTO_ASSIGN_OR_RETURN(const std::string coord, node.attr_string("coordinate_transformation_mode", "half_pixel"));
    if (coord == "half_pixel")
      a.coord = Coord::kHalfPixel;
    else if (coord == "half_pixel_symmetric")
      a.coord = Coord::kHalfPixelSymmetric;
    else if (coord == "pytorch_half_pixel")
      a.coord = Coord::kPytorchHalfPixel;
    else if (coord == "align_corners")
      a.coord = Coord::kAlignCorners;
    else if (coord == "asymmetric")
      a.coord = Coord::kAsymmetric;
    else if (coord == "tf_half_pixel_for_nn")
      a.coord = Coord::kTfHalfPixelForNn;
    else if (coord == "tf_crop_and_resize")
      a.coord = Coord::kTfCropAndResize;
    else
      return UserError("attribute 'coordinate_transformation_mode' has the unknown value '" + coord + "'");
    SEQTO_ASSIGN_OR_RETURN(const std::string nearest, node.attr_string("nearest_mode", "round_prefer_floor"));
    if (nearest == "round_prefer_floor")
      a.rounding = Rounding::kRoundPreferFloor;
    else if (nearest == "round_prefer_ceil")
      a.rounding = Rounding::kRoundPreferCeil;
    else if (nearest == "floor")
      a.rounding = Rounding::kFloor;
    else if (nearest == "ceil")
      a.rounding = Rounding::kCeil;
    else
      return UserError("attribute 'nearest_mode' has the unknown value '" + nearest + "'");
    SEQTO_ASSIGN_OR_RETURN(const float cubic_a, node.attr_float("cubic_coeff_a", -0.75f));
    a.cubic_a = cubic_a;
    SEQTO_ASSIGN_OR_RETURN(const int64_t exclude, node.attr_int("exclude_outside", 0));
    a.exclude_outside = exclude != 0;
    SEQTO_ASSIGN_OR_RETURN(const float extrapolation, node.attr_float("extrapolation_value", 0.f));
    a.extrapolation = extrapolation;
    SEQTO_ASSIGN_OR_RETURN(const int64_t antialias, node.attr_int("antialias", 0));
    if (antialias != 0) return UserError("attribute 'antialias' is not supported");
    SEQTO_ASSIGN_OR_RETURN(a.axes, node.attr_ints("axes"));
    SEQTO_ASSIGN_OR_RETURN(const std::string policy, node.attr_string("keep_aspect_ratio_policy", "stretch"));
    if (policy == "stretch")
      a.aspect = AspectPolicy::kStretch;
    else if (policy == "not_larger")
      a.aspect = AspectPolicy::kNotLarger;
    else if (policy == "not_smaller")
      a.aspect = AspectPolicy::kNotSmaller;
    else
      return UserError("attribute 'keep_aspect_ratio_policy' has the unknown value '" + policy + "'");
  }
  return MakeKernel([a](KernelContext& ctx) -> Status { return RunResize(a, ctx); });
}

Expected<std::unique_ptr<Kernel>> CreateUpsample(const KernelInit& init) {
  ResizeAttrs a;
  SEQTO_ASSIGN_OR_RETURN(const std::string mode, init.node.attr_string("mode", "nearest"));
  SEQTO_ASSIGN_OR_RETURN(a.mode, ParseMode(mode, false));
  a.coord = Coord::kAsymmetric;
  a.rounding = Rounding::kSimple;
  if (init.opset < 9) {
    if (!init.node.has_attr("scales")) return UserError("attribute 'scales' is required");
    a.scales_from_attr = true;
    SEQTO_ASSIGN_OR_RETURN(a.attr_scales, init.node.attr_floats("scales"));
  } else {
    a.scales_input = 1;
  }
  return MakeKernel([a](KernelContext& ctx) -> Status { return RunResize(a, ctx); });
}

}  // namespace

void RegisterResize(OpRegistry& r) {
  r.Register({"Resize", "", 10, CreateResize});
  r.Register({"Upsample", "", 7, CreateUpsample});
}

}  // namespace seqto::ops
