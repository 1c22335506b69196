// ConvInteger and QLinearConv (opset 10): Conv (1 to 3 spatial dims, groups,
// strides, dilations, pads / auto_pad) of uint8/int8 X and W on zero-point-shifted
// values, accumulated exactly in int32:
//   acc[n, m, o] = B[m] + sum (X[n, c, i] - x_zp) * (W[m, c, k] - w_zp[m])
// over the window positions inside X: padding is x_zp, so it adds nothing.
// x_zp is per tensor; w_zp (and QLinearConv's w_scale) per tensor or per output
// channel ([M]).
//   ConvInteger: Y = acc (int32; no B).
//   QLinearConv: Y = clamp(round(acc * (x_scale * w_scale[m] / y_scale)) + y_zp),
//                in float32 with round half to even (ONNX Runtime's requantization);
//                B is optional int32 [M]; Y has y_zero_point's type.
// Reference: direct loops with int64 sums. Fast: a oneDNN int8 convolution (u8 or
// s8 source, s8 weights, s32 destination) with x_zp as oneDNN's source zero point
// (oneDNN also treats padding as the zero point). Weights must be s8, so the kernel
// feeds W - w_zp when that fits in int8 (int8 W with w_zp 0, uint8 W with w_zp 128,
// ...), and otherwise W8 = W - 128 (uint8) or W (int8) plus, per group, one extra
// output channel of ones: it yields sum(X - x_zp) over the window, and
// acc = conv(X, W8) + (128 - w_zp[m]) * that (or -w_zp[m] * that for int8).
// The s32 result is then brought to NCHW, and bias, correction and requantization
// happen in one exact pass (oneDNN's own output scales would round after adding
// the zero point and add the bias in float, which can differ by one step).
#include <algorithm>
#include <unordered_map>

#include "ops/nn/dnnl_util.h"
#include "ops/quant/quant_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

struct QConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  std::vector<du::WindowDim> dims;
  Shape y_shape;
  int64_t positions() const {
    int64_t p = 1;
    for (const auto& d : dims) p *= d.out;
    return p;
  }
};

Expected<QConvGeometry> ResolveQConv(const du::WindowAttrs& attrs, int64_t group, const Shape& x, const Shape& w,
                                     int x_index, int w_index) {
  if (x.size() < 3 || x.size() > 5)
    return InputError(x_index, "X has shape " + ShapeToString(x) + ", expected rank 3 to 5 (N x C x 1-3 spatial dims)");
  if (w.size() != x.size())
    return InputError(w_index, "W has shape " + ShapeToString(w) + ", expected rank " + std::to_string(x.size()) +
                                   " (the rank of X)");
  QConvGeometry g;
  g.batch = x[0];
  g.in_channels = x[1];
  g.out_channels = w[0];
  g.group = group;
  if (w[1] * group != x[1])
    return InputError(w_index, "W has shape " + ShapeToString(w) + ", expected dim 1 = C / group = " +
                                   std::to_string(x[1]) + " / " + std::to_string(group));
  if (w[0] % group != 0)
    return InputError(
        w_index, "W has shape " + ShapeToString(w) + ", expected dim 0 divisible by group " + std::to_string(group));
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (!attrs.kernel_shape.empty() && attrs.kernel_shape != kernel)
    return UserError("attribute 'kernel_shape' does not match W's shape " + ShapeToString(w));
  SEQTO_ASSIGN_OR_RETURN(g.dims, du::ResolveWindow(attrs, Shape(x.begin() + 2, x.end()), kernel));
  g.y_shape = {g.batch, g.out_channels};
  for (const auto& d : g.dims) g.y_shape.push_back(d.out);
  return g;
}

// The reference: acc (N x M x positions, int32) from int64 sums, B included.
template <typename TX, typename TW>
void AccReference(const QConvGeometry& g, const TX* x, const TW* w, int32_t x_zp, const std::vector<int32_t>& w_zp,
                  const int32_t* bias, int32_t* acc) {
  const auto d = du::To3d(g.dims);
  const int64_t in_vol = d[0].in * d[1].in * d[2].in;
  const int64_t out_vol = d[0].out * d[1].out * d[2].out;
  const int64_t k_vol = d[0].kernel * d[1].kernel * d[2].kernel;
  const int64_t cin_g = g.in_channels / g.group, cout_g = g.out_channels / g.group;
  ParallelFor(g.batch * g.out_channels, out_vol * cin_g * k_vol, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.out_channels, m = nm % g.out_channels, grp = m / cout_g;
      const int64_t zw = w_zp.size() == 1 ? w_zp[0] : w_zp[m];
      const TW* wm = w + m * cin_g * k_vol;
      const TX* xg = x + (n * g.in_channels + grp * cin_g) * in_vol;
      int32_t* am = acc + nm * out_vol;
      for (int64_t o0 = 0; o0 < d[0].out; ++o0)
        for (int64_t o1 = 0; o1 < d[1].out; ++o1)
          for (int64_t o2 = 0; o2 < d[2].out; ++o2) {
            int64_t sum = bias ? bias[m] : 0;
            for (int64_t c = 0; c < cin_g; ++c)
              for (int64_t k0 = 0; k0 < d[0].kernel; ++k0) {
                const int64_t i0 = o0 * d[0].stride - d[0].pad_begin + k0 * d[0].dilation;
                if (i0 < 0 || i0 >= d[0].in) continue;
                for (int64_t k1 = 0; k1 < d[1].kernel; ++k1) {
                  const int64_t i1 = o1 * d[1].stride - d[1].pad_begin + k1 * d[1].dilation;
                  if (i1 < 0 || i1 >= d[1].in) continue;
                  for (int64_t k2 = 0; k2 < d[2].kernel; ++k2) {
                    const int64_t i2 = o2 * d[2].stride - d[2].pad_begin + k2 * d[2].dilation;
                    if (i2 < 0 || i2 >= d[2].in) continue;
                    sum += (static_cast<int64_t>(xg[c * in_vol + (i0 * d[1].in + i1) * d[2].in + i2]) - x_zp) *
                           (static_cast<int64_t>(wm[c * k_vol + (k0 * d[1].kernel + k1) * d[2].kernel + k2]) - zw);
                  }
                }
              }
            am[(o0 * d[1].out + o1) * d[2].out + o2] = static_cast<int32_t>(sum);
          }
    }
  });
}

// W as oneDNN's s8 weights, laid out [G, M/G (+1), C/G, K...].
struct QWeights {
  std::vector<int8_t> data;
  bool extended = false;      // one channel of ones after each group's channels
  std::vector<int32_t> ones;  // per output channel: the factor of its group's ones channel
};

QWeights PrepareWeights(const Tensor& w, const std::vector<int32_t>& w_zp, int64_t group) {
  QWeights q;
  const int64_t m_total = w.dim(0), per_m = w.numel() / std::max<int64_t>(m_total, 1);
  const bool u8 = w.dtype() == DType::kUInt8;
  auto value = [&](int64_t i) -> int32_t { return u8 ? w.data<uint8_t>()[i] : w.data<int8_t>()[i]; };
  auto zp = [&](int64_t m) { return w_zp.size() == 1 ? w_zp[0] : w_zp[m]; };
  bool fits = true;
  for (int64_t m = 0; m < m_total && fits; ++m)
    for (int64_t i = m * per_m; i < (m + 1) * per_m; ++i) {
      const int32_t v = value(i) - zp(m);
      if (v < -128 || v > 127) {
        fits = false;
        break;
      }
    }
  if (fits) {
    q.data.resize(static_cast<size_t>(w.numel()));
    for (int64_t m = 0; m < m_total; ++m)
      for (int64_t i = m * per_m; i < (m + 1) * per_m; ++i) q.data[i] = static_cast<int8_t>(value(i) - zp(m));
    return q;
  }
  q.extended = true;
  const int32_t off = u8 ? 128 : 0;
  const int64_t mg = m_total / group;
  q.data.reserve(static_cast<size_t>((m_total + group) * per_m));
  q.ones.resize(static_cast<size_t>(m_total));
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t j = 0; j < mg; ++j) {
      const int64_t m = g * mg + j;
      for (int64_t i = m * per_m; i < (m + 1) * per_m; ++i) q.data.push_back(static_cast<int8_t>(value(i) - off));
      q.ones[m] = off - zp(m);
    }
    q.data.insert(q.data.end(), static_cast<size_t>(per_m), int8_t{1});
  }
  return q;
}

// One input shape through oneDNN.
struct QConvPlan {
  du::ConvPrimitive conv;
  bool src_zp;
};

class QConvKernel final : public Kernel {
 public:
  QConvKernel(bool qlinear, du::WindowAttrs attrs, int64_t group, bool reference_only)
      : qlinear_(qlinear), attrs_(std::move(attrs)), group_(group), reference_only_(reference_only) {}

  int x_index() const { return 0; }
  int x_zp_index() const { return 2; }
  int w_index() const { return qlinear_ ? 3 : 1; }
  int w_zp_index() const { return qlinear_ ? 5 : 3; }

  // Prepares a constant W (with a constant or absent w_zp) once.
  void Prepare(const KernelInit& init) {
    const Tensor* w = init.constant(w_index());
    if (reference_only_ || !quant::ExactInt8Isa() || !w || !quant::Is8Bit(w->dtype()) || w->rank() < 3) return;
    const bool has_zp =
        init.node.inputs.size() > static_cast<size_t>(w_zp_index()) && !init.node.inputs[w_zp_index()].empty();
    const Tensor* zp = has_zp ? init.constant(w_zp_index()) : nullptr;
    if (has_zp && !zp) return;  // w_zp varies: prepared per run
    std::vector<int32_t> w_zp{0};
    if (zp) {
      if (zp->dtype() != w->dtype() || (zp->numel() != 1 && zp->numel() != w->dim(0))) return;  // reported at run time
      w_zp = quant::ReadInt32s(*zp);
    }
    if (w->dim(0) % group_ != 0) return;
    const_w_ = *w;
    const_wq_ = PrepareWeights(*w, w_zp, group_);
  }

  Status Run(KernelContext& ctx) override {
    const Tensor& x = ctx.input(x_index());
    const Tensor& w = ctx.input(w_index());
    if (!quant::Is8Bit(x.dtype())) return DTypeError(x_index(), x.dtype(), "uint8, int8");
    if (!quant::Is8Bit(w.dtype())) return DTypeError(w_index(), w.dtype(), "uint8, int8");
    SEQTO_ASSIGN_OR_RETURN(QConvGeometry g, ResolveQConv(attrs_, group_, x.shape(), w.shape(), x_index(), w_index()));
    const int64_t m_total = g.out_channels;

    int32_t x_zp = 0;
    if (ctx.has_input(x_zp_index())) {
      const Tensor& t = ctx.input(x_zp_index());
      SEQTO_ASSIGN_OR_RETURN(auto v, quant::ReadZeroPoints(t, x.dtype(), x_zp_index(), "x_zero_point"));
      if (v.size() != 1)
        return InputError(x_zp_index(), "x_zero_point has shape " + ShapeToString(t.shape()) + ", expected a scalar");
      x_zp = v[0];
    }
    std::vector<int32_t> w_zp{0};
    if (ctx.has_input(w_zp_index())) {
      const Tensor& t = ctx.input(w_zp_index());
      SEQTO_ASSIGN_OR_RETURN(w_zp, quant::ReadZeroPoints(t, w.dtype(), w_zp_index(), "w_zero_point"));
      if (w_zp.size() != 1 && (t.rank() != 1 || t.numel() != m_total))
        return InputError(w_zp_index(), "w_zero_point has shape " + ShapeToString(t.shape()) +
                                            ", expected a scalar or " + std::to_string(m_total) +
                                            " values (one per output channel)");
    }

    // QLinearConv's scales, output zero point and bias.
    std::vector<float> mult{1.f};  // per output channel (or one)
    int32_t y_zp = 0;
    DType y_type = DType::kInt32;
    const int32_t* bias = nullptr;
    if (qlinear_) {
      SEQTO_ASSIGN_OR_RETURN(float x_scale, quant::ScalarScale(ctx, 1, "x_scale"));
      SEQTO_ASSIGN_OR_RETURN(float y_scale, quant::ScalarScale(ctx, 6, "y_scale"));
      if (!ctx.has_input(4)) return InputError(4, "w_scale is missing");
      const Tensor& ws = ctx.input(4);
      SEQTO_ASSIGN_OR_RETURN(std::vector<float> w_scale, quant::ReadScales(ws, 4, "w_scale"));
      if (w_scale.size() != 1 && (ws.rank() != 1 || ws.numel() != m_total))
        return InputError(4, "w_scale has shape " + ShapeToString(ws.shape()) + ", expected a scalar or " +
                                 std::to_string(m_total) + " values (one per output channel)");
      mult.resize(w_scale.size());
      for (size_t i = 0; i < w_scale.size(); ++i) mult[i] = x_scale * w_scale[i] / y_scale;
      y_type = x.dtype();
      if (ctx.has_input(7)) {
        const Tensor& t = ctx.input(7);
        y_type = t.dtype();
        if (!quant::Is8Bit(y_type)) return DTypeError(7, y_type, "uint8, int8");
        if (t.numel() != 1)
          return InputError(7, "y_zero_point has shape " + ShapeToString(t.shape()) + ", expected a scalar");
        y_zp = quant::ReadInt32s(t)[0];
      }
      if (ctx.has_input(8)) {
        const Tensor& b = ctx.input(8);
        if (b.dtype() != DType::kInt32) return DTypeError(8, b.dtype(), "int32");
        if (b.rank() != 1 || b.dim(0) != m_total)
          return InputError(8, "B has shape " + ShapeToString(b.shape()) + ", expected " + std::to_string(m_total) +
                                   " (the output channels)");
        bias = b.data<int32_t>();
      }
    }

    Tensor& y = ctx.Allocate(0, y_type, g.y_shape);
    if (y.numel() == 0) return Status::Ok();
    const Epilogue epi{qlinear_, mult, y_zp, bias};
    if (!reference_only_ && g.in_channels > 0 && quant::ExactInt8Isa()) {
      SEQTO_ASSIGN_OR_RETURN(bool done, RunFast(g, x, w, x_zp, w_zp, epi, y));
      if (done) return Status::Ok();
    }
    // Reference: acc into Y (ConvInteger) or a scratch buffer, then requantize.
    int32_t* acc =
        qlinear_ ? static_cast<int32_t*>(du::Scratch(1, static_cast<size_t>(y.numel()) * 4)) : y.data<int32_t>();
    const bool xu8 = x.dtype() == DType::kUInt8, wu8 = w.dtype() == DType::kUInt8;
    if (xu8 && wu8)
      AccReference(g, x.data<uint8_t>(), w.data<uint8_t>(), x_zp, w_zp, bias, acc);
    else if (xu8)
      AccReference(g, x.data<uint8_t>(), w.data<int8_t>(), x_zp, w_zp, bias, acc);
    else if (wu8)
      AccReference(g, x.data<int8_t>(), w.data<uint8_t>(), x_zp, w_zp, bias, acc);
    else
      AccReference(g, x.data<int8_t>(), w.data<int8_t>(), x_zp, w_zp, bias, acc);
    if (qlinear_) {  // requantize one element at a time
      const quant::IntRange range = quant::RangeOf(y_type);
      const int64_t positions = g.positions();
      for (int64_t i = 0; i < y.numel(); ++i) {
        const int64_t m = i / positions % m_total;
        const int32_t q = quant::Requantize(acc[i], mult.size() == 1 ? mult[0] : mult[m], y_zp, range);
        if (y_type == DType::kUInt8)
          y.data<uint8_t>()[i] = static_cast<uint8_t>(q);
        else
          y.data<int8_t>()[i] = static_cast<int8_t>(q);
      }
    }
    return Status::Ok();
  }

 private:
  // What happens to the int32 accumulators: bias, then (QLinearConv) requantization.
  struct Epilogue {
    bool requantize;
    const std::vector<float>& mult;
    int32_t y_zp;
    const int32_t* bias;
  };

  // Writes Y from oneDNN's int32 results `raw`, laid out [N, stride_m, positions]:
  // output channel m is raw channel m, or with extended weights (`ext`) raw channel
  // g * (M/G + 1) + j plus ext->ones[m] times the group's ones channel; then adds
  // the bias and requantizes (QLinearConv).
  void Finish(const Epilogue& epi, const int32_t* raw, int64_t batch, int64_t m_total, int64_t positions,
              int64_t stride_m, const QWeights* ext, int64_t mg, Tensor& y) const {
    const bool ones = ext != nullptr;
    const quant::ClampBounds bounds(quant::RangeOf(y.dtype()), epi.y_zp);
    void* out = y.raw();
    const DType y_type = y.dtype();
    ParallelFor(batch * m_total, positions * 2, [&](int64_t begin, int64_t end) {
      int32_t* row = nullptr;  // acc of one channel, when it needs a pass of its own
      if (ones && epi.requantize) row = static_cast<int32_t*>(du::Scratch(0, static_cast<size_t>(positions) * 4));
      for (int64_t nm = begin; nm < end; ++nm) {
        const int64_t n = nm / m_total, m = nm % m_total;
        const int64_t raw_m = ones ? (m / mg) * (mg + 1) + m % mg : m;
        const int32_t* src = raw + (n * stride_m + raw_m) * positions;
        const uint32_t b = static_cast<uint32_t>(epi.bias ? epi.bias[m] : 0);
        // acc = src + bias (+ factor * ones channel), wrapping like int32 arithmetic.
        int32_t* acc_dst = !epi.requantize ? static_cast<int32_t*>(out) + nm * positions : row;
        if (ones) {
          const int32_t* ones_ch = raw + (n * stride_m + (m / mg) * (mg + 1) + mg) * positions;
          const uint32_t factor = static_cast<uint32_t>(ext->ones[m]);
#pragma omp simd
          for (int64_t p = 0; p < positions; ++p)
            acc_dst[p] =
                static_cast<int32_t>(static_cast<uint32_t>(src[p]) + b + factor * static_cast<uint32_t>(ones_ch[p]));
          src = acc_dst;
        } else if (!epi.requantize) {
#pragma omp simd
          for (int64_t p = 0; p < positions; ++p) acc_dst[p] = static_cast<int32_t>(static_cast<uint32_t>(src[p]) + b);
        }
        if (!epi.requantize) continue;
        const int32_t bias = ones ? 0 : static_cast<int32_t>(b);  // already in src with ones
        const float mult = epi.mult.size() == 1 ? epi.mult[0] : epi.mult[m];
        const int32_t zp = epi.y_zp;
        const float lo = bounds.lo, hi = bounds.hi;  // locals: loads from the capture would block vectorizing
        if (y_type == DType::kUInt8) {
          uint8_t* dst = static_cast<uint8_t*>(out) + nm * positions;
#pragma omp simd
          for (int64_t p = 0; p < positions; ++p)
            dst[p] = static_cast<uint8_t>(quant::QuantizeClamped(
                static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(src[p]) + static_cast<uint32_t>(bias))) *
                    mult,
                lo, hi, zp));
        } else {
          int8_t* dst = static_cast<int8_t*>(out) + nm * positions;
#pragma omp simd
          for (int64_t p = 0; p < positions; ++p)
            dst[p] = static_cast<int8_t>(quant::QuantizeClamped(
                static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(src[p]) + static_cast<uint32_t>(bias))) *
                    mult,
                lo, hi, zp));
        }
      }
    });
  }

  // Builds the oneDNN primitive for one configuration; null when oneDNN has only a
  // slow generic implementation or none.
  std::shared_ptr<QConvPlan> MakePlan(const QConvGeometry& g, const Shape& x, DType x_type, bool src_zp,
                                      const QWeights& wq, bool const_weights) {
    try {
      const int64_t mg = g.out_channels / g.group;
      const int64_t mg_ext = mg + (wq.extended ? 1 : 0);
      Shape wei_dims{g.group, mg_ext, g.in_channels / g.group};
      for (const auto& d : g.dims) wei_dims.push_back(d.kernel);
      Shape dst_dims{g.batch, g.group * mg_ext};
      for (const auto& d : g.dims) dst_dims.push_back(d.out);
      const du::DnnlWindow win = du::ToDnnlWindow(g.dims);
      const memory::data_type x_dt = x_type == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8;
      const du::ConvIo io{du::PlainDesc(x, x_dt), du::PlainDesc(wei_dims, memory::data_type::s8),
                          du::PlainDesc(dst_dims, memory::data_type::s32)};
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           du::AnyDesc(x, x_dt), du::AnyDesc(wei_dims, memory::data_type::s8),
                                           du::AnyDesc(dst_dims, memory::data_type::s32), win.strides, win.dilations,
                                           win.pad_l, win.pad_r);
      // oneDNN's own scratchpad: with a user scratchpad, oneDNN 2.6 crashed creating
      // some int8 convs (seen under AddressSanitizer; dnnl_util.h, UserScratchpadAttr).
      dnnl::primitive_attr attr;
      std::vector<du::ConvArg> zp_args;
      if (src_zp) {
        attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
        zp_args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
                           memory::desc({1}, memory::data_type::s32, memory::format_tag::x)});
      }
      dnnl::convolution_forward::primitive_desc pd;
      if (!du::TryMakePd(pd, [&] { return dnnl::convolution_forward::primitive_desc(desc, attr, du::Engine()); }))
        return nullptr;
      if (du::ImplName(pd).find("ref") != std::string::npos) return nullptr;  // no faster than ours
      return std::make_shared<QConvPlan>(QConvPlan{
          du::ConvPrimitive(pd, io, const_weights ? wq.data.data() : nullptr, &packed_w_, false, zp_args), src_zp});
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  // acc through oneDNN, then the epilogue; false when there is no fast plan.
  Expected<bool> RunFast(const QConvGeometry& g, const Tensor& x, const Tensor& w, int32_t x_zp,
                         const std::vector<int32_t>& w_zp, const Epilogue& epi, Tensor& y) {
    const bool const_w = const_w_.defined() && w.raw() == const_w_.raw();
    QWeights run_wq;
    if (!const_w) run_wq = PrepareWeights(w, w_zp, group_);
    const QWeights& wq = const_w ? const_wq_ : run_wq;
    const bool src_zp = x_zp != 0;
    du::CacheKey key = du::ShapeKey({&x.shape(), &w.shape()});
    key.insert(key.end(), {static_cast<int64_t>(x.dtype()), src_zp, wq.extended, const_w});
    auto plan = plans_.Get(key, [&] { return MakePlan(g, x.shape(), x.dtype(), src_zp, wq, const_w); });
    if (!plan) return false;
    const int64_t mg = g.out_channels / g.group;
    const bool direct = !epi.requantize && !wq.extended && !epi.bias;  // oneDNN's result is Y
    void* plain = direct ? y.raw() : du::Scratch(3, plan->conv.io().dst.get_size());
    SEQTO_RETURN_IF_ERROR(du::Guard(qlinear_ ? "QLinearConv" : "ConvInteger", [&] {
      const void* zp[1] = {&x_zp};
      plan->conv.Run(x.raw(), wq.data.data(), plain, nullptr, std::span<const void* const>(zp, plan->src_zp ? 1 : 0));
    }));
    quant::CountFastRun();
    if (!direct) {
      const int64_t stride_m = g.group * (mg + (wq.extended ? 1 : 0));
      Finish(epi, static_cast<const int32_t*>(plain), g.batch, g.out_channels, g.positions(), stride_m,
             wq.extended ? &wq : nullptr, mg, y);
    }
    return true;
  }

  bool qlinear_;
  du::WindowAttrs attrs_;
  int64_t group_;
  bool reference_only_;
  Tensor const_w_;     // constant W (undefined when W or w_zp is not constant)
  QWeights const_wq_;  // const_w_ prepared
  memory packed_w_;    // const_wq_ as the latest plan wants it
  du::ShapeCache<QConvPlan> plans_;
};

Expected<std::unique_ptr<Kernel>> MakeQConv(const KernelInit& init, bool qlinear) {
  SEQTO_ASSIGN_OR_RETURN(du::WindowAttrs attrs, du::ParseWindowAttrs(init.node, false));
  SEQTO_ASSIGN_OR_RETURN(int64_t group, init.node.attr_int("group", 1));
  if (group < 1) return UserError("attribute 'group' is " + std::to_string(group) + ", expected >= 1");
  auto kernel = std::make_unique<QConvKernel>(qlinear, std::move(attrs), group, init.reference_only);
  kernel->Prepare(init);
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void RegisterConvInteger(OpRegistry& r) {
  r.Register({"ConvInteger", "", 10, [](const KernelInit& init) { return MakeQConv(init, false); }});
  r.Register({"QLinearConv", "", 10, [](const KernelInit& init) { return MakeQConv(init, true); }});
}

}  // namespace seqto::ops
