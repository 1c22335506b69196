// Metrics of src/eval/metrics.h: hand-computed cases (the arithmetic is in the
// comments), tie and NaN rules, bad input, and the accumulators against the
// whole-tensor functions. scipy is not installed here, so Kendall's tau-b is checked
// against a brute-force implementation of scipy's definition written in this file.
#include "eval/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/tensor.h"

namespace seqto {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

Tensor F32(Shape shape, const std::vector<float>& v) { return Tensor::FromVector<float>(std::move(shape), v); }

// ---------------------------------------------------------------- accuracy

TEST(Metrics, Top1TiesGoToTheLowestIndexAndNaNNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor s = F32({4, 4}, {1, 3, 3, 0,            // tie between 1 and 2 -> 1
                          2, 2, 2, 2,            // all tied -> 0
                          nan, -1, -0.5, -2,     // NaN ranks as -inf, even first -> 2 (-0.5)
                          nan, nan, nan, nan});  // all NaN: all "-inf", tied -> 0
  auto t = Top1(s);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t, (std::vector<int64_t>{1, 0, 2, 0}));
}

TEST(Metrics, Top1FlattensEverythingAfterAxis0AndReadsOtherDtypes) {
  // [2, 2, 3] -> 2 samples of 6 scores.
  Tensor s = F32({2, 2, 3}, {0, 0, 0, 0, 5, 0, /**/ 9, 0, 0, 0, 0, 9});
  EXPECT_EQ(*Top1(s), (std::vector<int64_t>{4, 0}));
  Tensor h(DType::kFloat16, {1, 3});
  h.data<uint16_t>()[0] = FloatToHalf(0.5f);
  h.data<uint16_t>()[1] = FloatToHalf(2.0f);
  h.data<uint16_t>()[2] = FloatToHalf(1.0f);
  EXPECT_EQ(*Top1(h), (std::vector<int64_t>{1}));
  Tensor i8 = Tensor::FromVector<int8_t>({2, 2}, {-3, -4, 7, 8});
  EXPECT_EQ(*Top1(i8), (std::vector<int64_t>{0, 1}));
}

TEST(Metrics, Top1RejectsBadTensors) {
  EXPECT_FALSE(Top1(Tensor()).ok());
  EXPECT_FALSE(Top1(Tensor::Scalar<float>(1)).ok());
  EXPECT_FALSE(Top1(Tensor::FromVector<bool>({2, 2}, {true, false, false, true})).ok());
  auto r = Top1(Tensor(DType::kFloat32, {3, 0}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("float32[3x0]"), std::string::npos) << r.error().message;
}

// Four samples of four classes, used by the accuracy tests:
//   s0 [0.1 0.7 0.2 0.0] label 2: ranks 1,2,0,3          -> top1 miss, top2 hit
//   s1 [0.5 0.5 0.0 0.0] label 1: tie 0/1, 0 wins         -> top1 miss, top2 hit
//   s2 [0.0 0.0 0.0 0.9] label 3                          -> top1 hit
//   s3 [0.3 0.3 0.3 0.1] label 2: tie 0/1/2 -> order 0,1,2 -> top2 miss, top3 hit
// top1 = 1/4 = 25 %, top2 = 3/4 = 75 %, top3 = 4/4 = 100 %.
Tensor AccScores() {
  return F32({4, 4}, {0.1f, 0.7f, 0.2f, 0.0f, 0.5f, 0.5f, 0, 0, 0, 0, 0, 0.9f, 0.3f, 0.3f, 0.3f, 0.1f});
}
const std::vector<int64_t> kAccLabels = {2, 1, 3, 2};

TEST(Metrics, TopKAccuracyHandComputed) {
  EXPECT_DOUBLE_EQ(*TopKAccuracy(AccScores(), kAccLabels, 1), 25.0);
  EXPECT_DOUBLE_EQ(*TopKAccuracy(AccScores(), kAccLabels, 2), 75.0);
  EXPECT_DOUBLE_EQ(*TopKAccuracy(AccScores(), kAccLabels, 3), 100.0);
  EXPECT_DOUBLE_EQ(*TopKAccuracy(AccScores(), kAccLabels, 10), 100.0);  // k clamped to C = 4
  AccuracyAccumulator acc;
  ASSERT_TRUE(acc.Add(AccScores(), kAccLabels).ok());
  auto m = acc.Result();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->samples, 4);
  EXPECT_EQ(m->classes, 4);
  EXPECT_DOUBLE_EQ(m->top1, 25.0);
  EXPECT_DOUBLE_EQ(m->top5, 100.0);  // C = 4 < 5: top-4 of 4 classes always hits
}

TEST(Metrics, TopKAccuracyWithFewerThanFiveClasses) {
  // C = 3: s0 [1 2 3] label 0 -> rank 2; s1 [3 2 1] label 2 -> rank 2. top1 0 %, top5 (k=3) 100 %.
  Tensor s = F32({2, 3}, {1, 2, 3, 3, 2, 1});
  AccuracyAccumulator acc;
  ASSERT_TRUE(acc.Add(s, {0, 2}).ok());
  EXPECT_DOUBLE_EQ(acc.Result()->top1, 0.0);
  EXPECT_DOUBLE_EQ(acc.Result()->top5, 100.0);
  EXPECT_DOUBLE_EQ(*TopKAccuracy(s, {0, 2}, 2), 0.0);
}

TEST(Metrics, LabelOutOfRangeNamesSampleAndClassCount) {
  auto r = TopKAccuracy(AccScores(), {2, 1, 4, 2}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_EQ(r.error().message, "label 4 of sample 2 is outside the 4 classes [0, 4)");
  r = TopKAccuracy(AccScores(), {-1, 1, 3, 2}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("label -1 of sample 0"), std::string::npos) << r.error().message;

  // The accumulator counts samples over batches: the bad label is sample 4 + 1 = 5.
  AccuracyAccumulator acc;
  ASSERT_TRUE(acc.Add(AccScores(), kAccLabels).ok());
  Status s = acc.Add(F32({2, 4}, {0, 0, 0, 1, 0, 0, 0, 1}), {3, 7});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "label 7 of sample 5 is outside the 4 classes [0, 4)");
  EXPECT_EQ(acc.samples(), 4);  // the failed batch is not counted
}

TEST(Metrics, AccuracyRejectsBadArguments) {
  EXPECT_FALSE(TopKAccuracy(AccScores(), kAccLabels, 0).ok());
  auto r = TopKAccuracy(AccScores(), {1, 2}, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "2 labels for 4 samples");
  EXPECT_FALSE(TopKAccuracy(Tensor(DType::kFloat32, {0, 4}), {}, 1).ok());
  AccuracyAccumulator acc;
  EXPECT_FALSE(acc.Result().ok());  // no samples
  ASSERT_TRUE(acc.Add(AccScores(), kAccLabels).ok());
  Status s = acc.Add(F32({1, 5}, {0, 0, 0, 0, 1}), {4});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "batch has 5 classes per sample, earlier batches had 4");
}

// ---------------------------------------------------------------- SQNR

TEST(Metrics, SqnrHandComputed) {
  // ||x|| = ||(3,4)|| = 5, ||x - y|| = ||(0,-0.5)|| = 0.5 -> 20 log10(10) = 20 dB.
  const double x[] = {3, 4}, y[] = {3, 4.5};
  EXPECT_DOUBLE_EQ(SqnrDb(x, y, 2), 20.0);
  const float xf[] = {3, 4}, yf[] = {3, 4.5f};
  EXPECT_DOUBLE_EQ(SqnrDb(xf, yf, 2), 20.0);
  // ||x|| = 1, ||x - y|| = 1 -> 0 dB.
  const double a[] = {1, 0, 0, 0}, z[] = {0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(SqnrDb(a, z, 4), 0.0);
  // ||x|| = 1, ||x - y|| = ||(-1, -1, -1, -1)|| = 2 -> 20 log10(1/2) = -6.0206 dB.
  const double y2[] = {2, 1, 1, 1};
  EXPECT_DOUBLE_EQ(SqnrDb(a, y2, 4), 20 * std::log10(0.5));
}

TEST(Metrics, SqnrEpsilonClamps) {
  // Identical: the noise norm is clamped to eps -> 20 log10(5 / eps) ~ 327.05 dB, finite.
  const double x[] = {3, 4};
  const double same = SqnrDb(x, x, 2);
  EXPECT_TRUE(std::isfinite(same));
  EXPECT_DOUBLE_EQ(same, 20 * std::log10(5 / DBL_EPSILON));
  EXPECT_NEAR(same, 327.05, 0.01);
  // Both zero: eps / eps -> 0 dB.
  const double z[] = {0, 0};
  EXPECT_DOUBLE_EQ(SqnrDb(z, z, 2), 0.0);
  EXPECT_DOUBLE_EQ(SqnrDb(z, z, 0), 0.0);
  // Signal and noise below eps: both clamped -> 0 dB.
  const double tiny[] = {1e-20}, zero[] = {0};
  EXPECT_DOUBLE_EQ(SqnrDb(tiny, zero, 1), 0.0);
  // Noise ~1e-20 < eps, signal 1e-10: 20 log10(1e-10 / eps) ~ 113.07 dB.
  const double s[] = {1e-10}, n[] = {1e-10 + 1e-20};
  EXPECT_DOUBLE_EQ(SqnrDb(s, n, 1), 20 * std::log10(1e-10 / DBL_EPSILON));
  // NaN propagates rather than being clamped away.
  const double bad[] = {kNaN};
  EXPECT_TRUE(std::isnan(SqnrDb(x, bad, 1)));
}

TEST(Metrics, SqnrAccumulatorEqualsConcatenation) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(1000), y(1000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = nd(rng);
    y[i] = x[i] + 0.01f * nd(rng);
  }
  SqnrAccumulator acc;
  size_t pos = 0;
  for (size_t len : {1u, 0u, 333u, 17u, 649u}) {
    acc.Add(x.data() + pos, y.data() + pos, len);
    pos += len;
  }
  ASSERT_EQ(pos, x.size());
  EXPECT_EQ(acc.count(), 1000u);
  EXPECT_EQ(acc.Db(), SqnrDb(x.data(), y.data(), x.size()));
  EXPECT_NEAR(acc.Db(), 40.0, 0.5);  // noise std 0.01 of signal std 1 -> ~40 dB

  SqnrAccumulator t;
  ASSERT_TRUE(t.Add(F32({1000}, x), F32({10, 100}, y)).ok());
  EXPECT_EQ(t.Db(), acc.Db());
  // Mixed dtypes go through doubles: float64 copy of x against float32 y.
  std::vector<double> xd(x.begin(), x.end());
  SqnrAccumulator mixed;
  ASSERT_TRUE(mixed.Add(Tensor::FromVector<double>({1000}, xd), F32({1000}, y)).ok());
  EXPECT_EQ(mixed.Db(), acc.Db());
  EXPECT_FALSE(t.Add(F32({3}, {1, 2, 3}), F32({2}, {1, 2})).ok());
}

// ---------------------------------------------------------------- agreement

TEST(Metrics, AgreementHandComputed) {
  // Sample 0, C = 6: ref [6 5 4 3 2 1], cand [1 2 3 4 5 6].
  //   top1: 0 vs 5 -> differ.
  //   top5(ref) = {0,1,2,3,4}, top5(cand) = {5,4,3,2,1}: common {1,2,3,4} -> 4/5 = 0.8.
  //   tau on ref's top5 (classes 0..4): x = 6 5 4 3 2, y = 1 2 3 4 5 -> all 10 pairs discordant -> -1.
  //   KL: see KlDivergenceHandComputed; here only checked through the mean below.
  // Sample 1: identical -> agree, overlap 1, tau 1, KL 0.
  // Means: disagreement 1/2 = 50 %, overlap (0.8 + 1) / 2 = 0.9, tau (-1 + 1) / 2 = 0.
  Tensor ref = F32({2, 6}, {6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5});
  Tensor cand = F32({2, 6}, {1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(*Top1Disagreement(ref, cand), 50.0);
  EXPECT_DOUBLE_EQ(*Top5Overlap(ref, cand), 0.9);
  EXPECT_DOUBLE_EQ(*KendallTauTop5(ref, cand), 0.0);
  // SQNR over both samples concatenated: ||ref||^2 = 91 + 55 = 146,
  // ||ref - cand||^2 = 25+9+1+1+9+25 = 70 -> 20 log10(sqrt(146/70)) = 10 log10(146/70).
  EXPECT_NEAR(*OutputSqnrDb(ref, cand), 10 * std::log10(146.0 / 70.0), 1e-12);
  auto m = Agreement(ref, cand);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->samples, 2);
  EXPECT_EQ(m->classes, 6);
}

TEST(Metrics, KendallTauBHandComputedWithTies) {
  // x = 5 4 3 2 1 (ref, C = 5, its top5 is all classes), y = 4 4 2 1 0.
  // Pair (0,1) is tied in y (n2 = 1); the other 9 pairs are concordant.
  // tau_b = (9 - 0) / sqrt((10 - 0) * (10 - 1)) = 9 / sqrt(90) = 0.9486832980505138.
  EXPECT_NEAR(*KendallTauTop5(F32({1, 5}, {5, 4, 3, 2, 1}), F32({1, 5}, {4, 4, 2, 1, 0})), 9 / std::sqrt(90.0), 1e-15);
  // x = 3 3 1 1 0: pairs (0,1) and (2,3) tied in x (n1 = 2). y = 2 3 1 0 -1: the remaining
  // 8 pairs are concordant -> 8 / sqrt((10 - 2) * 10) = 8 / sqrt(80) = 0.894427190999916.
  EXPECT_NEAR(*KendallTauTop5(F32({1, 5}, {3, 3, 1, 1, 0}), F32({1, 5}, {2, 3, 1, 0, -1})), 8 / std::sqrt(80.0), 1e-15);
  // x decreasing, y = 2 1 3 5 4: concordant where y_i > y_j: (0,1), (3,4) -> nc = 2, nd = 8,
  // tau = (2 - 8) / 10 = -0.6.
  EXPECT_NEAR(*KendallTauTop5(F32({1, 5}, {5, 4, 3, 2, 1}), F32({1, 5}, {2, 1, 3, 5, 4})), -0.6, 1e-15);
}

TEST(Metrics, KendallTauUsesOnlyTheReferenceTopFive) {
  // C = 7: ref top5 = classes 6,5,4,3,2. The candidate reverses that order but also
  // scrambles classes 0 and 1, which must not matter.
  // Candidate on classes 2..6: -3 -4 -5 -6 -7 vs ref 2 3 4 5 6 -> reversed -> tau -1.
  // Overlap: cand top5 = {0, 1, 2, 3, 4} (scores 100, 50, -3, -4, -5) vs {2..6} -> 3/5.
  Tensor ref = F32({1, 7}, {0, 1, 2, 3, 4, 5, 6});
  Tensor cand = F32({1, 7}, {100, 50, -3, -4, -5, -6, -7});
  EXPECT_DOUBLE_EQ(*KendallTauTop5(ref, cand), -1.0);
  EXPECT_DOUBLE_EQ(*Top5Overlap(ref, cand), 0.6);
}

TEST(Metrics, KendallTauUndefinedCases) {
  // Candidate flat on the reference's top5: no association -> 0.
  EXPECT_EQ(*KendallTauTop5(F32({1, 5}, {5, 4, 3, 2, 1}), F32({1, 5}, {0, 0, 0, 0, 0})), 0.0);
  // Reference flat, candidate ordered -> 0.
  EXPECT_EQ(*KendallTauTop5(F32({1, 5}, {1, 1, 1, 1, 1}), F32({1, 5}, {5, 4, 3, 2, 1})), 0.0);
  // Both flat: they agree -> 1.
  EXPECT_EQ(*KendallTauTop5(F32({1, 5}, {1, 1, 1, 1, 1}), F32({1, 5}, {2, 2, 2, 2, 2})), 1.0);
  // C = 1: one class, a single "order" -> 1; overlap 1/1; top-1 always agrees.
  Tensor r1 = F32({2, 1}, {0.3f, -2}), c1 = F32({2, 1}, {7, 1});
  EXPECT_EQ(*KendallTauTop5(r1, c1), 1.0);
  EXPECT_EQ(*Top5Overlap(r1, c1), 1.0);
  EXPECT_EQ(*Top1Disagreement(r1, c1), 0.0);
}

TEST(Metrics, FewerThanFiveClasses) {
  // C = 2: ref [1 0], cand [0 1]. k = 2: both top-2 sets are {0,1} -> overlap 1;
  // one pair, discordant -> tau -1; top-1 0 vs 1 -> 100 % disagreement.
  Tensor ref = F32({1, 2}, {1, 0}), cand = F32({1, 2}, {0, 1});
  auto m = Agreement(ref, cand);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->top5_overlap, 1.0);
  EXPECT_EQ(m->kendall_tau, -1.0);
  EXPECT_EQ(m->top1_disagreement, 100.0);
  // C = 3: ref [3 2 1] cand [3 1 2]: pairs (0,1) c, (0,2) c, (1,2) d -> (2 - 1) / 3.
  EXPECT_NEAR(*KendallTauTop5(F32({1, 3}, {3, 2, 1}), F32({1, 3}, {3, 1, 2})), 1.0 / 3, 1e-15);
}

TEST(Metrics, KlDivergenceHandComputed) {
  // ref logits [0 0] -> p = [1/2 1/2]; cand logits [0 ln3] -> q = [1/4 3/4].
  // KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.14384103622589045.
  // Closed form for p = [1/2 1/2] against q = softmax([0 d]) = [1/(1+e^d), e^d/(1+e^d)].
  auto kl_half = [](double d) {
    const double q0 = 1 / (1 + std::exp(d));
    return 0.5 * std::log(0.5 / q0) + 0.5 * std::log(0.5 / (1 - q0));
  };
  const float ln3 = static_cast<float>(std::log(3.0));
  const double expected = kl_half(ln3);  // with the float ln3 actually stored
  EXPECT_NEAR(expected, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(*KlDivergence(F32({1, 2}, {0, 0}), F32({1, 2}, {0, ln3})), expected, 1e-15);
  // Shifting the logits by +-1000 must not matter (a naive exp overflows / underflows
  // to 0 there). In float, -1000 + ln3 rounds (spacing 6.1e-5), so the expected value
  // uses the difference that is actually stored.
  const float shifted = -1000.0f + ln3;
  EXPECT_NEAR(*KlDivergence(F32({1, 2}, {1000, 1000}), F32({1, 2}, {-1000, shifted})),
              kl_half(static_cast<double>(shifted) + 1000.0), 1e-13);
  // Mean over samples: second sample identical -> KL 0 -> mean expected / 2.
  EXPECT_NEAR(*KlDivergence(F32({2, 2}, {0, 0, 4, 5}), F32({2, 2}, {0, ln3, 4, 5})), expected / 2, 1e-15);
  // p = [1 0] (ref logit -inf): the 0 * log(0 / q) term is 0 -> KL = 1 * ln(1 / (1/2)) = ln 2.
  EXPECT_NEAR(*KlDivergence(F32({1, 2}, {0, -kInfF}), F32({1, 2}, {3, 3})), std::log(2.0), 1e-15);
  // q = 0 where p > 0 -> infinite.
  EXPECT_TRUE(std::isinf(*KlDivergence(F32({1, 2}, {0, 0}), F32({1, 2}, {0, -kInfF}))));
}

// Random scores on a coarse grid (0.5 steps) so that ties are common.
Tensor RandomScores(int64_t n, int64_t c, uint32_t seed, float step = 0.5f) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> v(static_cast<size_t>(n * c));
  for (float& x : v) x = step * static_cast<float>(d(rng));
  return F32({n, c}, v);
}

TEST(Metrics, IdenticalOutputs) {
  Tensor ref = RandomScores(9, 10, 1);
  Tensor cand = ref.Clone();
  auto m = Agreement(ref, cand);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->top1_disagreement, 0.0);
  EXPECT_EQ(m->top5_overlap, 1.0);
  EXPECT_EQ(m->kendall_tau, 1.0);  // with ties in ref: n1 = n2, so (n0-n1)/sqrt((n0-n1)^2) = 1
  EXPECT_EQ(m->kl_divergence, 0.0);
  double sumsq = 0;
  for (double v : ref.ToDoubles()) sumsq += v * v;
  EXPECT_TRUE(std::isfinite(m->sqnr_db));
  EXPECT_DOUBLE_EQ(m->sqnr_db, 20 * std::log10(std::sqrt(sumsq) / DBL_EPSILON));
  EXPECT_GT(m->sqnr_db, 300);
}

TEST(Metrics, ReversedScores) {
  // cand = -ref with distinct scores: every pair of ref's top5 discordant -> tau -1;
  // C = 10: top5 of cand is the bottom 5 of ref -> overlap 0; top-1 always differs.
  std::vector<float> r(30);
  for (int i = 0; i < 30; ++i) r[i] = static_cast<float>((i * 7) % 30);  // distinct per row
  std::vector<float> c(r);
  for (float& x : c) x = -x;
  auto m = Agreement(F32({3, 10}, r), F32({3, 10}, c));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kendall_tau, -1.0);
  EXPECT_EQ(m->top5_overlap, 0.0);
  EXPECT_EQ(m->top1_disagreement, 100.0);
  EXPECT_GT(m->kl_divergence, 0.0);
  EXPECT_NEAR(m->sqnr_db, 20 * std::log10(0.5), 1e-12);  // ||x|| / ||2x|| = 1/2
}

TEST(Metrics, AgreementRejectsBadInput) {
  auto r = Agreement(F32({2, 10}, {}), F32({2, 5}, {}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "reference float32[2x10] and candidate float32[2x5] differ in shape");
  EXPECT_FALSE(Agreement(F32({0, 10}, {}), F32({0, 10}, {})).ok());  // no samples
  EXPECT_FALSE(Agreement(Tensor(), F32({1, 1}, {0})).ok());
  EXPECT_FALSE(Agreement(Tensor::Scalar<float>(1), Tensor::Scalar<float>(1)).ok());
  AgreementAccumulator acc;
  EXPECT_FALSE(acc.Result().ok());
  ASSERT_TRUE(acc.Add(F32({1, 3}, {1, 2, 3}), F32({1, 3}, {1, 2, 3})).ok());
  Status s = acc.Add(F32({1, 4}, {1, 2, 3, 4}), F32({1, 4}, {1, 2, 3, 4}));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "batch has 4 classes per sample, earlier batches had 3");
  EXPECT_EQ(acc.samples(), 1);
}

// ---------------------------------------------------------------- references

// scipy.stats.kendalltau (variant 'b') written out from its definition, O(n^2) over
// pairs, with the undefined cases mapped as metrics.h documents (scipy gives NaN).
double BruteTauB(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n < 2) return 1;
  double con = 0, dis = 0, tx = 0, ty = 0, tot = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (j <= i) continue;
      ++tot;
      const double a = x[i] - x[j], b = y[i] - y[j];
      if (a == 0) ++tx;
      if (b == 0) ++ty;
      if (a * b > 0) ++con;
      if (a * b < 0) ++dis;
    }
  }
  if (tx == tot && ty == tot) return 1;
  if (tx == tot || ty == tot) return 0;
  return (con - dis) / std::sqrt((tot - tx) * (tot - ty));
}

// The k best classes by a full stable sort: score descending, index ascending.
std::vector<size_t> BruteTopK(const std::vector<double>& s, size_t k) {
  std::vector<size_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
  idx.resize(std::min(k, s.size()));
  return idx;
}

TEST(Metrics, AgreementMatchesBruteForceReference) {
  for (int64_t c : {1, 2, 3, 5, 6, 13}) {
    const int64_t n = 40;
    Tensor ref = RandomScores(n, c, 100 + static_cast<uint32_t>(c));
    Tensor cand = RandomScores(n, c, 200 + static_cast<uint32_t>(c));
    const std::vector<double> rd = ref.ToDoubles(), cd = cand.ToDoubles();
    double differ = 0, overlap = 0, tau = 0, kl = 0;
    const size_t k = static_cast<size_t>(std::min<int64_t>(5, c));
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> r(rd.begin() + i * c, rd.begin() + (i + 1) * c);
      std::vector<double> q(cd.begin() + i * c, cd.begin() + (i + 1) * c);
      const auto rt = BruteTopK(r, k), ct = BruteTopK(q, k);
      differ += rt[0] != ct[0];
      size_t common = 0;
      for (size_t a : rt) common += std::count(ct.begin(), ct.end(), a);
      overlap += static_cast<double>(common) / static_cast<double>(k);
      std::vector<double> x, y;
      for (size_t a : rt) {
        x.push_back(r[a]);
        y.push_back(q[a]);
      }
      tau += BruteTauB(x, y);
      // KL from plain softmax (the scores are small, no overflow).
      double zr = 0, zq = 0;
      for (int64_t j = 0; j < c; ++j) zr += std::exp(r[j]), zq += std::exp(q[j]);
      for (int64_t j = 0; j < c; ++j)
        kl += std::exp(r[j]) / zr * std::log((std::exp(r[j]) / zr) / (std::exp(q[j]) / zq));
    }
    auto m = Agreement(ref, cand);
    ASSERT_TRUE(m.ok());
    SCOPED_TRACE("C = " + std::to_string(c));
    EXPECT_DOUBLE_EQ(m->top1_disagreement, 100 * differ / n);
    EXPECT_NEAR(m->top5_overlap, overlap / n, 1e-12);
    EXPECT_NEAR(m->kendall_tau, tau / n, 1e-12);
    EXPECT_NEAR(m->kl_divergence, std::max(0.0, kl / n), 1e-12);
    if (c >= 5) {
      EXPECT_GT(m->top1_disagreement, 0);  // random data: the comparison is not vacuous
      EXPECT_LT(m->kendall_tau, 1);
    }
  }
}

// ---------------------------------------------------------------- accumulators

Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t c = t.numel() / t.dim(0);
  Tensor out(DType::kFloat32, {end - begin, c});
  std::copy(t.data<float>() + begin * c, t.data<float>() + end * c, out.data<float>());
  return out;
}

TEST(Metrics, AccumulatorsEqualWholeTensorFunctions) {
  const int64_t n = 37, c = 11;
  Tensor ref = RandomScores(n, c, 5);
  Tensor cand = RandomScores(n, c, 6, 0.25f);
  std::mt19937 rng(9);
  std::vector<int64_t> labels(n);
  for (auto& l : labels) l = std::uniform_int_distribution<int64_t>(0, c - 1)(rng);

  AgreementAccumulator agree;
  AccuracyAccumulator acc;
  int64_t pos = 0;
  for (int64_t len : {1, 5, 0, 13, 18}) {  // uneven, with an empty batch
    ASSERT_TRUE(agree.Add(Rows(ref, pos, pos + len), Rows(cand, pos, pos + len)).ok());
    std::vector<int64_t> lb(labels.begin() + pos, labels.begin() + pos + len);
    ASSERT_TRUE(acc.Add(Rows(cand, pos, pos + len), lb).ok());
    pos += len;
  }
  ASSERT_EQ(pos, n);
  auto m = agree.Result();
  ASSERT_TRUE(m.ok());
  // Exact equality: the accumulators sum per-sample values in sample order either way.
  EXPECT_EQ(m->samples, n);
  EXPECT_EQ(m->classes, c);
  EXPECT_EQ(m->top1_disagreement, *Top1Disagreement(ref, cand));
  EXPECT_EQ(m->top5_overlap, *Top5Overlap(ref, cand));
  EXPECT_EQ(m->kendall_tau, *KendallTauTop5(ref, cand));
  EXPECT_EQ(m->sqnr_db, *OutputSqnrDb(ref, cand));
  EXPECT_EQ(m->kl_divergence, *KlDivergence(ref, cand));
  // The SQNR over all samples is the SqnrDb of the concatenation.
  EXPECT_EQ(m->sqnr_db, SqnrDb(ref.data<float>(), cand.data<float>(), static_cast<size_t>(n * c)));
  // Sanity: the random data exercises every metric away from its extreme.
  EXPECT_GT(m->top1_disagreement, 0);
  EXPECT_LT(m->top5_overlap, 1);
  EXPECT_GT(m->kl_divergence, 0);

  auto a = acc.Result();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->samples, n);
  EXPECT_EQ(a->top1, *TopKAccuracy(cand, labels, 1));
  EXPECT_EQ(a->top5, *TopKAccuracy(cand, labels, 5));
  EXPECT_GT(a->top5, a->top1);
}

}  // namespace
}  // namespace seqto
