// Conv: Y = conv(X, W) + B over 1 to 3 spatial dims, with groups (depthwise
// included), strides, dilations, explicit pads or auto_pad.
//   X: N x C x D1..Dk, W: M x C/group x K1..Kk, B: M (optional), Y: N x M x O1..Ok.
// Reference: direct loops with double accumulation (float32, float64).
// Fast (float32): a oneDNN convolution built once per input shape; a constant W is
// reordered once, at kernel creation, into the layout the primitive prefers.
//
// Also registers com.seqto.FusedConv, which the runtime's fuse-conv pass
// (rewrite/fuse_conv.cc) makes from Conv -> [Add] -> [Relu|Clip|LeakyRelu]:
//   inputs X, W, B (may be ""), Sum (optional, added to the conv's output),
//   attributes: Conv's, plus activation ("Relu", "Clip", "LeakyRelu") and
//   activation_params ([min, max] for Clip, [alpha] for LeakyRelu),
//   output_fake_quant ([scale, lo, hi]: a QuantizeLinear -> DequantizeLinear pair
//   after the activation, lo and hi the quantized range minus the zero point), and
//   channels_last (0 or 1): X, Sum and Y are N x D1..Dk x C (the layout pass,
//   rewrite/channels_last.cc, sets it so that convs pass activations to each other
//   without a reorder; W stays M x C/group x K1..Kk).
// oneDNN applies them as post-ops (sum, eltwise) while the output is in cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

// Conv resolved for one pair of X and W shapes.
struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  std::vector<du::WindowDim> dims;  // one per spatial dim
  Shape y_shape;
};

Expected<ConvGeometry> ResolveConv(const du::WindowAttrs& attrs, int64_t group, const Shape& x, const Shape& w) {
  if (x.size() < 3 || x.size() > 5)
    return InputError(0, "X has shape " + ShapeToString(x) + ", expected rank 3 to 5 (N x C x 1-3 spatial dims)");
  if (w.size() != x.size())
    return InputError(
        1, "W has shape " + ShapeToString(w) + ", expected rank " + std::to_string(x.size()) + " (the rank of X)");
  ConvGeometry g;
  g.batch = x[0];
  g.in_channels = x[1];
  g.out_channels = w[0];
  g.group = group;
  if (w[1] * group != x[1])
    return InputError(1, "W has shape " + ShapeToString(w) + ", expected dim 1 = C / group = " + std::to_string(x[1]) +
                             " / " + std::to_string(group));
  if (w[0] % group != 0)
    return InputError(
        1, "W has shape " + ShapeToString(w) + ", expected dim 0 divisible by group " + std::to_string(group));
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (!attrs.kernel_shape.empty() && attrs.kernel_shape != kernel)
    return UserError("attribute 'kernel_shape' does not match W's shape " + ShapeToString(w));
  SEQTO_ASSIGN_OR_RETURN(g.dims, du::ResolveWindow(attrs, Shape(x.begin() + 2, x.end()), kernel));
  g.y_shape = {g.batch, g.out_channels};
  for (const auto& d : g.dims) g.y_shape.push_back(d.out);
  return g;
}

// What a FusedConv applies after the convolution, in this order.
struct PostOps {
  enum class Activation { kNone, kRelu, kClip, kLeakyRelu };
  bool sum = false;  // add input 3 (same shape as Y)
  Activation activation = Activation::kNone;
  float p0 = 0, p1 = 0;  // Clip: min, max; LeakyRelu: alpha
  // QuantizeLinear -> DequantizeLinear with one scale: y = round(clamp(y / scale, lo,
  // hi)) * scale, lo and hi the quantized type's range minus the zero point (NaN
  // gives 0, as the zero point dequantizes).
  bool fake_quant = false;
  float fq_scale = 1, fq_lo = 0, fq_hi = 0;

  // oneDNN's relu (alpha 0) and clip post-ops compute max/min, which turn NaN into
  // a bound; the unfused ops (and ONNX Runtime) keep NaN (or, fake quantized, 0).
  bool LosesNaN() const {
    return activation == Activation::kRelu || activation == Activation::kClip ||
           (activation == Activation::kLeakyRelu && p0 == 0.f) || fake_quant;
  }
  // The fake quantization's clamp on y / scale with the activation folded in:
  // clamp(y, a, b) / scale rounds to clamp(y / scale, a / scale, b / scale) (a
  // correctly rounded division is monotonic), so Relu/Clip followed by the fake
  // quantization is one clamp of y / scale. LeakyRelu does not fold (ParsePostOps
  // refuses it with a fake quantization).
  std::pair<float, float> FakeQuantBounds() const {
    float lo = fq_lo, hi = fq_hi;
    if (activation == Activation::kRelu) lo = std::max(lo, 0.f);
    if (activation == Activation::kClip) {
      lo = std::max(lo, p0 / fq_scale);
      hi = std::min(hi, p1 / fq_scale);
    }
    return {std::min(lo, hi), hi};
  }
  // Whether anything follows the sum (the part the separate path applies itself).
  bool HasTail() const { return activation != Activation::kNone || fake_quant; }

  // The activation, then the fake quantization: the post-ops after the sum.
  template <typename T>
  T Tail(T v) const {
    v = Activate(v);
    if (!fake_quant) return v;
    // As QuantizeLinear (quant::QuantizeClamped: division, NaN to the zero point,
    // clamp, round half to even), then DequantizeLinear.
    float q = static_cast<float>(v) / fq_scale;
    q = q == q ? q : 0.f;
    q = q < fq_lo ? fq_lo : (q > fq_hi ? fq_hi : q);
    return static_cast<T>(std::nearbyint(q) * fq_scale);
  }

  template <typename T>
  T Activate(T v) const {
    switch (activation) {
      case Activation::kRelu:  // NaN stays NaN, as in the unfused Relu
        return v < T(0) ? T(0) : v;
      case Activation::kClip:
        return v < T(p0) ? T(p0) : (v > T(p1) ? T(p1) : v);
      case Activation::kLeakyRelu:
        return v < T(0) ? v * T(p0) : v;
      default:
        return v;
    }
  }
};

Expected<PostOps> ParsePostOps(const ir::Node& node) {
  PostOps post;
  post.sum = node.inputs.size() > 3 && !node.inputs[3].empty();
  SEQTO_ASSIGN_OR_RETURN(std::string activation, node.attr_string("activation", ""));
  SEQTO_ASSIGN_OR_RETURN(std::vector<float> params, node.attr_floats("activation_params"));
  auto need = [&](size_t n) -> Status {
    if (params.size() != n)
      return UserError("attribute 'activation_params' has " + std::to_string(params.size()) + " values, expected " +
                       std::to_string(n) + " for " + activation);
    return Status::Ok();
  };
  SEQTO_ASSIGN_OR_RETURN(std::vector<float> fake_quant, node.attr_floats("output_fake_quant"));
  if (!fake_quant.empty()) {
    if (fake_quant.size() != 3 || !(fake_quant[0] > 0) || !std::isfinite(fake_quant[0]) ||
        !(fake_quant[1] <= fake_quant[2]))
      return UserError("attribute 'output_fake_quant' must be [scale > 0, lo, hi] with lo <= hi");
    post.fake_quant = true;
    post.fq_scale = fake_quant[0];
    post.fq_lo = fake_quant[1];
    post.fq_hi = fake_quant[2];
  }
  if (activation.empty()) return post;
  if (post.fake_quant && activation == "LeakyRelu")
    return UserError("attribute 'output_fake_quant' cannot follow a LeakyRelu activation");
  if (activation == "Relu") {
    post.activation = PostOps::Activation::kRelu;
  } else if (activation == "Clip") {
    SEQTO_RETURN_IF_ERROR(need(2));
    post.activation = PostOps::Activation::kClip;
    post.p0 = params[0];
    post.p1 = params[1];
  } else if (activation == "LeakyRelu") {
    SEQTO_RETURN_IF_ERROR(need(1));
    post.activation = PostOps::Activation::kLeakyRelu;
    post.p0 = params[0];
  } else {
    return UserError("attribute 'activation' is '" + activation + "', expected Relu, Clip or LeakyRelu");
  }
  return post;
}

// Applies the post-ops to a computed Y in plain loops (reference path, and the
// fast path's fallback when Sum has to be broadcast).
template <typename T>
Status ApplyPostOpsReference(const PostOps& post, const Tensor* sum, Tensor& y) {
  if (post.sum) {
    Tensor tmp = y.Clone();
    const auto add = [](T a, T c) { return a + c; };
    SEQTO_RETURN_IF_ERROR((BroadcastBinary<T, T, T>(tmp, *sum, y, add)));
  }
  if (post.HasTail()) {
    T* p = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) p[i] = post.Tail(p[i]);
  }
  return Status::Ok();
}

// AllFinite (core/tensor.h) of an optional input.
bool AllFinite(const Tensor* t) { return !t || seqto::AllFinite(*t); }

// The reference: one output element at a time, accumulated in double.
template <typename T>
void ConvReference(const ConvGeometry& g, const T* x, const T* w, const T* b, T* y) {
  const auto d = du::To3d(g.dims);
  const int64_t in_vol = d[0].in * d[1].in * d[2].in;
  const int64_t out_vol = d[0].out * d[1].out * d[2].out;
  const int64_t k_vol = d[0].kernel * d[1].kernel * d[2].kernel;
  const int64_t cin_g = g.in_channels / g.group, cout_g = g.out_channels / g.group;
  ParallelFor(g.batch * g.out_channels, out_vol * cin_g * k_vol, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.out_channels, m = nm % g.out_channels, grp = m / cout_g;
      const T* wm = w + m * cin_g * k_vol;
      const T* xg = x + (n * g.in_channels + grp * cin_g) * in_vol;
      T* ym = y + nm * out_vol;
      for (int64_t o0 = 0; o0 < d[0].out; ++o0)
        for (int64_t o1 = 0; o1 < d[1].out; ++o1)
          for (int64_t o2 = 0; o2 < d[2].out; ++o2) {
            double acc = b ? static_cast<double>(b[m]) : 0.0;
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
                    acc += static_cast<double>(xg[c * in_vol + (i0 * d[1].in + i1) * d[2].in + i2]) *
                           static_cast<double>(wm[c * k_vol + (k0 * d[1].kernel + k1) * d[2].kernel + k2]);
                  }
                }
              }
            ym[(o0 * d[1].out + o1) * d[2].out + o2] = static_cast<T>(acc);
          }
    }
  });
}

// Everything needed to run one input shape through oneDNN.
struct ConvPlan {
  du::ConvPrimitive conv;
  bool has_bias;
  bool fake_quant;  // passes the fake quantization's scale
};

class ConvKernel final : public Kernel {
 public:
  ConvKernel(du::WindowAttrs attrs, int64_t group, PostOps post, bool channels_last, bool reference_only)
      : attrs_(std::move(attrs)),
        group_(group),
        post_(post),
        channels_last_(channels_last),
        reference_only_(reference_only) {}

  // Prepacks a constant W (and checks it) at creation, for a nominal input shape.
  Status Prepare(const Tensor* w, bool with_bias) {
    if (!w) return Status::Ok();
    const_w_ = *w;
    const_w_finite_ = AllFinite(w);
    if (w->rank() < 3 || w->rank() > 5)
      return InputError(1, "W has shape " + ShapeToString(w->shape()) + ", expected rank 3 to 5");
    if (w->dim(0) % group_ != 0)
      return InputError(1, "W has shape " + ShapeToString(w->shape()) + ", expected dim 0 divisible by group " +
                               std::to_string(group_));
    if (reference_only_ || w->dtype() != DType::kFloat32) return Status::Ok();
    // A nominal input: batch 1, the channels W implies, spatial extents that fit
    // the window. The layout oneDNN prefers for W rarely depends on them; a plan
    // for another shape that wants another layout repacks W once for itself.
    Shape x{1, w->dim(1) * group_};
    for (int64_t i = 2; i < w->rank(); ++i) {
      const int64_t dil = attrs_.dilations.size() == static_cast<size_t>(w->rank() - 2) ? attrs_.dilations[i - 2] : 1;
      x.push_back(std::max<int64_t>(28, (w->dim(i) - 1) * dil + 1));
    }
    auto g = ResolveConv(attrs_, group_, x, w->shape());
    if (!g) return Status::Ok();             // reported when the node runs
    MakePlan(*g, x, w->shape(), with_bias);  // packs W into packed_w_
    return Status::Ok();
  }

  Status Run(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& w = ctx.input(1);
    const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64)
      return DTypeError(0, x.dtype(), "float32, float64");
    if (w.dtype() != x.dtype())
      return InputError(1, "W has type " + DTypeName(w.dtype()) + ", expected X's type " + DTypeName(x.dtype()));
    if (channels_last_ && x.rank() != w.rank())
      return InputError(0, "X has shape " + ShapeToString(x.shape()) + ", expected rank " + std::to_string(w.rank()) +
                               " (N x spatial x C: channels_last)");
    // Geometry is always worked out on the N x C x spatial view.
    const Shape x_shape = channels_last_ ? ChannelsFirstShape(x.shape()) : x.shape();
    SEQTO_ASSIGN_OR_RETURN(ConvGeometry g, ResolveConv(attrs_, group_, x_shape, w.shape()));
    if (b) {
      if (b->dtype() != x.dtype()) return InputError(2, "B has type " + DTypeName(b->dtype()) + ", expected X's type");
      if (b->rank() != 1 || b->dim(0) != g.out_channels)
        return InputError(2, "B has shape " + ShapeToString(b->shape()) + ", expected " +
                                 std::to_string(g.out_channels) + " (the output channels)");
    }
    const Tensor* sum = post_.sum ? &ctx.input(3) : nullptr;
    if (sum && sum->dtype() != x.dtype())
      return InputError(3, "Sum has type " + DTypeName(sum->dtype()) + ", expected X's type");
    Tensor& y = ctx.Allocate(0, x.dtype(), channels_last_ ? ChannelsLastShape(g.y_shape) : g.y_shape);
    if (y.numel() == 0) return Status::Ok();
    if (channels_last_) {
      if (sum && sum->rank() != y.rank())
        return InputError(3, "Sum has shape " + ShapeToString(sum->shape()) + ", expected rank " +
                                 std::to_string(y.rank()) + " (channels_last)");
      // As below: a broadcast Sum runs unfused.
      if (!reference_only_ && g.in_channels > 0 && x.dtype() == DType::kFloat32 &&
          (!sum || sum->shape() == y.shape())) {
        if (std::optional<Status> done = RunFast(g, x_shape, x, w, b, sum, y, ctx.may_be_non_finite())) return *done;
      }
      return RunChannelsLastReference(g, x, w, b, sum, y);
    }
    if (x.dtype() == DType::kFloat64) {
      ConvReference(g, x.data<double>(), w.data<double>(), b ? b->data<double>() : nullptr, y.data<double>());
      return ApplyPostOpsReference<double>(post_, sum, y);
    }
    // The sum post-op needs Sum shaped exactly like Y; a broadcast Add (rare) runs unfused.
    const bool fusable = !sum || sum->shape() == y.shape();
    if (!reference_only_ && g.in_channels > 0 && fusable) {
      if (std::optional<Status> done = RunFast(g, x.shape(), x, w, b, sum, y, ctx.may_be_non_finite())) return *done;
    }
    ConvReference(g, x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr, y.data<float>());
    return ApplyPostOpsReference<float>(post_, sum, y);
  }

 private:
  // The oneDNN path; nullopt when oneDNN cannot run this shape (the caller falls back
  // to the reference). When the activation post-op would turn NaN into a number and
  // an input holds a non-finite value, the activation runs after the primitive
  // instead, as the unfused ops would compute it. The inputs are scanned only when the
  // run may hold non-finite values at all (`may_be_non_finite`, from the session): a
  // scan of every activation costs a third of MobileNetV2's float time.
  std::optional<Status> RunFast(const ConvGeometry& g, const Shape& x_shape, const Tensor& x, const Tensor& w,
                                const Tensor* b, const Tensor* sum, Tensor& y, bool may_be_non_finite) {
    const bool separate =
        post_.LosesNaN() && may_be_non_finite &&
        !(AllFinite(&x) && AllFinite(sum) && AllFinite(b) && (const_w_.defined() ? const_w_finite_ : AllFinite(&w)));
    auto& cache = separate ? plans_without_activation_ : plans_;
    auto plan = cache.Get(du::ShapeKey({&x.shape(), &w.shape(), b ? &b->shape() : nullptr}),
                          [&] { return MakePlan(g, x_shape, w.shape(), b != nullptr, !separate); });
    if (!plan) return std::nullopt;
    Status s = Execute(*plan, x, w, b, sum, y);
    if (s.ok() && separate) {
      float* p = y.data<float>();
      const int64_t n = y.numel();
      for (int64_t i = 0; i < n; ++i) p[i] = post_.Tail(p[i]);
    }
    return s;
  }

  // The reference on channels-last tensors: through channels-first copies.
  Status RunChannelsLastReference(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* b,
                                  const Tensor* sum, Tensor& y) {
    const Tensor xc = ToChannelsFirst(x);
    Tensor sc;
    if (sum) sc = ToChannelsFirst(*sum);
    Tensor yc(x.dtype(), g.y_shape);
    if (x.dtype() == DType::kFloat64) {
      ConvReference(g, xc.data<double>(), w.data<double>(), b ? b->data<double>() : nullptr, yc.data<double>());
      SEQTO_RETURN_IF_ERROR(ApplyPostOpsReference<double>(post_, sum ? &sc : nullptr, yc));
    } else {
      ConvReference(g, xc.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr, yc.data<float>());
      SEQTO_RETURN_IF_ERROR(ApplyPostOpsReference<float>(post_, sum ? &sc : nullptr, yc));
    }
    CopyToChannelsLast(yc, y);
    return Status::Ok();
  }

  // Builds the oneDNN primitive for one shape (x: N x C x spatial, whatever the
  // kernel's layout); null when oneDNN cannot do it.
  std::shared_ptr<ConvPlan> MakePlan(const ConvGeometry& g, const Shape& x, const Shape& w, bool with_bias,
                                     bool with_activation = true) {
    try {
      Shape wei_dims = w;
      if (g.group > 1) {
        wei_dims = {g.group, w[0] / g.group};
        wei_dims.insert(wei_dims.end(), w.begin() + 1, w.end());
      }
      const du::DnnlWindow win = du::ToDnnlWindow(g.dims);
      // A pointwise conv (1x1, stride 1, no pads, one group) is a plain GEMM on NCHW:
      // as fast as oneDNN's blocked kernels, without their reorders, once the GEMM
      // is wide enough (measured: 56x56 and 28x28 win, 14x14 ties, 7x7 loses).
      bool pointwise = g.group == 1;
      int64_t positions = 1;
      for (const auto& d : g.dims) {
        pointwise = pointwise && d.kernel == 1 && d.stride == 1 && d.pad_begin == 0 && d.pad_end == 0;
        positions *= d.out;
      }
      const du::Layout own = channels_last_ ? du::Layout::kNhwc : du::Layout::kPlain;
      const du::ConvIo io{du::ActivationDesc(x, own), du::PlainDesc(wei_dims), du::ActivationDesc(g.y_shape, own)};
      const memory::desc bias_md = with_bias ? du::PlainDesc({g.out_channels}) : memory::desc();
      std::vector<du::ConvArg> extra_args;  // the bias, then the fake quantization's scale
      if (with_bias) extra_args.push_back({DNNL_ARG_BIAS, bias_md});
      const memory::desc scale_md = du::PlainDesc(Shape(x.size(), 1));
      int fake_quant_arg = 0;
      dnnl::primitive_attr attr = du::UserScratchpadAttr();
      {
        dnnl::post_ops ops;
        if (post_.sum) ops.append_sum(1.f);
        if (with_activation && post_.fake_quant) {
          // y / scale as a division (a binary post-op on a one-element scale: eltwise
          // linear would multiply by 1 / scale, which rounds differently), then clamp,
          // round half to even and the dequantizing product, each as exact as the
          // unfused ops. The activation (Relu or Clip: FakeQuantBounds) becomes part
          // of the clamp: oneDNN 2.6's brgemm convolutions skip a binary post-op that
          // follows an eltwise one (measured: Clip -> binary_div ignored the divisor).
          const auto [lo, hi] = post_.FakeQuantBounds();
          fake_quant_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(ops.len()) | DNNL_ARG_SRC_1;
          ops.append_binary(dnnl::algorithm::binary_div, scale_md);
          ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, lo, hi);
          ops.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
          ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, post_.fq_scale, 0.f);
        } else {
          switch (with_activation ? post_.activation : PostOps::Activation::kNone) {
            case PostOps::Activation::kRelu:
              ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
              break;
            case PostOps::Activation::kClip:
              ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, post_.p0, post_.p1);
              break;
            case PostOps::Activation::kLeakyRelu:
              ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, post_.p0, 0.f);
              break;
            default:
              break;
          }
        }
        attr.set_post_ops(ops);
      }
      auto make_pd = [&](du::Layout layout) {
        const memory::desc src = du::ActivationDesc(x, layout);
        const memory::desc dst = du::ActivationDesc(g.y_shape, layout);
        const memory::desc wei = du::AnyDesc(wei_dims);
        auto desc = with_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                dnnl::algorithm::convolution_direct, src, wei, bias_md,
                                                                dst, win.strides, win.dilations, win.pad_l, win.pad_r)
                              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                dnnl::algorithm::convolution_direct, src, wei, dst,
                                                                win.strides, win.dilations, win.pad_l, win.pad_r);
        return dnnl::convolution_forward::primitive_desc(desc, attr, du::Engine());
      };
      // oneDNN applies post-ops to the GEMM-based NCHW conv in a separate slow pass, so a
      // fused conv always prefers the blocked layouts (measured on the bench CNNs).
      if (fake_quant_arg != 0) extra_args.push_back({fake_quant_arg, scale_md});
      const bool has_post_ops = post_.sum || (with_activation && post_.HasTail());
      const auto layouts = du::ConvLayouts(pointwise && positions >= 400 && !has_post_ops, g.in_channels,
                                           g.out_channels, channels_last_);
      // For a pointwise conv on NCHW, "im2col + GEMM" is just the GEMM.
      dnnl::convolution_forward::primitive_desc pd;
      if (!du::PickConvPd(pd, layouts, make_pd, [&](du::Layout l) { return pointwise && l == du::Layout::kPlain; }))
        return nullptr;
      return std::make_shared<ConvPlan>(ConvPlan{
          du::ConvPrimitive(pd, io, const_w_.defined() ? const_w_.raw() : nullptr, &packed_w_, post_.sum, extra_args),
          with_bias, fake_quant_arg != 0});
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  Status Execute(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor* b, const Tensor* sum,
                 Tensor& y) {
    return du::Guard("Conv", [&] {
      const void* extra[2];
      size_t n = 0;
      if (plan.has_bias) extra[n++] = b->raw();
      if (plan.fake_quant) extra[n++] = &post_.fq_scale;
      plan.conv.Run(x.raw(), w.raw(), y.raw(), sum ? sum->raw() : nullptr, std::span<const void* const>(extra, n));
    });
  }

  du::WindowAttrs attrs_;
  int64_t group_;
  PostOps post_;
  bool channels_last_;
  bool reference_only_;
  Tensor const_w_;   // constant W (undefined when W is not constant)
  memory packed_w_;  // const_w_ as the latest plan wants it (packed at creation)
  bool const_w_finite_ = true;
  du::ShapeCache<ConvPlan> plans_;
  du::ShapeCache<ConvPlan> plans_without_activation_;  // for inputs with NaN or infinity
};

}  // namespace

namespace {
Expected<std::unique_ptr<Kernel>> CreateConv(const KernelInit& init, bool fused) {
  SEQTO_ASSIGN_OR_RETURN(du::WindowAttrs attrs, du::ParseWindowAttrs(init.node, false));
  SEQTO_ASSIGN_OR_RETURN(int64_t group, init.node.attr_int("group", 1));
  if (group < 1) return UserError("attribute 'group' is " + std::to_string(group) + ", expected >= 1");
  PostOps post;
  int64_t channels_last = 0;
  if (fused) {
    SEQTO_ASSIGN_OR_RETURN(post, ParsePostOps(init.node));
    SEQTO_ASSIGN_OR_RETURN(channels_last, init.node.attr_int("channels_last", 0));
    if (channels_last != 0 && channels_last != 1)
      return UserError("attribute 'channels_last' is " + std::to_string(channels_last) + ", expected 0 or 1");
  }
  auto kernel = std::make_unique<ConvKernel>(std::move(attrs), group, post, channels_last == 1, init.reference_only);
  SEQTO_RETURN_IF_ERROR(kernel->Prepare(init.constant(1), init.node.inputs.size() > 2 && !init.node.inputs[2].empty()));
  return std::unique_ptr<Kernel>(std::move(kernel));
}
}  // namespace

void RegisterConv(OpRegistry& r) {
  r.Register({"Conv", "", 1, [](const KernelInit& init) { return CreateConv(init, /*fused=*/false); }});
  r.Register({"FusedConv", "com.seqto", 1, [](const KernelInit& init) { return CreateConv(init, /*fused=*/true); }});
}

}  // namespace seqto::ops
