// com.seqto.QLinearConv: ONNX QLinearConv (same inputs and attributes) whose 8-bit
// output is then clamped to [y_min, y_max] (both optional): what the QDQ fusion
// pass makes of
//   DQ(x), DQ(w const), [DQ(b)] -> Conv -> [Relu | Clip] -> Q(y)
// (see ops/quant/fused_util.h for why the clamp is exact).
//
// Two paths:
//   - native (the fast one; 2-D convs whose weights, scales, zero points and bias
//     are constants, int8 weights with zero point 0 as quantizers write them, on a
//     CPU where oneDNN's int8 kernels are exact): one oneDNN int8 convolution that
//     also requantizes, writing 8-bit output in its preferred layout, reordered to
//     NCHW (one byte per element) and clamped; with a nonzero y_zp it rounds (a
//     post-op) before it adds y_zp;
//   - otherwise the built-in QLinearConv kernel (exact int32 accumulation, its own
//     requantization pass), then the clamp.
// With channels_last = 1 (set by the layout pass, rewrite/channels_last.cc), X and Y
// are N x H x W x C: the native path reads and writes them without a reorder, the
// exact path runs on channels-first copies.
// Both compute y = clamp(round(float(acc + bias) * (x_scale * w_scale[m] / y_scale))
// + y_zp) on the exact int32 accumulator with round half to even, bit for bit as
// ONNX Runtime's QLinearConv (MlasRequantizeOutput) does. oneDNN adds its
// destination zero point in float32 before its final rounding, which alone would
// move values within float rounding of a .5 tie (and every exact tie, for an odd
// y_zp) to the other side: one quantum, on a few elements in a million. That is
// too many: a per-tensor MobileNetV2 amplifies a handful of such differences into a
// different top-1 class on some photos (docs/design.md, section 2). So the native
// path rounds first, with an eltwise_round post-op (half to even, like the final
// conversion); y_zp is then added to an integer, exactly. reference_only sessions
// take the exact path.
#include <unordered_map>

#include "ops/nn/dnnl_util.h"
#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

enum Input { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kBias };

// The constant parameters the native path needs, read once.
struct NativeParams {
  int32_t x_zp = 0, y_zp = 0;
  DType y_type = DType::kUInt8;
  std::vector<float> scales;    // x_scale * w_scale[m] / y_scale: one, or one per output channel
  std::vector<int32_t> bias;    // [M] (zeros without a bias)
  std::vector<int8_t> weights;  // W as oneDNN's [G, M/G, C/G, kh, kw] (the same bytes as [M, C/G, kh, kw])
  Shape w_shape;
};

struct NativePlan {
  du::ConvPrimitive conv;
  std::vector<const void*> args;  // the data of conv's extra arguments (constants in NativeParams)
};

memory::data_type Dt(DType t) { return t == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8; }

class QLinearConvClampKernel final : public Kernel {
 public:
  Status Run(KernelContext& ctx) override {
    if (native_) {
      SEQTO_ASSIGN_OR_RETURN(bool done, RunNative(ctx));
      if (done) return Clamp(ctx.output(0));
    }
    if (channels_last_) return RunChannelsLastExact(ctx);
    SEQTO_RETURN_IF_ERROR(conv_->Run(ctx));
    return Clamp(ctx.output(0));
  }

  // Sets up the native path when the node qualifies (else leaves native_ empty).
  void PrepareNative(const KernelInit& init) {
    if (init.reference_only || !quant::ExactInt8Isa()) return;
    const Tensor* w = init.constant(kW);
    const Tensor* xs = init.constant(kXScale);
    const Tensor* ws = init.constant(kWScale);
    const Tensor* ys = init.constant(kYScale);
    if (!w || !xs || !ws || !ys || w->dtype() != DType::kInt8 || w->rank() != 4 || w->dim(0) % group_ != 0) return;
    auto present = [&](int i) { return i < static_cast<int>(init.node.inputs.size()) && !init.node.inputs[i].empty(); };
    for (int i : {kXZp, kWZp, kYZp, kBias})
      if (present(i) && !init.constant(i)) return;  // varies per run: the exact path handles it
    const int64_t m = w->dim(0);
    auto p = std::make_shared<NativeParams>();
    auto scalar_f32 = [](const Tensor* t) { return t->dtype() == DType::kFloat32 && t->numel() == 1; };
    if (!scalar_f32(xs) || !scalar_f32(ys) || ws->dtype() != DType::kFloat32 || (ws->numel() != 1 && ws->numel() != m))
      return;
    if (present(kXZp)) {
      const Tensor* t = init.constant(kXZp);
      if (!quant::Is8Bit(t->dtype()) || t->numel() != 1) return;
      p->x_zp = quant::ReadInt32s(*t)[0];
    }
    if (present(kWZp)) {
      const Tensor* t = init.constant(kWZp);
      if (t->dtype() != DType::kInt8) return;
      for (int32_t v : quant::ReadInt32s(*t))
        if (v != 0) return;  // asymmetric weights: the exact path folds their zero point
    }
    if (present(kYZp)) {
      const Tensor* t = init.constant(kYZp);
      if (!quant::Is8Bit(t->dtype()) || t->numel() != 1) return;
      p->y_type = t->dtype();
      p->y_zp = quant::ReadInt32s(*t)[0];
    } else {
      p->y_type = DType::kUInt8;  // decided per run from X's type otherwise: keep it simple
      return;
    }
    const float x_scale = xs->data<float>()[0], y_scale = ys->data<float>()[0];
    for (int64_t i = 0; i < ws->numel(); ++i) p->scales.push_back(x_scale * ws->data<float>()[i] / y_scale);
    p->bias.assign(static_cast<size_t>(m), 0);
    if (present(kBias)) {
      const Tensor* b = init.constant(kBias);
      if (b->dtype() != DType::kInt32 || b->rank() != 1 || b->dim(0) != m) return;
      std::copy(b->data<int32_t>(), b->data<int32_t>() + m, p->bias.begin());
    }
    p->weights.assign(w->data<int8_t>(), w->data<int8_t>() + w->numel());
    p->w_shape = w->shape();
    native_ = std::move(p);
  }

  ir::Node conv_node_;  // the plain QLinearConv node conv_ was built from
  std::unique_ptr<Kernel> conv_;
  quant::OutputClamp clamp_;
  du::WindowAttrs attrs_;
  int64_t group_ = 1;
  bool channels_last_ = false;

 private:
  // The exact path on channels-last tensors: the inner QLinearConv on a
  // channels-first copy of X, its result copied back channels-last.
  Status RunChannelsLastExact(KernelContext& ctx) {
    const Tensor& x = ctx.input(kX);
    if (x.rank() < 3)
      return InputError(kX, "X has shape " + ShapeToString(x.shape()) + ", expected N x spatial x C (channels_last)");
    const Tensor xc = ToChannelsFirst(x);
    std::vector<const Tensor*> inputs;
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
    inputs[kX] = &xc;
    quant::InnerContext inner(1);
    inner.SetInputs(std::move(inputs));
    SEQTO_RETURN_IF_ERROR(conv_->Run(inner));
    const Tensor& yc = inner.output(0);
    Tensor& y = ctx.Allocate(0, yc.dtype(), ChannelsLastShape(yc.shape()));
    CopyToChannelsLast(yc, y);
    return Clamp(y);
  }

  Status Clamp(Tensor& y) const {
    if (!clamp_.NoOpFor(y.dtype())) quant::ClampInPlace(y, clamp_.lo, clamp_.hi);
    return Status::Ok();
  }

  std::shared_ptr<NativePlan> MakePlan(const Shape& x, DType x_type, const std::vector<du::WindowDim>& dims) {
    const NativeParams& p = *native_;
    const Shape& ws = p.w_shape;
    try {
      const int64_t m = ws[0];
      Shape wei_dims = group_ == 1 ? ws : Shape{group_, m / group_, ws[1], ws[2], ws[3]};
      Shape dst_dims{x[0], m};
      for (const auto& d : dims) dst_dims.push_back(d.out);
      const du::DnnlWindow win = du::ToDnnlWindow(dims, /*reached_pad_end=*/true);
      const du::Layout own = channels_last_ ? du::Layout::kNhwc : du::Layout::kPlain;
      const du::ConvIo io{du::ActivationDesc(x, own, Dt(x_type)), du::PlainDesc(wei_dims, memory::data_type::s8),
                          du::ActivationDesc(dst_dims, own, Dt(p.y_type))};
      const memory::desc bias_md({m}, memory::data_type::s32, memory::format_tag::x);
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           du::AnyDesc(x, Dt(x_type)), du::AnyDesc(wei_dims, memory::data_type::s8),
                                           bias_md, du::AnyDesc(dst_dims, Dt(p.y_type)), win.strides, win.dilations,
                                           win.pad_l, win.pad_r);
      // oneDNN's own scratchpad: with a user scratchpad, oneDNN 2.6 crashed creating
      // some int8 convs (seen under AddressSanitizer; dnnl_util.h, UserScratchpadAttr).
      dnnl::primitive_attr attr;
      attr.set_output_scales(p.scales.size() == 1 ? 0 : 1 << 1, p.scales);
      std::vector<du::ConvArg> args{{DNNL_ARG_BIAS, bias_md}};
      std::vector<const void*> data{p.bias.data()};
      const memory::desc zp_md({1}, memory::data_type::s32, memory::format_tag::x);
      if (p.x_zp != 0) {
        attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
        args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_md});
        data.push_back(&p.x_zp);
      }
      if (p.y_zp != 0) {
        // Round before y_zp is added (see the top of the file).
        dnnl::post_ops round;
        round.append_eltwise(1.f, dnnl::algorithm::eltwise_round, 0.f, 0.f);
        attr.set_post_ops(round);
        attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
        args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, zp_md});
        data.push_back(&p.y_zp);
      }
      dnnl::convolution_forward::primitive_desc pd;
      if (!du::TryMakePd(pd, [&] { return dnnl::convolution_forward::primitive_desc(desc, attr, du::Engine()); }))
        return nullptr;
      if (du::ImplName(pd).find("ref") != std::string::npos) return nullptr;  // the exact path is no slower
      return std::make_shared<NativePlan>(
          NativePlan{du::ConvPrimitive(pd, io, p.weights.data(), &packed_weights_, false, std::move(args)), data});
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  // The native path; false when this input does not fit it (the exact path runs).
  Expected<bool> RunNative(KernelContext& ctx) {
    const NativeParams& p = *native_;
    const Tensor& x_in = ctx.input(kX);
    if (!quant::Is8Bit(x_in.dtype()) || x_in.rank() != 4) return false;
    // The N x C x H x W view (the shape oneDNN is given whatever the layout).
    const Shape x_shape = channels_last_ ? ChannelsFirstShape(x_in.shape()) : x_in.shape();
    if (x_shape[1] != p.w_shape[1] * group_ || x_shape[1] == 0) return false;
    if (!attrs_.kernel_shape.empty() && attrs_.kernel_shape != std::vector<int64_t>{p.w_shape[2], p.w_shape[3]})
      return false;
    auto dims = du::ResolveWindow(attrs_, Shape{x_shape[2], x_shape[3]}, {p.w_shape[2], p.w_shape[3]});
    if (!dims) return false;  // the exact path reports it
    du::CacheKey key = du::ShapeKey({&x_shape});
    key.push_back(static_cast<int64_t>(x_in.dtype()));
    auto plan = plans_.Get(key, [&] { return MakePlan(x_shape, x_in.dtype(), *dims); });
    if (!plan) return false;
    Shape y_shape{x_shape[0], p.w_shape[0], (*dims)[0].out, (*dims)[1].out};
    Tensor& y = ctx.Allocate(0, p.y_type, channels_last_ ? ChannelsLastShape(y_shape) : y_shape);
    const Tensor& x = x_in;
    if (y.numel() == 0) return true;
    SEQTO_RETURN_IF_ERROR(
        du::Guard("QLinearConv (com.seqto)", [&] { plan->conv.Run(x.raw(), nullptr, y.raw(), nullptr, plan->args); }));
    quant::CountFastRun();
    return true;
  }

  std::shared_ptr<const NativeParams> native_;
  memory packed_weights_;
  du::ShapeCache<NativePlan> plans_;
};

Expected<std::unique_ptr<Kernel>> MakeQLinearConvClamp(const KernelInit& init) {
  auto kernel = std::make_unique<QLinearConvClampKernel>();
  SEQTO_ASSIGN_OR_RETURN(kernel->clamp_, quant::OutputClamp::Parse(init.node));
  kernel->conv_node_ = init.node;
  kernel->conv_node_.domain = "";
  kernel->conv_node_.attributes.erase("y_min");
  kernel->conv_node_.attributes.erase("y_max");
  kernel->conv_node_.attributes.erase("channels_last");
  SEQTO_ASSIGN_OR_RETURN(kernel->conv_,
                         quant::MakeInnerKernel(kernel->conv_node_, 10, init.constant_inputs, init.reference_only));
  SEQTO_ASSIGN_OR_RETURN(kernel->attrs_, du::ParseWindowAttrs(init.node, false));
  SEQTO_ASSIGN_OR_RETURN(kernel->group_, init.node.attr_int("group", 1));
  if (kernel->group_ < 1)
    return UserError("attribute 'group' is " + std::to_string(kernel->group_) + ", expected >= 1");
  SEQTO_ASSIGN_OR_RETURN(int64_t channels_last, init.node.attr_int("channels_last", 0));
  if (channels_last != 0 && channels_last != 1)
    return UserError("attribute 'channels_last' is " + std::to_string(channels_last) + ", expected 0 or 1");
  kernel->channels_last_ = channels_last == 1;
  kernel->PrepareNative(init);
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void RegisterQLinearConvClamp(OpRegistry& r) { r.Register({"QLinearConv", "com.seqto", 1, MakeQLinearConvClamp}); }

}  // namespace seqto::ops
