#include "ops/nn/dnnl_util.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unordered_map>

namespace seqto::ops::dnnl_util {

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& Stream() {
  thread_local dnnl::stream stream(Engine());
  return stream;
}

memory::dims Dims(const Shape& shape) { return memory::dims(shape.begin(), shape.end()); }

memory::desc PlainDesc(const Shape& shape, memory::data_type dt) {
  return memory::desc(Dims(shape), dt, memory::dims(ContiguousStrides(shape)));
}

memory::desc StridedDesc(const Shape& shape, const std::vector<int64_t>& strides, memory::data_type dt) {
  return memory::desc(Dims(shape), dt, memory::dims(strides.begin(), strides.end()));
}

memory::desc AnyDesc(const Shape& shape, memory::data_type dt) {
  return memory::desc(Dims(shape), dt, memory::format_tag::any);
}

memory Wrap(const memory::desc& desc, const void* data) {
  // oneDNN takes a non-const handle; inputs are only ever read through it.
  return memory(desc, Engine(), const_cast<void*>(data));
}

void ReorderNow(const memory& src, const memory& dst) {
  dnnl::reorder(src, dst).execute(Stream(), const_cast<memory&>(src), const_cast<memory&>(dst));
  Stream().wait();
}

memory ReorderToNew(const memory& src, const memory::desc& to) {
  memory dst(to, Engine());
  ReorderNow(src, dst);
  return dst;
}

memory PackWeights(const memory::desc& user, const void* data, const memory::desc& wanted, memory& cache) {
  if (!(cache.get(true) && cache.get_desc() == wanted))
    cache = wanted == user ? Wrap(user, data) : ReorderToNew(Wrap(user, data), wanted);
  return cache;
}

namespace {
struct ScratchArena {
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };
  Buffer slots[5];
  ~ScratchArena() {
    for (auto& b : slots) std::free(b.data);
  }
};
}  // namespace

void* Scratch(int slot, size_t bytes) {
  thread_local ScratchArena arena;
  auto& b = arena.slots[slot];
  if (b.bytes < bytes) {
    std::free(b.data);
    const size_t rounded = (bytes + bytes / 4 + 63) / 64 * 64;  // grow with headroom
    b.data = std::aligned_alloc(64, rounded);
    if (!b.data) {
      b.bytes = 0;
      throw std::bad_alloc();
    }
    b.bytes = rounded;
  }
  return b.data;
}

std::string ImplName(const dnnl::primitive_desc_base& pd) {
  const char* name = pd.impl_info_str();
  return name ? name : "";
}

std::vector<Layout> ConvLayouts(bool prefer_plain, int64_t in_channels, int64_t out_channels, bool channels_last) {
  static const char* forced = std::getenv("SEQTO_DNNL_LAYOUT");
  const bool blocked_fits = in_channels % 16 == 0 && out_channels % 16 == 0;
  if (channels_last) {
    if (blocked_fits) return {Layout::kNhwc, Layout::kBlocked, Layout::kAny};
    return {Layout::kNhwc, Layout::kAny};
  }
  if (forced && std::strcmp(forced, "plain") == 0) return {Layout::kPlain};
  if (forced && std::strcmp(forced, "any") == 0) return {Layout::kAny};
  if (forced && std::strcmp(forced, "blocked") == 0) {
    if (blocked_fits) return {Layout::kBlocked, Layout::kAny};
    return {Layout::kAny};
  }
  if (prefer_plain) return {Layout::kPlain, Layout::kBlocked, Layout::kAny};
  if (blocked_fits) return {Layout::kBlocked, Layout::kAny, Layout::kPlain};
  return {Layout::kAny, Layout::kPlain};
}

memory::desc ActivationDesc(const Shape& shape, Layout layout, memory::data_type dt) {
  if (layout == Layout::kPlain) return PlainDesc(shape, dt);
  if (layout == Layout::kAny) return AnyDesc(shape, dt);
  using tag = memory::format_tag;
  if (layout == Layout::kNhwc) {
    const tag t = shape.size() == 3 ? tag::acb : shape.size() == 4 ? tag::acdb : tag::acdeb;
    return memory::desc(Dims(shape), dt, t);
  }
  const tag t = shape.size() == 3 ? tag::aBc16b : shape.size() == 4 ? tag::aBcd16b : tag::aBcde16b;
  return memory::desc(Dims(shape), dt, t);
}

bool IsSlowConvImpl(const std::string& impl) {
  return impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos;
}

DnnlWindow ToDnnlWindow(const std::vector<WindowDim>& dims, bool reached_pad_end) {
  DnnlWindow w;
  for (const auto& d : dims) {
    w.strides.push_back(d.stride);
    w.dilations.push_back(d.dilation - 1);
    w.pad_l.push_back(d.pad_begin);
    w.pad_r.push_back(reached_pad_end ? (d.out - 1) * d.stride + d.extent() - d.in - d.pad_begin : d.pad_end);
  }
  return w;
}

std::recursive_mutex& PlanCreationMutex() {
  static std::recursive_mutex mu;
  return mu;
}

dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

ConvPrimitive::ConvPrimitive(const dnnl::primitive_desc& pd, const ConvIo& io, const void* const_weights,
                             memory* packed_cache, bool reads_dst, std::vector<ConvArg> extra)
    : primitive_(pd),
      scratchpad_(pd.scratchpad_desc()),
      io_(io),
      prim_io_{pd.src_desc(0), pd.weights_desc(0), pd.dst_desc(0)},
      extra_(std::move(extra)),
      cached_(std::make_shared<Cached>()) {
  const dnnl::engine& e = Engine();
  if (prim_io_.src != io_.src) src_reorder_ = dnnl::reorder({e, io_.src, e, prim_io_.src});
  if (prim_io_.dst != io_.dst) {
    dst_reorder_ = dnnl::reorder({e, prim_io_.dst, e, io_.dst});
    if (reads_dst) dst_init_reorder_ = dnnl::reorder({e, io_.dst, e, prim_io_.dst});
  }
  if (const_weights)
    packed_ = PackWeights(io_.wei, const_weights, prim_io_.wei, *packed_cache);
  else if (prim_io_.wei != io_.wei)
    wei_reorder_ = dnnl::reorder({e, io_.wei, e, prim_io_.wei});
  cached_->mem = MakeMemories();
}

ConvPrimitive::Memories ConvPrimitive::MakeMemories() const {
  const dnnl::engine& e = Engine();
  Memories m;
  m.user_src = memory(io_.src, e, nullptr);
  m.prim_src = src_reorder_ ? memory(prim_io_.src, e, nullptr) : m.user_src;
  m.user_dst = memory(io_.dst, e, nullptr);
  m.prim_dst = dst_reorder_ ? memory(prim_io_.dst, e, nullptr) : m.user_dst;
  if (dst_init_reorder_) m.dst_init = memory(io_.dst, e, nullptr);
  if (packed_.get(true)) {
    m.prim_wei = packed_;
  } else {
    m.user_wei = memory(io_.wei, e, nullptr);
    m.prim_wei = wei_reorder_ ? memory(prim_io_.wei, e, nullptr) : m.user_wei;
  }
  m.args = {{DNNL_ARG_SRC, m.prim_src}, {DNNL_ARG_WEIGHTS, m.prim_wei}, {DNNL_ARG_DST, m.prim_dst}};
  if (scratchpad_.get_size() > 0) {
    m.scratchpad = memory(scratchpad_, e, nullptr);
    m.args.emplace(DNNL_ARG_SCRATCHPAD, m.scratchpad);
  }
  for (const ConvArg& a : extra_) {
    m.extra.emplace_back(a.desc, e, nullptr);
    m.args.emplace(a.id, m.extra.back());
  }
  return m;
}

void ConvPrimitive::Run(const void* src, const void* weights, void* dst, const void* dst_init,
                        std::span<const void* const> extra) const {
  if (extra.size() != extra_.size()) throw dnnl::error(dnnl_invalid_arguments, "wrong number of extra arguments");
  std::unique_lock<std::mutex> lock(cached_->mu, std::try_to_lock);
  Memories fresh;
  if (!lock.owns_lock()) fresh = MakeMemories();
  Memories& m = lock.owns_lock() ? cached_->mem : fresh;
  dnnl::stream& s = Stream();
  m.user_src.set_data_handle(const_cast<void*>(src));
  m.user_dst.set_data_handle(dst);
  if (src_reorder_) {
    m.prim_src.set_data_handle(Scratch(0, prim_io_.src.get_size()));
    src_reorder_.execute(s, m.user_src, m.prim_src);
  }
  if (dst_reorder_) m.prim_dst.set_data_handle(Scratch(1, prim_io_.dst.get_size()));
  if (dst_init) {
    if (dst_init_reorder_) {
      m.dst_init.set_data_handle(const_cast<void*>(dst_init));
      dst_init_reorder_.execute(s, m.dst_init, m.prim_dst);
    } else if (dst_init != dst) {
      std::memcpy(dst, dst_init, io_.dst.get_size());
    }
  }
  if (!packed_.get(true)) {
    m.user_wei.set_data_handle(const_cast<void*>(weights));
    if (wei_reorder_) {
      m.prim_wei.set_data_handle(Scratch(2, prim_io_.wei.get_size()));
      wei_reorder_.execute(s, m.user_wei, m.prim_wei);
    }
  }
  size_t i = 0;
  for (const void* data : extra) m.extra[i++].set_data_handle(const_cast<void*>(data));
  if (scratchpad_.get_size() > 0) m.scratchpad.set_data_handle(Scratch(4, scratchpad_.get_size()));
  primitive_.execute(s, m.args);
  if (dst_reorder_) dst_reorder_.execute(s, m.prim_dst, m.user_dst);
  s.wait();
}

CacheKey ShapeKey(std::initializer_list<const Shape*> shapes) {
  CacheKey key;
  for (const Shape* s : shapes) {
    if (!s) {
      key.push_back(-1);
      continue;
    }
    key.push_back(static_cast<int64_t>(s->size()));
    key.insert(key.end(), s->begin(), s->end());
  }
  return key;
}

std::shared_ptr<MatmulPlan> MakeMatmul(const MatmulSpec& spec, const void* const_weights, memory* packed_cache) {
  try {
    auto plan = std::make_shared<MatmulPlan>();
    plan->spec = spec;
    const memory::desc wei = const_weights
                                 ? memory::desc(spec.weights.dims(), spec.weights.data_type(), memory::format_tag::any)
                                 : spec.weights;
    const auto desc = spec.bias.is_zero() ? dnnl::matmul::desc(spec.src, wei, spec.dst)
                                          : dnnl::matmul::desc(spec.src, wei, spec.bias, spec.dst);
    dnnl::primitive_attr attr = UserScratchpadAttr();
    if (spec.alpha != 1.f) attr.set_output_scales(0, {spec.alpha});
    if (spec.accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(spec.sum_scale);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(desc, attr, Engine());
    plan->prim = dnnl::matmul(pd);
    plan->scratchpad = pd.scratchpad_desc();
    if (const_weights)
      plan->packed_weights = PackWeights(spec.weights, const_weights, pd.weights_desc(), *packed_cache);
    return plan;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

Status RunMatmul(const MatmulPlan& plan, const void* src, const void* weights, const void* bias, void* dst) {
  return Guard("matmul", [&] {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, Wrap(plan.spec.src, src)},
                                         {DNNL_ARG_DST, Wrap(plan.spec.dst, dst)}};
    args.emplace(DNNL_ARG_WEIGHTS,
                 plan.packed_weights.get(true) ? plan.packed_weights : Wrap(plan.spec.weights, weights));
    if (!plan.spec.bias.is_zero()) args.emplace(DNNL_ARG_BIAS, Wrap(plan.spec.bias, bias));
    if (plan.scratchpad.get_size() > 0)
      args.emplace(DNNL_ARG_SCRATCHPAD, Wrap(plan.scratchpad, Scratch(4, plan.scratchpad.get_size())));
    plan.prim.execute(Stream(), args);
    Stream().wait();
  });
}

Expected<WindowAttrs> ParseWindowAttrs(const ir::Node& node, bool with_ceil_mode) {
  WindowAttrs a;
  SEQTO_ASSIGN_OR_RETURN(a.auto_pad, node.attr_string("auto_pad", "NOTSET"));
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" && a.auto_pad != "VALID")
    return UserError("attribute 'auto_pad' is '" + a.auto_pad + "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  SEQTO_ASSIGN_OR_RETURN(a.kernel_shape, node.attr_ints("kernel_shape"));
  SEQTO_ASSIGN_OR_RETURN(a.strides, node.attr_ints("strides"));
  SEQTO_ASSIGN_OR_RETURN(a.dilations, node.attr_ints("dilations"));
  SEQTO_ASSIGN_OR_RETURN(a.pads, node.attr_ints("pads"));
  if (with_ceil_mode) {
    SEQTO_ASSIGN_OR_RETURN(int64_t ceil_mode, node.attr_int("ceil_mode", 0));
    a.ceil_mode = ceil_mode != 0;
  }
  auto all = [](const std::vector<int64_t>& v, auto pred) {
    for (int64_t x : v)
      if (!pred(x)) return false;
    return true;
  };
  if (!all(a.kernel_shape, [](int64_t x) { return x > 0; }))
    return UserError("attribute 'kernel_shape' must have positive values");
  if (!all(a.strides, [](int64_t x) { return x > 0; }))
    return UserError("attribute 'strides' must have positive values");
  if (!all(a.dilations, [](int64_t x) { return x > 0; }))
    return UserError("attribute 'dilations' must have positive values");
  if (!all(a.pads, [](int64_t x) { return x >= 0; })) return UserError("attribute 'pads' must not be negative");
  if (a.pads.size() % 2 != 0)
    return UserError("attribute 'pads' has " + std::to_string(a.pads.size()) + " values, expected 2 per spatial dim");
  return a;
}

Expected<std::vector<WindowDim>> ResolveWindow(const WindowAttrs& attrs, const Shape& in_spatial,
                                               const std::vector<int64_t>& kernel) {
  const size_t n = in_spatial.size();
  auto check = [&](const std::vector<int64_t>& v, size_t expected, const char* name) -> Status {
    if (!v.empty() && v.size() != expected)
      return UserError("attribute '" + std::string(name) + "' has " + std::to_string(v.size()) + " values, expected " +
                       std::to_string(expected) + " for an input with " + std::to_string(n) + " spatial dims");
    return Status::Ok();
  };
  SEQTO_RETURN_IF_ERROR(check(kernel, n, "kernel_shape"));
  SEQTO_RETURN_IF_ERROR(check(attrs.strides, n, "strides"));
  SEQTO_RETURN_IF_ERROR(check(attrs.dilations, n, "dilations"));
  SEQTO_RETURN_IF_ERROR(check(attrs.pads, 2 * n, "pads"));
  std::vector<WindowDim> dims(n);
  for (size_t i = 0; i < n; ++i) {
    WindowDim& d = dims[i];
    d.in = in_spatial[i];
    d.kernel = kernel[i];
    d.stride = attrs.strides.empty() ? 1 : attrs.strides[i];
    d.dilation = attrs.dilations.empty() ? 1 : attrs.dilations[i];
    const int64_t ext = d.extent();
    if (attrs.auto_pad == "SAME_UPPER" || attrs.auto_pad == "SAME_LOWER") {
      d.out = (d.in + d.stride - 1) / d.stride;
      const int64_t total = std::max<int64_t>(0, (d.out - 1) * d.stride + ext - d.in);
      d.pad_begin = attrs.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      d.pad_end = total - d.pad_begin;
    } else {
      if (attrs.auto_pad == "NOTSET" && !attrs.pads.empty()) {
        d.pad_begin = attrs.pads[i];
        d.pad_end = attrs.pads[i + n];
      }
      const int64_t span = d.in + d.pad_begin + d.pad_end - ext;
      if (span < 0)
        return UserError("spatial dim " + std::to_string(i) + " of the input (" + std::to_string(d.in) + ", padded " +
                         std::to_string(d.in + d.pad_begin + d.pad_end) + ") is smaller than the window (" +
                         std::to_string(ext) + ")");
      const bool ceil = attrs.ceil_mode && attrs.auto_pad == "NOTSET";
      d.out = (ceil ? (span + d.stride - 1) / d.stride : span / d.stride) + 1;
    }
    if (d.out <= 0)
      return UserError("spatial dim " + std::to_string(i) + " of the input (" + std::to_string(d.in) +
                       ") gives an empty output");
  }
  return dims;
}

std::vector<WindowDim> To3d(std::vector<WindowDim> dims) {
  while (dims.size() < 3) dims.insert(dims.begin(), WindowDim{});
  return dims;
}

}  // namespace seqto::ops::dnnl_util
