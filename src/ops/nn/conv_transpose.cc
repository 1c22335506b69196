// ConvTranspose: the gradient of Conv with respect to its input, over 1 to 3
// spatial dims, with groups, strides, dilations, pads, output_padding,
// output_shape and auto_pad.
//   X: N x C x D1..Dk, W: C x M/group x K1..Kk, B: M (optional), Y: N x M x O1..Ok,
//   every X[n, c, i] adds X * W[c, m, k] to Y[n, m, i * stride + k * dilation - pad_begin].
// With output_shape (or SAME_*) the pads are derived from the total padding as
// the ONNX spec and its test data say: SAME_UPPER puts the odd unit at the end,
// SAME_LOWER and NOTSET at the beginning. (ONNX Runtime splits the other way.)
// Reference: scatter loops into a double accumulator (float32, float64).
// Fast (float32): a oneDNN deconvolution per input shape, constant W prepacked once.
// A 2-D ConvTranspose whose kernel equals its stride (no padding, dilation or groups:
// the 2x2 stride-2 upsamplings of segmentation and text-detection heads) writes one
// separate kh x kw block of Y per input pixel, so on channels-last data (or with one
// output channel) it runs as one batched oneDNN matmul writing Y in place (BlockPlan):
// oneDNN's deconvolution padded M to 16 channels in its blocked layout (16 times the
// work for the one-channel output of a text detector) and reordered around it, and
// on channels-last data took twice the matmul's time for the detector's 24 channels.
//
// Also registers com.seqto.ConvTranspose, ConvTranspose with channels_last (0 or 1):
// X and Y are N x D1..Dk x C (the layout pass, rewrite/channels_last.cc, sets it so
// that the upsampling stays inside a channels-last conv region); W stays as it is.
#include <algorithm>
#include <unordered_map>

#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

struct ConvTransposeAttrs {
  du::WindowAttrs window;
  int64_t group = 1;
  std::vector<int64_t> output_padding, output_shape;
  bool channels_last = false;
};

struct ConvTransposeGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  std::vector<du::WindowDim> dims;  // `in`/`out` are X's and Y's extents
  Shape y_shape;
};

Expected<ConvTransposeGeometry> ResolveConvTranspose(const ConvTransposeAttrs& a, const Shape& x, const Shape& w) {
  if (x.size() < 3 || x.size() > 5)
    return InputError(0, "X has shape " + ShapeToString(x) + ", expected rank 3 to 5 (N x C x 1-3 spatial dims)");
  if (w.size() != x.size())
    return InputError(
        1, "W has shape " + ShapeToString(w) + ", expected rank " + std::to_string(x.size()) + " (the rank of X)");
  if (w[0] != x[1])
    return InputError(1, "W has shape " + ShapeToString(w) + ", expected dim 0 = C = " + std::to_string(x[1]));
  if (x[1] % a.group != 0)
    return InputError(0,
                      "X has " + std::to_string(x[1]) + " channels, not divisible by group " + std::to_string(a.group));
  const size_t n = x.size() - 2;
  ConvTransposeGeometry g;
  g.batch = x[0];
  g.in_channels = x[1];
  g.out_channels = w[1] * a.group;
  g.group = a.group;
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  const auto& wa = a.window;
  if (!wa.kernel_shape.empty() && wa.kernel_shape != kernel)
    return UserError("attribute 'kernel_shape' does not match W's shape " + ShapeToString(w));
  auto check = [&](const std::vector<int64_t>& v, size_t expected, const char* name) -> Status {
    if (!v.empty() && v.size() != expected)
      return UserError("attribute '" + std::string(name) + "' has " + std::to_string(v.size()) + " values, expected " +
                       std::to_string(expected));
    return Status::Ok();
  };
  SEQTO_RETURN_IF_ERROR(check(wa.strides, n, "strides"));
  SEQTO_RETURN_IF_ERROR(check(wa.dilations, n, "dilations"));
  SEQTO_RETURN_IF_ERROR(check(wa.pads, 2 * n, "pads"));
  SEQTO_RETURN_IF_ERROR(check(a.output_padding, n, "output_padding"));
  // output_shape may list the spatial dims only, or all dims.
  std::vector<int64_t> out_shape = a.output_shape;
  if (out_shape.size() == n + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  SEQTO_RETURN_IF_ERROR(check(out_shape, n, "output_shape"));
  g.dims.resize(n);
  for (size_t i = 0; i < n; ++i) {
    du::WindowDim& d = g.dims[i];
    d.in = x[i + 2];
    d.kernel = kernel[i];
    d.stride = wa.strides.empty() ? 1 : wa.strides[i];
    d.dilation = wa.dilations.empty() ? 1 : wa.dilations[i];
    const int64_t adj = a.output_padding.empty() ? 0 : a.output_padding[i];
    const int64_t full = (d.in - 1) * d.stride + adj + d.extent();  // Y's extent without padding
    const bool same = wa.auto_pad == "SAME_UPPER" || wa.auto_pad == "SAME_LOWER";
    if (!out_shape.empty() || same) {
      d.out = !out_shape.empty() ? out_shape[i] : d.in * d.stride;
      const int64_t total = std::max<int64_t>(0, full - d.out);
      d.pad_begin = wa.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      if (wa.auto_pad == "NOTSET" && !wa.pads.empty()) {
        d.pad_begin = wa.pads[i];
        d.pad_end = wa.pads[i + n];
      }
      d.out = full - d.pad_begin - d.pad_end;
    }
    // pad_end as oneDNN sees it: what makes its output extent equal d.out (it may
    // be negative: output_padding or output_shape extend Y past the last tap).
    d.pad_end = (d.in - 1) * d.stride + d.extent() - d.pad_begin - d.out;
    if (d.out <= 0)
      return UserError("spatial dim " + std::to_string(i) + " of the output would be " + std::to_string(d.out) +
                       " (pads too large)");
  }
  g.y_shape = {g.batch, g.out_channels};
  for (const auto& d : g.dims) g.y_shape.push_back(d.out);
  return g;
}

template <typename T>
void ConvTransposeReference(const ConvTransposeGeometry& g, const T* x, const T* w, const T* b, T* y) {
  const auto d = du::To3d(g.dims);
  const int64_t in_vol = d[0].in * d[1].in * d[2].in;
  const int64_t out_vol = d[0].out * d[1].out * d[2].out;
  const int64_t k_vol = d[0].kernel * d[1].kernel * d[2].kernel;
  const int64_t cin_g = g.in_channels / g.group, cout_g = g.out_channels / g.group;
  ParallelFor(g.batch * g.out_channels, in_vol * cin_g * k_vol, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(out_vol);
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.out_channels, m = nm % g.out_channels, grp = m / cout_g, oc = m % cout_g;
      std::fill(acc.begin(), acc.end(), b ? static_cast<double>(b[m]) : 0.0);
      for (int64_t c = 0; c < cin_g; ++c) {
        const int64_t ic = grp * cin_g + c;
        const T* xc = x + (n * g.in_channels + ic) * in_vol;
        const T* wc = w + (ic * cout_g + oc) * k_vol;
        for (int64_t i0 = 0; i0 < d[0].in; ++i0)
          for (int64_t i1 = 0; i1 < d[1].in; ++i1)
            for (int64_t i2 = 0; i2 < d[2].in; ++i2) {
              const double xv = static_cast<double>(xc[(i0 * d[1].in + i1) * d[2].in + i2]);
              for (int64_t k0 = 0; k0 < d[0].kernel; ++k0) {
                const int64_t o0 = i0 * d[0].stride + k0 * d[0].dilation - d[0].pad_begin;
                if (o0 < 0 || o0 >= d[0].out) continue;
                for (int64_t k1 = 0; k1 < d[1].kernel; ++k1) {
                  const int64_t o1 = i1 * d[1].stride + k1 * d[1].dilation - d[1].pad_begin;
                  if (o1 < 0 || o1 >= d[1].out) continue;
                  for (int64_t k2 = 0; k2 < d[2].kernel; ++k2) {
                    const int64_t o2 = i2 * d[2].stride + k2 * d[2].dilation - d[2].pad_begin;
                    if (o2 < 0 || o2 >= d[2].out) continue;
                    acc[(o0 * d[1].out + o1) * d[2].out + o2] +=
                        xv * static_cast<double>(wc[(k0 * d[1].kernel + k1) * d[2].kernel + k2]);
                  }
                }
              }
            }
      }
      T* ym = y + nm * out_vol;
      for (int64_t i = 0; i < out_vol; ++i) ym[i] = static_cast<T>(acc[i]);
    }
  });
}

struct ConvTransposePlan {
  du::ConvPrimitive deconv;
  bool has_bias;
};

// True when every input pixel writes its own block of Y (see the top): 2-D, one
// group, kernel == stride, no dilation, no padding, Y exactly in * stride.
bool WritesSeparateBlocks(const ConvTransposeGeometry& g) {
  if (g.dims.size() != 2 || g.group != 1) return false;
  for (const auto& d : g.dims)
    if (d.kernel != d.stride || d.dilation != 1 || d.pad_begin != 0 || d.pad_end != 0 || d.out != d.in * d.stride)
      return false;
  return true;
}

// WritesSeparateBlocks on channels-last data: the row a of the kh x kw block of
// pixel (i, j) is kw * M contiguous values of Y's row i * kh + a, so Y, seen as
// [N, H, kh, W, kw * M], is a batched matmul over (n, i, a) of X's row i [W x C] and
// W's row a [C x kw * M], written in place. (One output channel is the same in
// either layout, so a channels-first Y with M = 1 runs this way too.)
struct BlockPlan {
  std::shared_ptr<du::MatmulPlan> matmul;
  int64_t m = 0, run = 0;  // run = kw * M, the bias per block row element
};

// W [C, M, kh, kw] as [C, kh, kw, M]: row a's weights are a [C, kw * M] view.
Tensor BlockWeights(const Tensor& w) {
  const int64_t c = w.dim(0), m = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  Tensor out(DType::kFloat32, {c, kh * kw * m});
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t mi = 0; mi < m; ++mi)
      for (int64_t k = 0; k < kh * kw; ++k) dst[(ci * kh * kw + k) * m + mi] = src[(ci * m + mi) * kh * kw + k];
  return out;
}

class ConvTransposeKernel final : public Kernel {
 public:
  ConvTransposeKernel(ConvTransposeAttrs attrs, bool reference_only)
      : attrs_(std::move(attrs)), reference_only_(reference_only) {}

  Status Prepare(const Tensor* w, bool with_bias) {
    if (!w) return Status::Ok();
    const_w_ = *w;
    if (w->rank() < 3 || w->rank() > 5)
      return InputError(1, "W has shape " + ShapeToString(w->shape()) + ", expected rank 3 to 5");
    if (w->dim(0) % attrs_.group != 0)
      return InputError(1, "W has shape " + ShapeToString(w->shape()) + ", expected dim 0 divisible by group " +
                               std::to_string(attrs_.group));
    if (reference_only_ || w->dtype() != DType::kFloat32) return Status::Ok();
    if (w->rank() == 4 && attrs_.group == 1) block_w_ = BlockWeights(*w);
    Shape x{1, w->dim(0)};
    for (int64_t i = 2; i < w->rank(); ++i) x.push_back(28);
    auto g = ResolveConvTranspose(attrs_, x, w->shape());
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
    if (attrs_.channels_last && x.rank() != w.rank())
      return InputError(0, "X has shape " + ShapeToString(x.shape()) + ", expected rank " + std::to_string(w.rank()) +
                               " (N x spatial x C: channels_last)");
    // Geometry is always worked out on the N x C x spatial view.
    const Shape x_shape = attrs_.channels_last ? ChannelsFirstShape(x.shape()) : x.shape();
    SEQTO_ASSIGN_OR_RETURN(ConvTransposeGeometry g, ResolveConvTranspose(attrs_, x_shape, w.shape()));
    if (b) {
      if (b->dtype() != x.dtype()) return InputError(2, "B has type " + DTypeName(b->dtype()) + ", expected X's type");
      if (b->rank() != 1 || b->dim(0) != g.out_channels)
        return InputError(2, "B has shape " + ShapeToString(b->shape()) + ", expected " +
                                 std::to_string(g.out_channels) + " (the output channels)");
    }
    Tensor& y = ctx.Allocate(0, x.dtype(), attrs_.channels_last ? ChannelsLastShape(g.y_shape) : g.y_shape);
    if (y.numel() == 0) return Status::Ok();
    if (!reference_only_ && g.in_channels > 0 && x.dtype() == DType::kFloat32) {
      const du::CacheKey key = du::ShapeKey({&x.shape(), &w.shape(), b ? &b->shape() : nullptr});
      if (block_w_.defined() && WritesSeparateBlocks(g) && (attrs_.channels_last || g.out_channels == 1)) {
        auto plan = block_plans_.Get(key, [&] { return MakeBlockPlan(g, b != nullptr); });
        if (plan) return RunBlocks(*plan, x, b, y);
      }
      auto plan = plans_.Get(key, [&] { return MakePlan(g, x_shape, w.shape(), b != nullptr); });
      if (plan) return Execute(*plan, x, w, b, y);
    }
    if (attrs_.channels_last) {  // the reference on channels-first copies
      const Tensor xc = ToChannelsFirst(x);
      Tensor yc(y.dtype(), g.y_shape);
      Reference(g, xc, w, b, yc);
      CopyToChannelsLast(yc, y);
      return Status::Ok();
    }
    Reference(g, x, w, b, y);
    return Status::Ok();
  }

 private:
  static void Reference(const ConvTransposeGeometry& g, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
    if (x.dtype() == DType::kFloat64)
      ConvTransposeReference(g, x.data<double>(), w.data<double>(), b ? b->data<double>() : nullptr, y.data<double>());
    else
      ConvTransposeReference(g, x.data<float>(), w.data<float>(), b ? b->data<float>() : nullptr, y.data<float>());
  }

  std::shared_ptr<BlockPlan> MakeBlockPlan(const ConvTransposeGeometry& g, bool with_bias) {
    const int64_t n = g.batch, c = g.in_channels, m = g.out_channels, h = g.dims[0].in, w = g.dims[1].in;
    const int64_t kh = g.dims[0].kernel, kw = g.dims[1].kernel, run = kw * m;
    auto p = std::make_shared<BlockPlan>();
    p->m = m;
    p->run = run;
    du::MatmulSpec spec;
    // One batched matmul over (n, i, a): X as [N, H, 1, W, C] (a strided view of
    // channels-first data too), broadcast over a; W as [1, 1, kh, C, kw * M]; Y as
    // the dense [N, H, kh, W, kw * M] it is.
    spec.src = attrs_.channels_last ? du::StridedDesc({n, h, 1, w, c}, {h * w * c, w * c, w * c, c, 1})
                                    : du::StridedDesc({n, h, 1, w, c}, {c * h * w, w, w, 1, h * w});
    spec.dst = du::PlainDesc({n, h, kh, w, run});
    spec.weights = du::StridedDesc({1, 1, kh, c, run}, {kh * c * run, kh * c * run, run, kh * run, 1});
    if (with_bias) spec.bias = du::PlainDesc({1, 1, 1, 1, run});
    p->matmul = du::MakeMatmul(spec, block_w_.data<float>(), &packed_block_w_);
    if (!p->matmul) return nullptr;
    return p;
  }

  Status RunBlocks(const BlockPlan& p, const Tensor& x, const Tensor* b, Tensor& y) {
    std::vector<float> bias;  // B per element of a block row
    if (b)
      for (int64_t e = 0; e < p.run; ++e) bias.push_back(b->data<float>()[e % p.m]);
    return du::RunMatmul(*p.matmul, x.raw(), nullptr, b ? bias.data() : nullptr, y.raw());
  }

  std::shared_ptr<ConvTransposePlan> MakePlan(const ConvTransposeGeometry& g, const Shape& x, const Shape& w,
                                              bool with_bias) {
    try {
      // ONNX's W is (C, M/group, k...): as oneDNN's (G,) OC/G, IC/G, k... it is a
      // strided view.
      const int64_t cin_g = g.in_channels / g.group, cout_g = g.out_channels / g.group;
      const Shape kernel(w.begin() + 2, w.end());
      const int64_t k_vol = NumElements(kernel);
      Shape wei_dims{cout_g, cin_g};
      std::vector<int64_t> wei_strides{k_vol, cout_g * k_vol};
      if (g.group > 1) {
        wei_dims.insert(wei_dims.begin(), g.group);
        wei_strides.insert(wei_strides.begin(), cin_g * cout_g * k_vol);
      }
      const auto k_strides = ContiguousStrides(kernel);
      wei_dims.insert(wei_dims.end(), kernel.begin(), kernel.end());
      wei_strides.insert(wei_strides.end(), k_strides.begin(), k_strides.end());
      const du::DnnlWindow win = du::ToDnnlWindow(g.dims);
      const du::Layout own = attrs_.channels_last ? du::Layout::kNhwc : du::Layout::kPlain;
      const du::ConvIo io{du::ActivationDesc(x, own), du::StridedDesc(wei_dims, wei_strides),
                          du::ActivationDesc(g.y_shape, own)};
      const memory::desc bias_md = with_bias ? du::PlainDesc({g.out_channels}) : memory::desc();
      std::vector<du::ConvArg> bias_args;
      if (with_bias) bias_args.push_back({DNNL_ARG_BIAS, bias_md});
      auto make_pd = [&](du::Layout layout) {
        const memory::desc src = du::ActivationDesc(x, layout);
        const memory::desc dst = du::ActivationDesc(g.y_shape, layout);
        const memory::desc wei = du::AnyDesc(wei_dims);
        auto desc = with_bias ? dnnl::deconvolution_forward::desc(
                                    dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src, wei,
                                    bias_md, dst, win.strides, win.dilations, win.pad_l, win.pad_r)
                              : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                  dnnl::algorithm::deconvolution_direct, src, wei, dst,
                                                                  win.strides, win.dilations, win.pad_l, win.pad_r);
        return dnnl::deconvolution_forward::primitive_desc(desc, du::UserScratchpadAttr(), du::Engine());
      };
      // A slow generic kernel is acceptable only as the last resort.
      dnnl::deconvolution_forward::primitive_desc pd;
      if (!du::PickConvPd(pd, du::ConvLayouts(false, g.in_channels, g.out_channels, attrs_.channels_last), make_pd,
                          [](du::Layout) { return false; }))
        return nullptr;
      return std::make_shared<ConvTransposePlan>(ConvTransposePlan{
          du::ConvPrimitive(pd, io, const_w_.defined() ? const_w_.raw() : nullptr, &packed_w_, false, bias_args),
          with_bias});
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  Status Execute(const ConvTransposePlan& plan, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
    return du::Guard("ConvTranspose", [&] {
      const void* bias[1] = {plan.has_bias ? b->raw() : nullptr};
      plan.deconv.Run(x.raw(), w.raw(), y.raw(), nullptr, std::span<const void* const>(bias, plan.has_bias ? 1 : 0));
    });
  }

  ConvTransposeAttrs attrs_;
  bool reference_only_;
  Tensor const_w_;   // constant W (undefined when W is not constant)
  memory packed_w_;  // const_w_ as the latest plan wants it (packed at creation)
  du::ShapeCache<ConvTransposePlan> plans_;
  Tensor block_w_;         // constant float W as BlockWeights (2-D, one group), else undefined
  memory packed_block_w_;  // block_w_ as the block plans' matmul wants it
  du::ShapeCache<BlockPlan> block_plans_;
};

}  // namespace

static Expected<std::unique_ptr<Kernel>> CreateConvTranspose(const KernelInit& init, bool internal) {
  ConvTransposeAttrs a;
  if (internal) {
    SEQTO_ASSIGN_OR_RETURN(const int64_t channels_last, init.node.attr_int("channels_last", 0));
    if (channels_last != 0 && channels_last != 1)
      return UserError("attribute 'channels_last' is " + std::to_string(channels_last) + ", expected 0 or 1");
    a.channels_last = channels_last == 1;
  }
  SEQTO_ASSIGN_OR_RETURN(a.window, du::ParseWindowAttrs(init.node, false));
  SEQTO_ASSIGN_OR_RETURN(a.group, init.node.attr_int("group", 1));
  if (a.group < 1) return UserError("attribute 'group' is " + std::to_string(a.group) + ", expected >= 1");
  SEQTO_ASSIGN_OR_RETURN(a.output_padding, init.node.attr_ints("output_padding"));
  SEQTO_ASSIGN_OR_RETURN(a.output_shape, init.node.attr_ints("output_shape"));
  for (int64_t v : a.output_padding)
    if (v < 0) return UserError("attribute 'output_padding' must not be negative");
  for (int64_t v : a.output_shape)
    if (v <= 0) return UserError("attribute 'output_shape' must have positive values");
  auto kernel = std::make_unique<ConvTransposeKernel>(std::move(a), init.reference_only);
  SEQTO_RETURN_IF_ERROR(kernel->Prepare(init.constant(1), init.node.inputs.size() > 2 && !init.node.inputs[2].empty()));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

void RegisterConvTranspose(OpRegistry& r) {
  r.Register({"ConvTranspose", "", 1, [](const KernelInit& init) { return CreateConvTranspose(init, false); }});
  r.Register({"ConvTranspose", "com.seqto", 1, [](const KernelInit& init) { return CreateConvTranspose(init, true); }});
}

}  // namespace seqto::ops
