// dnnl_util::ConvPrimitive, the oneDNN plumbing of every conv kernel: reorders of
// src/dst around a primitive that picks its own layouts, weights packed once, the
// sum post-op's prior dst, extra arguments, and runs from several threads at once
// (the memory objects are made once per plan; a concurrent run makes its own).
// Values are small integers, so every float sum is exact whatever the order.
#include "ops/nn/dnnl_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace seqto::ops::dnnl_util {
namespace {

constexpr int64_t kC = 24, kM = 40, kH = 5, kW = 7;  // 24 and 40: blocked layouts pad the channels

// A 1x1 convolution of X (1 x kC x kH x kW, NCHW) with bias, optionally with a sum
// post-op; the primitive chooses its layouts (format any), so src and dst are
// reordered whenever it prefers another one than NCHW.
ConvPrimitive MakeConv1x1(const std::vector<float>& w, memory& packed, bool with_sum) {
  const Shape x{1, kC, kH, kW}, y{1, kM, kH, kW}, wd{kM, kC, 1, 1};
  const memory::desc bias = PlainDesc({kM});
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             AnyDesc(x), AnyDesc(wd), bias, AnyDesc(y), {1, 1}, {0, 0}, {0, 0});
  dnnl::primitive_attr attr = UserScratchpadAttr();
  if (with_sum) {
    dnnl::post_ops ops;
    ops.append_sum(1.f);
    attr.set_post_ops(ops);
  }
  const dnnl::convolution_forward::primitive_desc pd(desc, attr, Engine());
  return ConvPrimitive(pd, ConvIo{PlainDesc(x), PlainDesc(wd), PlainDesc(y)}, w.data(), &packed, with_sum,
                       {ConvArg{DNNL_ARG_BIAS, bias}});
}

std::vector<float> Values(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + seed * 13) % 11 - 5);
  return v;
}

std::vector<float> Expected(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                            const std::vector<float>* init) {
  const int64_t p = kH * kW;
  std::vector<float> y(static_cast<size_t>(kM * p));
  for (int64_t m = 0; m < kM; ++m)
    for (int64_t i = 0; i < p; ++i) {
      float acc = b[m];
      for (int64_t c = 0; c < kC; ++c) acc += w[m * kC + c] * x[c * p + i];
      y[m * p + i] = acc + (init ? (*init)[m * p + i] : 0.f);
    }
  return y;
}

TEST(DnnlConvPrimitive, ReordersPacksAndPassesExtraArguments) {
  const std::vector<float> w = Values(kM * kC, 1), b = Values(kM, 2);
  memory packed;
  const ConvPrimitive conv = MakeConv1x1(w, packed, false);
  EXPECT_TRUE(conv.packed_weights());
  for (int seed = 0; seed < 3; ++seed) {  // the same plan on new data each run
    const std::vector<float> x = Values(kC * kH * kW, seed + 3);
    std::vector<float> y(static_cast<size_t>(kM * kH * kW), -1.f);
    const void* extra[] = {b.data()};
    conv.Run(x.data(), nullptr, y.data(), nullptr, extra);
    EXPECT_EQ(y, Expected(x, w, b, nullptr)) << "seed " << seed;
  }
}

TEST(DnnlConvPrimitive, SumPostOpStartsFromDstInit) {
  const std::vector<float> w = Values(kM * kC, 4), b = Values(kM, 5), x = Values(kC * kH * kW, 6);
  const std::vector<float> init = Values(kM * kH * kW, 7);
  memory packed;
  const ConvPrimitive conv = MakeConv1x1(w, packed, true);
  const void* extra[] = {b.data()};
  std::vector<float> y(init.size(), 100.f);
  conv.Run(x.data(), nullptr, y.data(), init.data(), extra);
  EXPECT_EQ(y, Expected(x, w, b, &init));
  std::vector<float> in_place = init;  // dst_init may be dst itself
  conv.Run(x.data(), nullptr, in_place.data(), in_place.data(), extra);
  EXPECT_EQ(in_place, Expected(x, w, b, &init));
}

TEST(DnnlConvPrimitive, ConcurrentRunsOfOnePlanStayCorrect) {
  const std::vector<float> w = Values(kM * kC, 8), b = Values(kM, 9);
  memory packed;
  const ConvPrimitive conv = MakeConv1x1(w, packed, false);
  constexpr int kThreads = 4, kRuns = 40;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::vector<float> x = Values(kC * kH * kW, 20 + t);
      const std::vector<float> want = Expected(x, w, b, nullptr);
      const void* extra[] = {b.data()};
      for (int r = 0; r < kRuns; ++r) {
        std::vector<float> y(want.size(), -1.f);
        conv.Run(x.data(), nullptr, y.data(), nullptr, extra);
        wrong[t] += y != want;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TEST(DnnlConvPrimitive, WrongNumberOfExtraArgumentsThrows) {
  const std::vector<float> w = Values(kM * kC, 10), x = Values(kC * kH * kW, 11);
  memory packed;
  const ConvPrimitive conv = MakeConv1x1(w, packed, false);
  std::vector<float> y(static_cast<size_t>(kM * kH * kW));
  EXPECT_THROW(conv.Run(x.data(), nullptr, y.data()), dnnl::error);
}

}  // namespace
}  // namespace seqto::ops::dnnl_util
