// Pooling over 1 to 3 spatial dims: MaxPool (ceil_mode, dilations, pads/auto_pad,
// the optional Indices output with storage_order), AveragePool (count_include_pad,
// ceil_mode), GlobalMaxPool and GlobalAveragePool (a window over all spatial dims).
// X: N x C x D1..Dk -> Y: N x C x O1..Ok.
// Reference: plain loops (double sums). Fast (float32): a oneDNN pooling primitive
// per input shape on NCHW data; (uint8/int8 max) MaxPool8Bit. Indices are computed
// by the reference only.
// AveragePool's divisor follows ONNX Runtime: with count_include_pad, the taps inside
// the padded input (not the extra windows ceil_mode adds past pad_end).
// com.seqto.{MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool} with
// channels_last = 1 (set by the layout pass, rewrite/channels_last.cc) are the same
// ops on N x D1..Dk x C tensors, so that pooling between convs needs no layout
// conversion (SqueezeNet's and ResNet's MaxPools, the pools of squeeze-excitation
// blocks). Fast: oneDNN pooling on the channels-last memory (float32, and 8-bit max
// pooling, exact); reference: the plain loops on a channels-first copy.
#include <algorithm>
#include <limits>

#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

enum class PoolKind { kMax, kAverage, kGlobalMax, kGlobalAverage };

bool IsMax(PoolKind k) { return k == PoolKind::kMax || k == PoolKind::kGlobalMax; }
bool IsGlobal(PoolKind k) { return k == PoolKind::kGlobalMax || k == PoolKind::kGlobalAverage; }

struct PoolAttrs {
  PoolKind kind = PoolKind::kMax;
  du::WindowAttrs window;
  bool count_include_pad = false;
  bool column_major_indices = false;  // MaxPool's storage_order = 1
  bool channels_last = false;         // X and Y are N x D1..Dk x C (com.seqto only)
};

struct PoolGeometry {
  int64_t batch = 0, channels = 0;
  std::vector<du::WindowDim> dims;
  Shape y_shape;
};

Expected<PoolGeometry> ResolvePool(const PoolAttrs& a, const Shape& x) {
  if (x.size() < 3 || x.size() > 5)
    return InputError(0, "X has shape " + ShapeToString(x) + ", expected rank 3 to 5 (N x C x 1-3 spatial dims)");
  PoolGeometry g;
  g.batch = x[0];
  g.channels = x[1];
  const Shape spatial(x.begin() + 2, x.end());
  if (IsGlobal(a.kind)) {
    g.dims.resize(spatial.size());
    for (size_t i = 0; i < spatial.size(); ++i) g.dims[i] = du::WindowDim{spatial[i], 1, spatial[i], 1, 1, 0, 0};
    if (NumElements(spatial) == 0) return InputError(0, "X has shape " + ShapeToString(x) + ": nothing to pool");
  } else {
    SEQTO_ASSIGN_OR_RETURN(g.dims, du::ResolveWindow(a.window, spatial, a.window.kernel_shape));
  }
  g.y_shape = {g.batch, g.channels};
  for (const auto& d : g.dims) g.y_shape.push_back(d.out);
  return g;
}

// One window per output element, reading X directly. `indices` may be null.
template <typename T>
void PoolReference(const PoolAttrs& a, const PoolGeometry& g, const T* x, T* y, int64_t* indices) {
  const auto d = du::To3d(g.dims);
  const int64_t in_vol = d[0].in * d[1].in * d[2].in;
  const int64_t out_vol = d[0].out * d[1].out * d[2].out;
  const bool is_max = IsMax(a.kind);
  ParallelFor(g.batch * g.channels, out_vol * d[0].kernel * d[1].kernel * d[2].kernel, [&](int64_t begin, int64_t end) {
    for (int64_t nc = begin; nc < end; ++nc) {
      const T* xc = x + nc * in_vol;
      for (int64_t o0 = 0; o0 < d[0].out; ++o0)
        for (int64_t o1 = 0; o1 < d[1].out; ++o1)
          for (int64_t o2 = 0; o2 < d[2].out; ++o2) {
            const int64_t s0 = o0 * d[0].stride - d[0].pad_begin, s1 = o1 * d[1].stride - d[1].pad_begin,
                          s2 = o2 * d[2].stride - d[2].pad_begin;
            T best = std::numeric_limits<T>::lowest();
            int64_t best_at = -1;
            double sum = 0;
            int64_t valid = 0, padded = 1;  // taps inside X; taps inside the padded X
            for (int dim = 0; dim < 3; ++dim) {
              const int64_t s = dim == 0 ? s0 : dim == 1 ? s1 : s2;
              int64_t n = 0;
              for (int64_t k = 0; k < d[dim].kernel; ++k) n += s + k * d[dim].dilation < d[dim].in + d[dim].pad_end;
              padded *= n;
            }
            for (int64_t k0 = 0; k0 < d[0].kernel; ++k0) {
              const int64_t i0 = s0 + k0 * d[0].dilation;
              if (i0 < 0 || i0 >= d[0].in) continue;
              for (int64_t k1 = 0; k1 < d[1].kernel; ++k1) {
                const int64_t i1 = s1 + k1 * d[1].dilation;
                if (i1 < 0 || i1 >= d[1].in) continue;
                for (int64_t k2 = 0; k2 < d[2].kernel; ++k2) {
                  const int64_t i2 = s2 + k2 * d[2].dilation;
                  if (i2 < 0 || i2 >= d[2].in) continue;
                  const int64_t at = (i0 * d[1].in + i1) * d[2].in + i2;
                  const T v = xc[at];
                  ++valid;
                  if (is_max) {
                    if (best_at < 0 || v > best) {
                      best = v;
                      best_at = at;
                    }
                  } else {
                    sum += static_cast<double>(v);
                  }
                }
              }
            }
            const int64_t out_at = nc * out_vol + (o0 * d[1].out + o1) * d[2].out + o2;
            if (is_max) {
              y[out_at] = best;
              if (indices) {
                int64_t idx = std::max<int64_t>(best_at, 0);
                if (a.column_major_indices) {  // the same position, numbered column-major
                  const int64_t i0 = idx / (d[1].in * d[2].in), i1 = idx / d[2].in % d[1].in, i2 = idx % d[2].in;
                  idx = (i2 * d[1].in + i1) * d[0].in + i0;
                }
                indices[out_at] = nc * in_vol + idx;
              }
            } else {
              const int64_t count = a.count_include_pad ? padded : valid;
              y[out_at] = count > 0 ? static_cast<T>(sum / static_cast<double>(count)) : T(0);
            }
          }
    }
  });
}

// Max pooling of uint8 / int8 without Indices (what the QDQ fusion pass leaves of
// DequantizeLinear -> MaxPool -> QuantizeLinear; oneDNN has no fast plain-layout
// 8-bit pooling): per output row, the elementwise max of the window's input rows
// (contiguous: vectorizes), then each window's max over that. The same result as
// PoolReference: the max over the taps inside X, lowest() for a window without any.
template <typename T>
void MaxPool8Bit(const PoolGeometry& g, const T* x, T* y) {
  const auto d = du::To3d(g.dims);
  const int64_t in_vol = d[0].in * d[1].in * d[2].in;
  const int64_t out_vol = d[0].out * d[1].out * d[2].out;
  const int64_t width = d[2].in;
  ParallelFor(g.batch * g.channels, out_vol * d[0].kernel * d[1].kernel * 2, [&](int64_t begin, int64_t end) {
    std::vector<T> row_max(static_cast<size_t>(width));
    for (int64_t nc = begin; nc < end; ++nc) {
      const T* xc = x + nc * in_vol;
      T* yc = y + nc * out_vol;
      for (int64_t o0 = 0; o0 < d[0].out; ++o0)
        for (int64_t o1 = 0; o1 < d[1].out; ++o1) {
          T* m = row_max.data();
          std::fill(m, m + width, std::numeric_limits<T>::lowest());
          for (int64_t k0 = 0; k0 < d[0].kernel; ++k0) {
            const int64_t i0 = o0 * d[0].stride - d[0].pad_begin + k0 * d[0].dilation;
            if (i0 < 0 || i0 >= d[0].in) continue;
            for (int64_t k1 = 0; k1 < d[1].kernel; ++k1) {
              const int64_t i1 = o1 * d[1].stride - d[1].pad_begin + k1 * d[1].dilation;
              if (i1 < 0 || i1 >= d[1].in) continue;
              const T* row = xc + (i0 * d[1].in + i1) * width;
#pragma omp simd
              for (int64_t w = 0; w < width; ++w) m[w] = m[w] < row[w] ? row[w] : m[w];
            }
          }
          T* yr = yc + (o0 * d[1].out + o1) * d[2].out;
          for (int64_t o2 = 0; o2 < d[2].out; ++o2) {
            T best = std::numeric_limits<T>::lowest();
            for (int64_t k2 = 0; k2 < d[2].kernel; ++k2) {
              const int64_t i2 = o2 * d[2].stride - d[2].pad_begin + k2 * d[2].dilation;
              if (i2 >= 0 && i2 < width && m[i2] > best) best = m[i2];
            }
            yr[o2] = best;
          }
        }
    }
  });
}

struct PoolPlan {
  dnnl::pooling_v2_forward prim;
  memory::desc src, dst;
};

class PoolKernel final : public Kernel {
 public:
  PoolKernel(PoolAttrs attrs, bool reference_only) : a_(std::move(attrs)), reference_only_(reference_only) {}

  Status Run(KernelContext& ctx) override {
    if (a_.channels_last) return RunChannelsLast(ctx);
    const Tensor& x = ctx.input(0);
    SEQTO_ASSIGN_OR_RETURN(PoolGeometry g, ResolvePool(a_, x.shape()));
    Tensor& y = ctx.Allocate(0, x.dtype(), g.y_shape);
    int64_t* indices = nullptr;
    if (ctx.wants_output(1)) {
      if (a_.kind != PoolKind::kMax) return UserError("only MaxPool has a second output (Indices)");
      indices = ctx.Allocate(1, DType::kInt64, g.y_shape).data<int64_t>();
    }
    if (y.numel() == 0) return Status::Ok();
    if (x.dtype() == DType::kFloat32 && !reference_only_ && !indices) {
      auto plan = plans_.Get(du::ShapeKey({&x.shape()}), [&] { return MakePlan(g, x.shape()); });
      if (plan)
        return du::Guard("pooling", [&] {
          plan->prim.execute(du::Stream(), {{DNNL_ARG_SRC, du::Wrap(plan->src, x.raw())},
                                            {DNNL_ARG_DST, du::Wrap(plan->dst, y.raw())}});
          du::Stream().wait();
        });
    }
    if (IsMax(a_.kind) && !indices && !reference_only_ && x.dtype() == DType::kUInt8) {
      MaxPool8Bit(g, x.data<uint8_t>(), y.data<uint8_t>());
      return Status::Ok();
    }
    if (IsMax(a_.kind) && !indices && !reference_only_ && x.dtype() == DType::kInt8) {
      MaxPool8Bit(g, x.data<int8_t>(), y.data<int8_t>());
      return Status::Ok();
    }
    return RunReference(g, x, y, indices);
  }

 private:
  // Channels-last X (N x D1..Dk x C): oneDNN reads it as it is; the reference runs
  // on a channels-first copy.
  Status RunChannelsLast(KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 3 || x.rank() > 5)
      return InputError(
          0, "X has shape " + ShapeToString(x.shape()) + ", expected rank 3 to 5 (N x 1-3 spatial dims x C)");
    const Shape x_cf = ChannelsFirstShape(x.shape());
    SEQTO_ASSIGN_OR_RETURN(PoolGeometry g, ResolvePool(a_, x_cf));
    if (ctx.wants_output(1)) return UserError("a channels-last pool has no Indices output");
    Tensor& y = ctx.Allocate(0, x.dtype(), ChannelsLastShape(g.y_shape));
    if (y.numel() == 0) return Status::Ok();
    const bool fast_type =
        x.dtype() == DType::kFloat32 || (IsMax(a_.kind) && (x.dtype() == DType::kUInt8 || x.dtype() == DType::kInt8));
    if (fast_type && !reference_only_) {
      auto plan = plans_.Get(du::ShapeKey({&x.shape()}), [&] { return MakePlan(g, x_cf, x.dtype(), true); });
      if (plan)
        return du::Guard("pooling", [&] {
          plan->prim.execute(du::Stream(), {{DNNL_ARG_SRC, du::Wrap(plan->src, x.raw())},
                                            {DNNL_ARG_DST, du::Wrap(plan->dst, y.raw())}});
          du::Stream().wait();
        });
    }
    const Tensor x_first = ToChannelsFirst(x);
    Tensor y_first(x.dtype(), g.y_shape);
    SEQTO_RETURN_IF_ERROR(RunReference(g, x_first, y_first, nullptr));
    CopyToChannelsLast(y_first, y);
    return Status::Ok();
  }

  Status RunReference(const PoolGeometry& g, const Tensor& x, Tensor& y, int64_t* indices) {
    switch (x.dtype()) {
      case DType::kFloat32:
        PoolReference(a_, g, x.data<float>(), y.data<float>(), indices);
        break;
      case DType::kFloat64:
        PoolReference(a_, g, x.data<double>(), y.data<double>(), indices);
        break;
      case DType::kInt8:
        if (!IsMax(a_.kind)) return DTypeError(0, x.dtype(), "float32, float64");
        PoolReference(a_, g, x.data<int8_t>(), y.data<int8_t>(), indices);
        break;
      case DType::kUInt8:
        if (!IsMax(a_.kind)) return DTypeError(0, x.dtype(), "float32, float64");
        PoolReference(a_, g, x.data<uint8_t>(), y.data<uint8_t>(), indices);
        break;
      default:
        return DTypeError(0, x.dtype(), IsMax(a_.kind) ? "float32, float64, int8, uint8" : "float32, float64");
    }
    return Status::Ok();
  }

  // x: the channels-first shape (oneDNN counts dims N, C, spatial whatever the layout).
  std::shared_ptr<PoolPlan> MakePlan(const PoolGeometry& g, const Shape& x, DType dtype = DType::kFloat32,
                                     bool channels_last = false) {
    memory::dims strides, kernel, dilations, pad_l, pad_r;
    bool past_pad_end = false;
    for (const auto& d : g.dims) {
      strides.push_back(d.stride);
      kernel.push_back(d.kernel);
      dilations.push_back(d.dilation - 1);
      pad_l.push_back(d.pad_begin);
      // What makes oneDNN's output extent d.out: more than pad_end in ceil_mode.
      const int64_t r = (d.out - 1) * d.stride + d.extent() - d.in - d.pad_begin;
      past_pad_end |= r > d.pad_end;
      pad_r.push_back(r);
    }
    dnnl::algorithm alg = dnnl::algorithm::pooling_max;
    if (!IsMax(a_.kind)) {
      // oneDNN divides by the whole window when it counts padding; ONNX does not
      // count the windows' parts beyond pad_end.
      if (a_.count_include_pad && past_pad_end) return nullptr;
      alg = a_.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                 : dnnl::algorithm::pooling_avg_exclude_padding;
    }
    try {
      auto plan = std::make_shared<PoolPlan>();
      const memory::data_type dt = dtype == DType::kUInt8  ? memory::data_type::u8
                                   : dtype == DType::kInt8 ? memory::data_type::s8
                                                           : memory::data_type::f32;
      const du::Layout layout = channels_last ? du::Layout::kNhwc : du::Layout::kPlain;
      plan->src = du::ActivationDesc(x, layout, dt);
      plan->dst = du::ActivationDesc(g.y_shape, layout, dt);
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, plan->src, plan->dst, strides,
                                          kernel, dilations, pad_l, pad_r);
      plan->prim = dnnl::pooling_v2_forward(dnnl::pooling_v2_forward::primitive_desc(desc, du::Engine()));
      return plan;
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }

  PoolAttrs a_;
  bool reference_only_;
  du::ShapeCache<PoolPlan> plans_;
};

KernelFactory PoolFactory(PoolKind kind) {
  return [kind](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
    PoolAttrs a;
    a.kind = kind;
    if (init.node.domain == "com.seqto") {
      SEQTO_ASSIGN_OR_RETURN(int64_t channels_last, init.node.attr_int("channels_last", 0));
      a.channels_last = channels_last != 0;
    }
    if (!IsGlobal(kind)) {
      SEQTO_ASSIGN_OR_RETURN(a.window, du::ParseWindowAttrs(init.node, /*with_ceil_mode=*/true));
      if (a.window.kernel_shape.empty()) return UserError("attribute 'kernel_shape' is required");
      const size_t n = a.window.kernel_shape.size();
      if (n > 3) return UserError("attribute 'kernel_shape' has " + std::to_string(n) + " values, expected 1 to 3");
      if (kind == PoolKind::kMax) {
        SEQTO_ASSIGN_OR_RETURN(int64_t order, init.node.attr_int("storage_order", 0));
        if (order != 0 && order != 1)
          return UserError("attribute 'storage_order' is " + std::to_string(order) + ", expected 0 or 1");
        a.column_major_indices = order == 1;
      } else {
        SEQTO_ASSIGN_OR_RETURN(int64_t include, init.node.attr_int("count_include_pad", 0));
        a.count_include_pad = include != 0;
      }
    }
    return std::unique_ptr<Kernel>(std::make_unique<PoolKernel>(std::move(a), init.reference_only));
  };
}

}  // namespace

void RegisterPool(OpRegistry& r) {
  r.Register({"MaxPool", "", 1, PoolFactory(PoolKind::kMax)});
  r.Register({"AveragePool", "", 1, PoolFactory(PoolKind::kAverage)});
  r.Register({"GlobalMaxPool", "", 1, PoolFactory(PoolKind::kGlobalMax)});
  r.Register({"GlobalAveragePool", "", 1, PoolFactory(PoolKind::kGlobalAverage)});
  // The layout pass's channels-last versions (attribute channels_last).
  r.Register({"MaxPool", "com.seqto", 1, PoolFactory(PoolKind::kMax)});
  r.Register({"AveragePool", "com.seqto", 1, PoolFactory(PoolKind::kAverage)});
  r.Register({"GlobalMaxPool", "com.seqto", 1, PoolFactory(PoolKind::kGlobalMax)});
  r.Register({"GlobalAveragePool", "com.seqto", 1, PoolFactory(PoolKind::kGlobalAverage)});
}

}  // namespace seqto::ops
