// Helpers shared by op implementations: broadcasting, common checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/op.h"

// Hot loops: the build targets baseline x86-64 (SSE2, 4 lanes), and a function
// marked SEQTO_WIDE_CLONES is also compiled for AVX2+FMA and AVX-512, the loader
// picking the widest the CPU has (GCC's target_clones). Its results may differ in
// the last bit between the clones (FMA contraction): for approximations and
// reductions. SEQTO_WIDE_CLONES_EXACT turns contraction off, so every clone does
// exactly the source's float operations (ops/quant's bit-exact kernels).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SEQTO_WIDE_CLONES [[gnu::target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")]]
#define SEQTO_WIDE_CLONES_EXACT \
  [[gnu::target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4"), gnu::optimize("fp-contract=off")]]
#else
#define SEQTO_WIDE_CLONES
#define SEQTO_WIDE_CLONES_EXACT
#endif

namespace seqto::ops {

// Iterates over the output of a broadcast between `a` and `b` (numpy rules).
// For each contiguous run of the innermost dimension calls
// fn(out_offset, a_offset, a_step, b_offset, b_step, count), where a step is 0
// when that operand is broadcast along the innermost dimension.
struct BroadcastPlan {
  Shape out_shape;
  // Per output dim (padded to out rank): strides of a and b (0 where broadcast).
  std::vector<int64_t> a_strides, b_strides;
  static Expected<BroadcastPlan> Make(const Shape& a, const Shape& b);
  template <typename F>
  void ForEachRow(F&& fn) const;
};

template <typename F>
void BroadcastPlan::ForEachRow(F&& fn) const {
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  if (rank == 0) {
    fn(0, 0, 0, 0, 0, 1);
    return;
  }
  const int64_t inner = out_shape[rank - 1];
  const int64_t a_step = a_strides[rank - 1], b_step = b_strides[rank - 1];
  const int64_t rows = NumElements(out_shape) / std::max<int64_t>(inner, 1);
  if (inner == 0) return;
  std::vector<int64_t> idx(rank, 0);
  int64_t a_off = 0, b_off = 0;
  for (int64_t r = 0; r < rows; ++r) {
    fn(r * inner, a_off, a_step, b_off, b_step, inner);
    for (int64_t d = rank - 2; d >= 0; --d) {  // odometer over outer dims
      ++idx[d];
      a_off += a_strides[d];
      b_off += b_strides[d];
      if (idx[d] < out_shape[d]) break;
      a_off -= a_strides[d] * out_shape[d];
      b_off -= b_strides[d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

// Applies out[i] = op(a[i], b[i]) with broadcasting; A, B, O are element types.
template <typename A, typename B, typename O, typename Op>
Status BroadcastBinary(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  SEQTO_ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(a.shape(), b.shape()));
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  if (a.shape() == b.shape()) {  // the common case: a flat loop the compiler vectorizes
    const int64_t n = a.numel();
    ParallelFor(n, 1, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = op(pa[i], pb[i]);
    });
    return Status::Ok();
  }
  plan.ForEachRow([&](int64_t o, int64_t ao, int64_t as, int64_t bo, int64_t bs, int64_t n) {
    if (as == 1 && bs == 1) {
      for (int64_t i = 0; i < n; ++i) po[o + i] = op(pa[ao + i], pb[bo + i]);
    } else if (as == 1 && bs == 0) {
      const B bv = pb[bo];
      for (int64_t i = 0; i < n; ++i) po[o + i] = op(pa[ao + i], bv);
    } else if (as == 0 && bs == 1) {
      const A av = pa[ao];
      for (int64_t i = 0; i < n; ++i) po[o + i] = op(av, pb[bo + i]);
    } else {
      for (int64_t i = 0; i < n; ++i) po[o + i] = op(pa[ao + i * as], pb[bo + i * bs]);
    }
  });
  return Status::Ok();
}

// "input 1 ('B') of node 'gemm0' (Gemm)" style messages are built by the runtime;
// kernels only say what is wrong with which input.
Error InputError(int index, const std::string& what);
// Error for an unsupported element type of input `index`.
Error DTypeError(int index, DType dtype, const std::string& supported);

// Reads an int64 (or int32) tensor input as a vector (shape-like inputs).
std::vector<int64_t> ReadInts(const Tensor& t);

// Channels-last activations. The layout pass (rewrite/channels_last.cc) runs convs
// on N x D1..Dk x C tensors ("NHWC") instead of ONNX's N x C x D1..Dk ("NCHW"); the
// kernels with a channels_last attribute use these for their reference paths.
// [N, C, D1..Dk] -> [N, D1..Dk, C] and back (rank >= 2).
Shape ChannelsLastShape(const Shape& channels_first);
Shape ChannelsFirstShape(const Shape& channels_last);
// A channels-first copy of a channels-last tensor.
Tensor ToChannelsFirst(const Tensor& channels_last);
// Writes the channels-first tensor `src` into `dst`, whose shape is
// ChannelsLastShape(src.shape()).
void CopyToChannelsLast(const Tensor& src, Tensor& dst);

}  // namespace seqto::ops
