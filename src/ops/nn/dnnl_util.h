// oneDNN plumbing shared by the fast float kernels of ops/nn (Conv, ConvTranspose,
// Gemm, MatMul, pools): the CPU engine, a stream per thread, memory descriptors for
// seqto's plain row-major tensors, once-only weight reorders, a thread-local scratch
// arena for layout conversions, and a small per-kernel cache keyed by input shape.
//
// oneDNN runs on OpenMP, the same pool as ParallelFor, so it follows SetNumThreads.
// Every oneDNN call that can throw goes through Guard(), which turns a dnnl::error
// into a Status: a kernel never lets an exception escape.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "ir/graph.h"

namespace seqto::ops::dnnl_util {

using dnnl::memory;

// The process-wide CPU engine (thread-safe in oneDNN).
dnnl::engine& Engine();
// A stream for the calling thread.
dnnl::stream& Stream();

memory::dims Dims(const Shape& shape);
// Plain row-major descriptor ("abcd", i.e. nchw for a 4-D activation).
memory::desc PlainDesc(const Shape& shape, memory::data_type dt = memory::data_type::f32);
// Descriptor with explicit strides (in elements), e.g. a transposed view.
memory::desc StridedDesc(const Shape& shape, const std::vector<int64_t>& strides,
                         memory::data_type dt = memory::data_type::f32);
// "Let the primitive choose" descriptor.
memory::desc AnyDesc(const Shape& shape, memory::data_type dt = memory::data_type::f32);

// A memory object over caller-owned data (never written through for inputs).
memory Wrap(const memory::desc& desc, const void* data);
// A new memory (library-owned) holding `src` converted to layout `to`; for
// once-only weight prepacking. Runs the reorder synchronously.
memory ReorderToNew(const memory& src, const memory::desc& to);
// Reorders src into dst on the calling thread's stream (builds the reorder
// primitive each call: for use off the hot path).
void ReorderNow(const memory& src, const memory& dst);
// Constant weights `data` (laid out as `user`) in the layout `wanted` a primitive
// asks for: `cache` when it already holds that layout, `data` itself when `wanted`
// is `user` (the caller keeps it alive), else a new reordered copy. `cache` is set
// to the result, so a kernel keeps one packed copy, shared by its plans.
memory PackWeights(const memory::desc& user, const void* data, const memory::desc& wanted, memory& cache);

// Thread-local, 64-byte aligned scratch buffers reused by every kernel on this
// thread (kernels run one at a time per thread). `slot` 0..4 are independent;
// ConvPrimitive uses 0 (source), 1 (destination) and 2 (weights), every primitive 4
// (oneDNN's scratchpad, UserScratchpadAttr); kernels use 2 and 3 around them.
void* Scratch(int slot, size_t bytes);

// Runs fn(); a dnnl::error becomes an internal error naming `what`.
template <typename F>
Status Guard(const char* what, F&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    return InternalError(std::string(what) + ": oneDNN: " + e.what());
  } catch (const std::bad_alloc&) {
    return InternalError(std::string(what) + ": out of memory");
  }
  return Status::Ok();
}

// Builds a primitive descriptor with make(); returns false (instead of throwing)
// when oneDNN has no implementation for the configuration.
template <typename Pd, typename F>
bool TryMakePd(Pd& pd, F&& make) {
  try {
    pd = make();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Name of the implementation oneDNN picked ("brg:avx512_core", "gemm:jit", ...).
std::string ImplName(const dnnl::primitive_desc_base& pd);

// How a convolution's activations meet oneDNN.
//   kPlain:   our NCHW tensors as they are (no reorders; oneDNN 2.6 has only
//             im2col + GEMM for them, which is a plain GEMM for pointwise convs);
//   kBlocked: nChw16c, reordered in and out around each call;
//   kAny:     whatever the primitive prefers (NHWC for brgconv), reordered likewise;
//   kNhwc:    channels-last ("acdb"): a channels_last kernel's own tensors as they
//             are (no reorders).
enum class Layout { kPlain, kBlocked, kAny, kNhwc };
// The layouts to try for a convolution, best first. By default NCHW when the
// caller says a GEMM on NCHW is competitive (`prefer_plain`: pointwise convs over
// enough positions), else nChw16c when the channel counts are multiples of 16, else
// any. SEQTO_DNNL_LAYOUT=plain|blocked|any forces one (for measurements; blocked
// falls back to any where it does not apply).
// A channels_last kernel tries NHWC first (its tensors need no reorder), then the
// blocked layout, then any.
std::vector<Layout> ConvLayouts(bool prefer_plain, int64_t in_channels, int64_t out_channels,
                                bool channels_last = false);
// The descriptor of an activation of `shape` (always given as N x C x spatial, as
// oneDNN counts dimensions) in `layout`.
memory::desc ActivationDesc(const Shape& shape, Layout layout, memory::data_type dt = memory::data_type::f32);
// True for oneDNN's slow generic implementations (im2col + GEMM, reference loops):
// a convolution that gets one of them is better off in another layout.
bool IsSlowConvImpl(const std::string& impl);

// A small cache of per-shape state owned by one kernel. Value is built once per
// key; a null value records "no fast path for this key" (the kernel then uses its
// reference). Thread-safe; bounded (cleared when it outgrows kMaxEntries).
using CacheKey = std::vector<int64_t>;
// Concatenates shapes into one cache key (each preceded by its rank).
CacheKey ShapeKey(std::initializer_list<const Shape*> shapes);

// Held while any kernel builds a plan (oneDNN primitive descriptors, primitives,
// packed weights). Plans are built once per shape, so this costs nothing at run time;
// it keeps oneDNN 2.6's primitive creation (JIT code generation, its primitive
// cache, AMX set-up) off concurrent paths: sessions run in parallel worker threads in
// the analysis. Runs of built plans stay concurrent.
std::recursive_mutex& PlanCreationMutex();

template <typename V>
class ShapeCache {
 public:
  using Key = CacheKey;
  // Returns the value for `key`, calling make() (returning std::shared_ptr<V>, may be
  // null) the first time.
  template <typename F>
  std::shared_ptr<V> Get(const Key& key, F&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    if (entries_.size() >= kMaxEntries) entries_.clear();
    std::lock_guard<std::recursive_mutex> creating(PlanCreationMutex());
    std::shared_ptr<V> v = make();
    entries_.emplace(key, v);
    return v;
  }

 private:
  static constexpr size_t kMaxEntries = 32;
  std::mutex mu_;
  std::map<Key, std::shared_ptr<V>> entries_;
};

// ---------------------------------------------------------------------------
// Matrix products (Gemm, MatMul): dst = alpha * src x weights (+ bias)
// (+ sum_scale * dst), through a oneDNN matmul. Shapes may carry batch dims.

struct MatmulSpec {
  memory::desc src, weights, dst;  // the caller's layouts (weights may be a strided view)
  memory::desc bias;               // zero desc: no bias; dims broadcast to dst's
  float alpha = 1.f;
  bool accumulate = false;  // add sum_scale * (dst's previous contents)
  float sum_scale = 1.f;
};

struct MatmulPlan {
  dnnl::matmul prim;
  memory::desc scratchpad;  // user mode: the thread's scratch slot 4
  MatmulSpec spec;
  memory packed_weights;  // constant weights in the primitive's layout, or empty
};

// Builds the primitive. With `const_weights` (data in spec.weights' layout, kept
// alive by the caller) the weights are packed once into the layout the primitive
// prefers (see PackWeights; `packed_cache` is required then). Null when oneDNN
// cannot do it.
std::shared_ptr<MatmulPlan> MakeMatmul(const MatmulSpec& spec, const void* const_weights = nullptr,
                                       memory* packed_cache = nullptr);
// Runs a plan on caller memory (weights ignored when the plan has packed weights).
Status RunMatmul(const MatmulPlan& plan, const void* src, const void* weights, const void* bias, void* dst);

// ---------------------------------------------------------------------------
// Sliding-window geometry shared by Conv, ConvTranspose and the pools (it lives
// here because those are the kernels that hand it to oneDNN).

// The window attributes as written in the node; sizes are checked against the
// number of spatial dimensions by ResolveWindow (Conv learns it from W at run time).
struct WindowAttrs {
  std::string auto_pad = "NOTSET";  // NOTSET, SAME_UPPER, SAME_LOWER, VALID
  std::vector<int64_t> kernel_shape, strides, dilations, pads;
  bool ceil_mode = false;
};
// Reads auto_pad, kernel_shape, strides, dilations, pads (and ceil_mode when
// `with_ceil_mode`); errors for unknown auto_pad, non-positive strides/dilations/
// kernel extents and negative pads.
Expected<WindowAttrs> ParseWindowAttrs(const ir::Node& node, bool with_ceil_mode);

// One spatial dimension of a window operation, resolved for an input extent.
struct WindowDim {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, dilation = 1, pad_begin = 0, pad_end = 0;
  int64_t extent() const { return (kernel - 1) * dilation + 1; }
};
// Forward windows (Conv, pools): output extent and pads per spatial dimension of
// `in_spatial` for a window of `kernel`. With ceil_mode the output may need
// windows that run past pad_end; pad_end is left as given (see WindowDim::out).
Expected<std::vector<WindowDim>> ResolveWindow(const WindowAttrs& attrs, const Shape& in_spatial,
                                               const std::vector<int64_t>& kernel);

// Pads the spatial dims to 3 (leading dims of extent 1) so reference loops can
// be written once for 1-D, 2-D and 3-D.
std::vector<WindowDim> To3d(std::vector<WindowDim> dims);

// ---------------------------------------------------------------------------
// Convolution-like primitives (Conv, FusedConv, ConvTranspose, ConvInteger,
// QLinearConv): the kernel describes the primitive (data types, attributes, the
// layouts to try); ConvPrimitive does the rest the same way for all of them.

// A window as oneDNN's (de)convolution descriptors take it.
struct DnnlWindow {
  memory::dims strides, dilations, pad_l, pad_r;
};
// From resolved dims (oneDNN counts the gaps of a dilation). pad_r is each dim's
// pad_end, or with `reached_pad_end` only the part of it the last window reaches.
DnnlWindow ToDnnlWindow(const std::vector<WindowDim>& dims, bool reached_pad_end = false);

// Builds a primitive descriptor with make(layout) for each of `layouts` in turn,
// keeping the first that oneDNN implements. A slow generic implementation
// (IsSlowConvImpl) is kept only for the last layout or where accept_slow(layout)
// says it is what the caller expects. False when none builds.
template <typename Pd, typename Make, typename AcceptSlow>
bool PickConvPd(Pd& pd, const std::vector<Layout>& layouts, Make&& make, AcceptSlow&& accept_slow) {
  for (size_t i = 0; i < layouts.size(); ++i) {
    if (!TryMakePd(pd, [&] { return make(layouts[i]); })) continue;
    if (i + 1 == layouts.size() || accept_slow(layouts[i]) || !IsSlowConvImpl(ImplName(pd))) return true;
  }
  return false;
}

// Attributes every primitive starts from: the scratchpad is the caller's (the
// running thread's scratch slot 4). oneDNN's own scratchpad is
// shared by all primitives of the thread that created them (Debian builds it without
// DNNL_ENABLE_CONCURRENT_EXEC), so a primitive run from another thread, or by two
// threads at once, could write into memory another run is using. Used by the float
// convolutions, deconvolutions and matmuls; not by the int8 convolutions: creating
// some of oneDNN 2.6's int8 convolutions with a user scratchpad crashed inside
// libdnnl (AddressSanitizer build, seqto tune's ranking), so those keep the
// library's scratchpad and must be run from the thread that created them.
dnnl::primitive_attr UserScratchpadAttr();

// The caller's layouts of a convolution's source, weights and destination.
struct ConvIo {
  memory::desc src, wei, dst;
};

// An extra argument of a convolution-like primitive (bias, zero points, ...):
// oneDNN's argument id and the data's layout. Run() gets the data.
struct ConvArg {
  int id;
  memory::desc desc;
};

// One convolution-like primitive, built for one input shape, run on the caller's
// tensors: source and destination are reordered (through the thread's scratch
// slots 0 and 1) only where the primitive's layouts differ from the caller's;
// constant weights are packed once, at plan time, other weights are reordered per
// run (scratch slot 2) when they need it. The memory objects and the argument map
// are made once and only pointed at each run's data (a run of a small conv costs
// about as much as making them anew).
class ConvPrimitive {
 public:
  // `pd`: a convolution or deconvolution primitive descriptor. With
  // `const_weights` (in io.wei's layout, kept alive by the caller) the weights
  // are packed into the primitive's layout through PackWeights (`packed_cache` is
  // required then, and shared by the kernel's plans). `reads_dst`: the primitive
  // accumulates into dst (a sum post-op), so Run's `dst_init` is brought into the
  // primitive's layout first. `extra`: the further arguments Run passes.
  ConvPrimitive(const dnnl::primitive_desc& pd, const ConvIo& io, const void* const_weights = nullptr,
                memory* packed_cache = nullptr, bool reads_dst = false, std::vector<ConvArg> extra = {});

  // Runs on the caller's src, weights (ignored when packed) and dst, with the
  // data of the `extra` arguments in their order, and waits. dst_init: dst's prior
  // contents for a sum post-op (may be dst itself), else null. Throws dnnl::error:
  // call it inside Guard().
  void Run(const void* src, const void* weights, void* dst, const void* dst_init = nullptr,
           std::span<const void* const> extra = {}) const;

  const ConvIo& io() const { return io_; }
  // The primitive's own layouts.
  const ConvIo& prim_io() const { return prim_io_; }
  bool packed_weights() const { return packed_.get(true) != nullptr; }

 private:
  // The memory objects of one run (handles set per run) and the arguments over them.
  struct Memories {
    memory user_src, prim_src, user_dst, prim_dst, user_wei, prim_wei, dst_init, scratchpad;
    std::vector<memory> extra;
    std::unordered_map<int, memory> args;
  };
  struct Cached {
    std::mutex mu;  // a kernel runs once at a time; a concurrent run makes its own
    Memories mem;
  };
  Memories MakeMemories() const;

  dnnl::primitive primitive_;
  memory::desc scratchpad_;  // the primitive's scratchpad (user mode: the thread's scratch slot 4)
  ConvIo io_, prim_io_;
  std::vector<ConvArg> extra_;
  dnnl::reorder src_reorder_, dst_reorder_, dst_init_reorder_, wei_reorder_;  // null when not needed
  memory packed_;                                                             // packed constant weights, or empty
  std::shared_ptr<Cached> cached_;
};

}  // namespace seqto::ops::dnnl_util
