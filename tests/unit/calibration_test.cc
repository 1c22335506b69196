// Calibration: one-pass statistics against values computed from all the data at once
// (true min/max, hand-written moving averages, exact numpy-style histograms fed to
// ORT's threshold searches), bounded memory, batch-order independence, errors, and a
// calibration run over a small model checked against running the model by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "quant/calib/calibrate.h"
#include "quant/calib/stats.h"
#include "quant/scheme.h"

namespace seqto::quant {
namespace {

using Batch = std::vector<float>;

Tensor ToTensor(const Batch& b) { return Tensor::FromVector<float>({static_cast<int64_t>(b.size())}, b); }

CalibrationStats Collect(const std::vector<Batch>& batches, const CalibrationOptions& o = {},
                         const std::string& name = "t") {
  CalibrationStats stats({name}, o);
  for (const Batch& b : batches) {
    Status st = stats.Observe(name, ToTensor(b));
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return stats;
}

TensorRange RangeOf(const CalibrationStats& stats, CalibrationMethod m, const std::string& name = "t") {
  auto r = stats.Ranges(m);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? r->at(name) : TensorRange{};
}

TensorRange RangeOf(const CalibrationStats& stats, CalibrationMethod m, const CalibrationOptions& o) {
  auto r = stats.Ranges(m, o);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? r->at("t") : TensorRange{};
}

// np.histogram(values, bins, range=(lo, hi)) of all the data at once: what ORT builds.
calib::Histogram ExactHistogram(const std::vector<float>& values, size_t bins, double lo, double hi, bool absolute) {
  calib::Histogram h;
  h.lo = lo;
  h.hi = hi;
  h.counts.assign(bins, 0.0);
  for (float f : values) {
    const double v = absolute ? std::fabs(f) : f;
    double b = std::floor((v - lo) / (hi - lo) * static_cast<double>(bins));
    b = std::clamp(b, 0.0, static_cast<double>(bins - 1));
    h.counts[static_cast<size_t>(b)] += 1;
  }
  return h;
}

std::vector<float> Concat(const std::vector<Batch>& batches) {
  std::vector<float> all;
  for (const Batch& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

// N(0, 1) batches with a few outliers at +-40 in some of them.
std::vector<Batch> GaussianWithOutliers(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Batch> batches(20);
  for (size_t i = 0; i < batches.size(); ++i) {
    for (int j = 0; j < 5000; ++j) batches[i].push_back(normal(rng));
    if (i % 7 == 3) batches[i].push_back(40.f);
    if (i % 5 == 1) batches[i].push_back(-38.5f);
  }
  return batches;
}

// --- MinMax --------------------------------------------------------------------------

TEST(QuantCalibration, MinMaxIsTheTrueMinMaxOverAllBatches) {
  std::mt19937 rng(7);
  std::vector<Batch> batches;
  float lo = 1e30f, hi = -1e30f;
  for (int i = 0; i < 12; ++i) {
    std::uniform_real_distribution<float> u(-0.5f * static_cast<float>(i + 1), 0.3f * static_cast<float>(i * i + 1));
    Batch b(257);
    for (float& v : b) {
      v = u(rng);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    batches.push_back(b);
  }
  const CalibrationStats stats = Collect(batches);
  EXPECT_EQ(stats.batches(), 12u);
  const TensorRange r = RangeOf(stats, CalibrationMethod::kMinMax);
  EXPECT_EQ(r.min, lo);
  EXPECT_EQ(r.max, hi);
}

TEST(QuantCalibration, MovingAverageMatchesHandLoop) {
  // Batch i holds {-(i+1), 2(i+1)^2, 0.5}: its min is -(i+1), its max 2(i+1)^2.
  std::vector<Batch> batches;
  for (int i = 0; i < 10; ++i) {
    const float k = static_cast<float>(i + 1);
    batches.push_back({-k, 2 * k * k, 0.5f});
  }
  auto hand = [&](int chunk, double c) {
    // ORT: mean of per-batch min/max inside each chunk, chunks merged m += c (mean - m).
    double m0 = 0, m1 = 0, s0 = 0, s1 = 0;
    int n = 0;
    bool have = false;
    auto merge = [&] {
      const double a = s0 / n, b = s1 / n;
      m0 = have ? m0 + c * (a - m0) : a;
      m1 = have ? m1 + c * (b - m1) : b;
      have = true;
      s0 = s1 = 0;
      n = 0;
    };
    for (int i = 0; i < 10; ++i) {
      s0 += -(i + 1);
      s1 += 2.0 * (i + 1) * (i + 1);
      if (++n == chunk) merge();
    }
    if (n > 0) merge();
    return std::make_pair(m0, m1);
  };
  for (int chunk : {0, 1, 3}) {
    CalibrationOptions o;
    o.moving_average = true;
    o.moving_average_chunk = chunk;
    const TensorRange r = RangeOf(Collect(batches, o), CalibrationMethod::kMinMax);
    const auto [m0, m1] = hand(chunk, 0.01);
    EXPECT_NEAR(r.min, m0, 1e-12) << "chunk " << chunk;
    EXPECT_NEAR(r.max, m1, 1e-12) << "chunk " << chunk;
  }
  // Chunk 0 is the plain mean: mins -1..-10 -> -5.5; maxes 2 * (1 + 4 + ... + 100) / 10 = 77.
  CalibrationOptions o;
  o.moving_average = true;
  const TensorRange r = RangeOf(Collect(batches, o), CalibrationMethod::kMinMax);
  EXPECT_DOUBLE_EQ(r.min, -5.5);
  EXPECT_DOUBLE_EQ(r.max, 77.0);
  // Chunk 1 with c = 0.01 is the per-batch EMA: m = -1, then m += 0.01 (-2 - m), ... (hand loop above);
  // after batch 2 alone: -1 + 0.01 * (-2 + 1) = -1.01.
  o.moving_average_chunk = 1;
  const TensorRange two = RangeOf(Collect({batches[0], batches[1]}, o), CalibrationMethod::kMinMax);
  EXPECT_DOUBLE_EQ(two.min, -1.01);
  EXPECT_DOUBLE_EQ(two.max, 2 + 0.01 * (8 - 2));
}

// --- Percentile ----------------------------------------------------------------------

std::vector<Batch> Ramp(bool shuffle) {
  std::vector<float> values(100000);
  for (int i = 0; i < 100000; ++i) values[i] = static_cast<float>(i);
  if (shuffle) std::shuffle(values.begin(), values.end(), std::mt19937(3));
  std::vector<Batch> batches;
  for (int i = 0; i < 10; ++i) batches.emplace_back(values.begin() + i * 10000, values.begin() + (i + 1) * 10000);
  return batches;
}

TEST(QuantCalibration, PercentileOnARampIsWithinOneBinOfTheTruePercentile) {
  // 0..99999: the 99.999th percentile of 100000 values is ~99998; symmetric (|x|) histogram of
  // 2048 bins over [0, 99999]: bin width 99999 / 2048 = 48.8; min 0 clamps -t to 0.
  const double width = 99999.0 / 2048;
  for (bool shuffle : {false, true}) {
    const CalibrationStats stats = Collect(Ramp(shuffle));
    TensorRange r = RangeOf(stats, CalibrationMethod::kPercentile);
    EXPECT_EQ(r.min, 0.0);
    EXPECT_NEAR(r.max, 99998.0, width);
    CalibrationOptions o;
    o.percentile = 50;
    r = RangeOf(stats, CalibrationMethod::kPercentile, o);
    EXPECT_NEAR(r.max, 50000.0, width);
    // Asymmetric, 99%: 0.5% cut on each side -> [500, 99500] within one bin of the signed
    // histogram over [-99999, 99999] (width 97.7).
    o.percentile = 99;
    o.percentile_symmetric = false;
    r = RangeOf(stats, CalibrationMethod::kPercentile, o);
    EXPECT_NEAR(r.min, 500.0, 2 * width);
    EXPECT_NEAR(r.max, 99500.0, 2 * width);
  }
}

TEST(QuantCalibration, PercentileMatchesTheExactHistogram) {
  // ORT's answer on the exact histogram of all the data, and the one-pass answer: the
  // bound is a bin edge, so they agree to within one bin.
  const std::vector<Batch> batches = GaussianWithOutliers(11);
  const std::vector<float> all = Concat(batches);
  const CalibrationStats stats = Collect(batches);
  float amin = 1e30f;
  for (float v : all) amin = std::min(amin, std::fabs(v));
  const calib::Histogram exact = ExactHistogram(all, 2048, amin, 40.0, true);
  for (double pct : {99.999, 99.9, 99.0, 90.0}) {
    CalibrationOptions o;
    o.percentile = pct;
    const auto [lo, hi] = calib::PercentileThreshold(exact, pct, true);
    const TensorRange r = RangeOf(stats, CalibrationMethod::kPercentile, o);
    // ORT clamps [-t, t] to [min, max] = [-38.5, 40].
    EXPECT_NEAR(r.max, std::min(hi, 40.0), (40.0 - amin) / 2048 * 1.01) << pct;
    EXPECT_NEAR(r.min, std::max(lo, -38.5), (40.0 - amin) / 2048 * 1.01) << pct;
  }
}

// --- Entropy -------------------------------------------------------------------------

TEST(QuantCalibration, EntropyIgnoresOutliersAndBatchOrder) {
  std::vector<Batch> batches = GaussianWithOutliers(5);
  CalibrationOptions o;
  o.entropy_num_bins = 2048;
  o.entropy_num_quantized_bins = 128;
  const TensorRange r = RangeOf(Collect(batches, o), CalibrationMethod::kEntropy);
  // Min/max are the outliers; the KL threshold keeps the bulk of N(0, 1) but not them.
  const TensorRange mm = RangeOf(Collect(batches, o), CalibrationMethod::kMinMax);
  EXPECT_EQ(mm.max, 40.0);
  EXPECT_EQ(mm.min, -38.5);
  EXPECT_GT(r.max, 2.0);
  EXPECT_LT(r.max, 15.0);
  EXPECT_LT(r.min, -2.0);
  EXPECT_GT(r.min, -15.0);
  // Same data, other batch orders: the same range (the histogram's range depends only on
  // the overall max |x|).
  std::reverse(batches.begin(), batches.end());
  const TensorRange rev = RangeOf(Collect(batches, o), CalibrationMethod::kEntropy);
  std::shuffle(batches.begin(), batches.end(), std::mt19937(9));
  const TensorRange shuf = RangeOf(Collect(batches, o), CalibrationMethod::kEntropy);
  const double bin = 80.0 / 2048;
  EXPECT_NEAR(rev.min, r.min, bin);
  EXPECT_NEAR(rev.max, r.max, bin);
  EXPECT_NEAR(shuf.min, r.min, bin);
  EXPECT_NEAR(shuf.max, r.max, bin);
  // And close to ORT's search on the exact histogram of all the data (within a few bins: the
  // one-pass histogram is re-binned).
  const calib::Histogram exact = ExactHistogram(Concat(batches), 2048, -40.0, 40.0, false);
  const auto [lo, hi] = calib::EntropyThreshold(exact, 128);
  EXPECT_NEAR(r.min, std::max(lo, -38.5), 4 * bin);
  EXPECT_NEAR(r.max, std::min(hi, 40.0), 4 * bin);
}

TEST(QuantCalibration, EntropyWithOrtDefaultsIsTheWholeRange) {
  // 128 bins and 128 quantized bins leave a single window: the whole histogram, clamped
  // to min/max (ORT behaves the same).
  const TensorRange r = RangeOf(Collect(GaussianWithOutliers(5)), CalibrationMethod::kEntropy);
  EXPECT_EQ(r.min, -38.5);
  EXPECT_EQ(r.max, 40.0);
}

TEST(QuantCalibration, OneBatchWithPowerOfTwoMaxMatchesOrtExactly) {
  // max |x| = 4, a power of two: the one-pass histogram's bins line up with ORT's, so
  // re-binning is exact and the results equal ORT's on the exact histogram.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 0.7f);
  Batch b;
  // 200000 values: large enough for the parallel, vectorized path of Observe.
  for (int i = 0; i < 200000; ++i) b.push_back(std::clamp(normal(rng), -3.9f, 3.9f));
  b.push_back(4.f);
  b.push_back(-1.5f);
  const double bmin = *std::min_element(b.begin(), b.end());
  CalibrationOptions o;
  o.entropy_num_bins = 1024;
  const CalibrationStats stats = Collect({b}, o);
  calib::Histogram exact = ExactHistogram(b, 1024, -4.0, 4.0, false);
  auto [lo, hi] = calib::EntropyThreshold(exact, 128);
  TensorRange r = RangeOf(stats, CalibrationMethod::kEntropy);
  EXPECT_EQ(r.min, std::max(lo, bmin));
  EXPECT_EQ(r.max, std::min(hi, 4.0));
  EXPECT_LT(r.max, 4.0);  // the search did cut the range (so the comparison means something)
  o.percentile_symmetric = false;
  o.percentile = 99.5;
  std::tie(lo, hi) = calib::PercentileThreshold(ExactHistogram(b, 2048, -4.0, 4.0, false), 99.5, false);
  r = RangeOf(stats, CalibrationMethod::kPercentile, o);
  EXPECT_EQ(r.min, std::max(lo, bmin));
  EXPECT_EQ(r.max, std::min(hi, 4.0));
  EXPECT_GT(r.min, bmin);
  EXPECT_LT(r.max, 4.0);
}

// --- Distribution --------------------------------------------------------------------

TEST(QuantCalibration, DistributionGivesSymmetricRangeAndMoments) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Batch> batches(10);
  for (Batch& b : batches)
    for (int i = 0; i < 10000; ++i) b.push_back(normal(rng));
  const CalibrationStats stats = Collect(batches);
  const TensorRange mm = RangeOf(stats, CalibrationMethod::kMinMax);
  const double t = std::max(-mm.min, mm.max);
  TensorRange r = RangeOf(stats, CalibrationMethod::kDistribution);
  EXPECT_EQ(r.min, -t);  // [-T, T], not clamped to min/max
  EXPECT_EQ(r.max, t);
  EXPECT_NEAR(r.avg, 0.0, 0.02);
  EXPECT_NEAR(r.stddev, 1.0, 0.02);
  // p3: moments of sign(x)|x|^(1/3): E = 0, E[|x|^(2/3)] = 2^(1/3) Gamma(5/6) / sqrt(pi) = 0.8024,
  // so the standard deviation is sqrt(0.8024) = 0.8958.
  CalibrationOptions o;
  o.distribution_scenario = "p3";
  r = RangeOf(stats, CalibrationMethod::kDistribution, o);
  EXPECT_NEAR(r.avg, 0.0, 0.02);
  EXPECT_NEAR(r.stddev, 0.8958, 0.02);
  // ORT's limits.
  o.distribution_num_bins = 128;
  EXPECT_FALSE(stats.Ranges(CalibrationMethod::kDistribution, o).ok());
  o.distribution_num_bins = 2048;
  o.distribution_scenario = "p4";
  EXPECT_FALSE(stats.Ranges(CalibrationMethod::kDistribution, o).ok());
}

// --- statistics ----------------------------------------------------------------------

TEST(QuantCalibration, HistogramMemoryIsBounded) {
  CalibrationStats stats({"a", "b"}, CalibrationOptions{});
  const size_t bins = stats.histogram_bins();
  EXPECT_EQ(bins, 8u * 2048);  // 8 x the largest method bin count
  size_t after_first = 0;
  float scale = 1e-3f;
  for (int i = 0; i < 200; ++i, scale *= 1.2f) {  // the range grows ~1e16 times
    Batch b(100);
    for (int j = 0; j < 100; ++j) b[j] = scale * static_cast<float>(j - 30);
    ASSERT_TRUE(stats.Observe("a", ToTensor(b)).ok());
    ASSERT_TRUE(stats.Observe("b", ToTensor(b)).ok());
    if (i == 0) after_first = stats.memory_bytes();
  }
  EXPECT_EQ(stats.histogram_bins(), bins);
  EXPECT_EQ(stats.memory_bytes(), after_first);
  EXPECT_LT(stats.memory_bytes(), 2 * bins * sizeof(double) + 4096);
  // The merged histogram still holds every value, and re-binning keeps the mass.
  calib::TensorStats ts(1024);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  double n = 0;
  for (int i = 0; i < 30; ++i) {
    Batch b(333);
    for (float& v : b) v = u(rng) * std::pow(1.5f, static_cast<float>(i));
    ASSERT_TRUE(ts.Add(ToTensor(b), {}).ok());
    n += 333;
  }
  EXPECT_EQ(ts.hist.bins(), 1024u);
  EXPECT_EQ(ts.hist.total(), n);
  EXPECT_NEAR(ts.hist.Rebin(100, -ts.abs_max(), ts.abs_max(), false).total(), n, 1e-6 * n);
  EXPECT_NEAR(ts.hist.Rebin(100, ts.abs_min, ts.abs_max(), true).total(), n, 1e-6 * n);
}

TEST(QuantCalibration, AllZeroTensorAndUnobservedNames) {
  const CalibrationStats stats = Collect({Batch(10, 0.f), Batch(5, 0.f)});
  for (CalibrationMethod m : {CalibrationMethod::kMinMax, CalibrationMethod::kEntropy, CalibrationMethod::kPercentile,
                              CalibrationMethod::kMse}) {
    const TensorRange r = RangeOf(stats, m);
    EXPECT_EQ(r.min, 0.0) << CalibrationMethodName(m);
    EXPECT_EQ(r.max, 0.0) << CalibrationMethodName(m);
  }
  // A zero batch, then real values: the zeros land in the bin of 0.
  const CalibrationStats later = Collect({Batch(1000, 0.f), Batch{-1.f, 1.f}});
  CalibrationOptions o;
  o.percentile = 50;
  EXPECT_EQ(RangeOf(later, CalibrationMethod::kPercentile, o).max, 0.0);
  // A listed tensor never observed is an error naming it.
  CalibrationStats missing({"t", "ghost"}, CalibrationOptions{});
  ASSERT_TRUE(missing.Observe("t", ToTensor({1.f})).ok());
  ASSERT_TRUE(missing.Observe("unlisted", ToTensor({1.f})).ok());  // ignored
  auto r = missing.Ranges(CalibrationMethod::kMinMax);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'ghost'"), std::string::npos) << r.error().message;
}

TEST(QuantCalibration, NanOrInfIsAnErrorNamingTheTensor) {
  CalibrationStats stats({"conv1_out"}, CalibrationOptions{});
  ASSERT_TRUE(stats.Observe("conv1_out", ToTensor({1.f, 2.f})).ok());
  Status st = stats.Observe("conv1_out", ToTensor({1.f, NAN}));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kUser);
  EXPECT_NE(st.message().find("tensor 'conv1_out'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NaN"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("batch 2"), std::string::npos) << st.message();
  st = stats.Observe("conv1_out", ToTensor({-INFINITY}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'conv1_out'"), std::string::npos);
  st = stats.Observe("conv1_out", Tensor::FromVector<int64_t>({1}, {3}));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("float32"), std::string::npos);
}

TEST(QuantCalibration, MethodNames) {
  for (CalibrationMethod m : {CalibrationMethod::kMinMax, CalibrationMethod::kEntropy, CalibrationMethod::kPercentile,
                              CalibrationMethod::kDistribution, CalibrationMethod::kMse}) {
    auto p = ParseCalibrationMethod(CalibrationMethodName(m));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, m);
  }
  EXPECT_EQ(CalibrationMethodName(CalibrationMethod::kMinMax), "minmax");
  EXPECT_EQ(*ParseCalibrationMethod("MinMax"), CalibrationMethod::kMinMax);
  EXPECT_EQ(*ParseCalibrationMethod("Entropy"), CalibrationMethod::kEntropy);
  EXPECT_EQ(CalibrationMethodName(CalibrationMethod::kMse), "mse");
  EXPECT_EQ(*ParseCalibrationMethod("mse"), CalibrationMethod::kMse);
  EXPECT_EQ(*ParseCalibrationMethod("MSE"), CalibrationMethod::kMse);
  auto bad = ParseCalibrationMethod("kl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'kl'"), std::string::npos);
  EXPECT_NE(bad.error().message.find("mse"), std::string::npos) << bad.error().message;  // listed as expected
}

// --- Calibrate on a model --------------------------------------------------------------

ir::ValueInfo Info(const std::string& name, std::vector<int64_t> dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape.emplace();
  for (int64_t d : dims) v.shape->push_back(d >= 0 ? ir::Dim{d, ""} : ir::Dim{-1, "N"});
  return v;
}

ir::Node Node(const std::string& name, const std::string& op, std::vector<std::string> in,
              std::vector<std::string> out) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// x[N, 4] -> MatMul W[4, 3] -> mm -> Relu -> y
ir::Model MatMulRelu(const std::vector<float>& w) {
  ir::Model m;
  m.opsets = {{"", 13}};
  m.graph.inputs = {Info("x", {-1, 4})};
  m.graph.outputs = {Info("y", {-1, 3})};
  m.graph.initializers["W"] = Tensor::FromVector<float>({4, 3}, w);
  m.graph.nodes = {Node("mm", "MatMul", {"x", "W"}, {"mm_out"}), Node("relu", "Relu", {"mm_out"}, {"y"})};
  return m;
}

TEST(QuantCalibration, CalibrateObservesIntermediateValues) {
  const std::vector<float> w = {0.5f, -1.f, 2.f, 1.5f, 0.25f, -0.75f, -2.f, 1.f, 0.f, 0.1f, -0.3f, 0.6f};
  const ir::Model model = MatMulRelu(w);
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::vector<Tensor> inputs;
  for (int i = 0; i < 4; ++i) {
    Tensor x(DType::kFloat32, {5, 4});
    for (int64_t j = 0; j < x.numel(); ++j) x.data<float>()[j] = u(rng);
    inputs.push_back(x);
  }
  // The model by hand: mm = x W, y = max(mm, 0).
  double xmin = 1e30, xmax = -1e30, mmin = 1e30, mmax = -1e30, ymin = 1e30, ymax = -1e30;
  for (const Tensor& x : inputs)
    for (int n = 0; n < 5; ++n) {
      for (int k = 0; k < 4; ++k) {
        xmin = std::min<double>(xmin, x.data<float>()[n * 4 + k]);
        xmax = std::max<double>(xmax, x.data<float>()[n * 4 + k]);
      }
      for (int c = 0; c < 3; ++c) {
        float s = 0;
        for (int k = 0; k < 4; ++k) s += x.data<float>()[n * 4 + k] * w[k * 3 + c];
        mmin = std::min<double>(mmin, s);
        mmax = std::max<double>(mmax, s);
        ymin = std::min<double>(ymin, std::max(s, 0.f));
        ymax = std::max<double>(ymax, std::max(s, 0.f));
      }
    }
  size_t next = 0;
  std::vector<size_t> progress;
  BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next == inputs.size()) return false;
    feeds["x"] = inputs[next++];
    return true;
  };
  auto stats = Calibrate(model, {"x", "mm_out", "y"}, source, CalibrationOptions{}, 1,
                         [&](size_t done) { progress.push_back(done); });
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->batches(), 4u);
  EXPECT_EQ(progress, (std::vector<size_t>{1, 2, 3, 4}));
  auto ranges = stats->Ranges(CalibrationMethod::kMinMax);
  ASSERT_TRUE(ranges.ok()) << ranges.error().message;
  EXPECT_EQ(ranges->at("x").min, xmin);
  EXPECT_EQ(ranges->at("x").max, xmax);
  EXPECT_NEAR(ranges->at("mm_out").min, mmin, 1e-5);
  EXPECT_NEAR(ranges->at("mm_out").max, mmax, 1e-5);
  EXPECT_NEAR(ranges->at("y").min, ymin, 1e-5);
  EXPECT_NEAR(ranges->at("y").max, ymax, 1e-5);
  EXPECT_LT(mmin, 0.0);  // the test means something: Relu changed the range
  EXPECT_EQ(ranges->at("y").min, 0.0);
}

TEST(QuantCalibration, CalibrateErrors) {
  const ir::Model model = MatMulRelu(std::vector<float>(12, 1.f));
  int calls = 0;
  BatchSource one = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (calls++ > 0) return false;
    feeds["x"] = Tensor(DType::kFloat32, {2, 4});
    return true;
  };
  // An initializer or an unknown name cannot be calibrated.
  auto r = Calibrate(model, {"W"}, one, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'W'"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("initializer"), std::string::npos) << r.error().message;
  r = Calibrate(model, {"nope"}, one, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'nope'"), std::string::npos);
  // No batches.
  BatchSource none = [](runtime::TensorMap&) -> Expected<bool> { return false; };
  r = Calibrate(model, {"y"}, none, {});
  ASSERT_FALSE(r.ok());
  // A failing data source, a bad batch, and NaN in the data name where.
  BatchSource failing = [](runtime::TensorMap&) -> Expected<bool> { return UserError("cannot read sample 3"); };
  r = Calibrate(model, {"y"}, failing, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cannot read sample 3"), std::string::npos);
  BatchSource wrong = [](runtime::TensorMap& feeds) -> Expected<bool> {
    feeds["x"] = Tensor(DType::kFloat32, {2, 5});
    return true;
  };
  r = Calibrate(model, {"y"}, wrong, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("calibration batch 1"), std::string::npos) << r.error().message;
  BatchSource nan = [](runtime::TensorMap& feeds) -> Expected<bool> {
    feeds["x"] = Tensor::FromVector<float>({1, 4}, {1, NAN, 0, 0});
    return true;
  };
  r = Calibrate(model, {"mm_out"}, nan, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'mm_out'"), std::string::npos) << r.error().message;
}

// --- MSE -------------------------------------------------------------------------------

// The mean squared quantize-dequantize error of `values` with the range [lo, hi], computed
// on the data through the scheme (what the quantized model will do), uint8.
double QdqMse(const std::vector<float>& values, double lo, double hi, bool symmetric = false) {
  RangeOptions ro;
  ro.type = QuantType::kUInt8;
  ro.symmetric = symmetric;
  auto sz = ComputeScaleZeroPoint(lo, hi, ro);
  EXPECT_TRUE(sz.ok());
  if (!sz.ok()) return INFINITY;
  QuantParams p;
  p.type = QuantType::kUInt8;
  p.scale = {sz->scale};
  p.zero_point = {sz->zero_point};
  auto q = QuantizeTensor(ToTensor(values), p);
  EXPECT_TRUE(q.ok());
  if (!q.ok()) return INFINITY;
  auto y = DequantizeTensor(*q, p);
  EXPECT_TRUE(y.ok());
  if (!y.ok()) return INFINITY;
  const float* d = y->data<float>();
  double e = 0;
  for (size_t i = 0; i < values.size(); ++i) e += (static_cast<double>(values[i]) - d[i]) * (values[i] - d[i]);
  return e / static_cast<double>(values.size());
}

// 2M values of N(0, 1) and one outlier on each side. MSE trades an outlier's clipping
// error against the rounding noise of every value: clipping [-T, T] costs about
// 2 (40 - T)^2 / N and saves (80^2 - (2T)^2) / (12 * 255^2) of noise, so at N = 2M the
// balance is near T = 6.5 (at N = 1M it would be near 11: outliers must be rare to be
// clipped).
std::vector<Batch> GaussianWithRareOutliers(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Batch> batches(40);
  for (Batch& b : batches)
    for (int j = 0; j < 50000; ++j) b.push_back(normal(rng));
  batches[7].push_back(40.f);
  batches[29].push_back(-38.5f);
  return batches;
}

TEST(QuantCalibration, MseClipsRareOutliersAndLowersTheQuantizationError) {
  std::vector<Batch> batches = GaussianWithRareOutliers(11);
  const std::vector<float> all = Concat(batches);
  const CalibrationStats stats = Collect(batches);
  const TensorRange mm = RangeOf(stats, CalibrationMethod::kMinMax);
  ASSERT_EQ(mm.min, -38.5);
  ASSERT_EQ(mm.max, 40.0);
  const TensorRange r = RangeOf(stats, CalibrationMethod::kMse);
  // Well inside the outliers, outside the bulk of N(0, 1).
  EXPECT_GT(r.max, 2.5);
  EXPECT_LT(r.max, 10.0);
  EXPECT_LT(r.min, -2.5);
  EXPECT_GT(r.min, -10.0);
  // Measured on the data: minmax's range has noise (78.5 / 255)^2 / 12 = 0.0079 per value;
  // the MSE range pays ~(34^2 + 32^2) / 2e6 = 0.0011 for the outliers plus little noise.
  const double e_mm = QdqMse(all, mm.min, mm.max), e_mse = QdqMse(all, r.min, r.max);
  EXPECT_NEAR(e_mm, 0.0079, 0.0004);
  EXPECT_LT(e_mse, 0.3 * e_mm) << "mse " << e_mse << " minmax " << e_mm;
  // The method's error model predicts those measured errors.
  calib::TensorStats ts(stats.histogram_bins());
  for (const Batch& b : batches) ASSERT_TRUE(ts.Add(ToTensor(b), {}).ok());
  for (const auto& [lo, hi] : {std::pair{mm.min, mm.max}, std::pair{r.min, r.max}, std::pair{-2.0, 3.0}}) {
    auto predicted = calib::MseExpectedError(ts, lo, hi, {});
    ASSERT_TRUE(predicted.ok());
    EXPECT_NEAR(*predicted, QdqMse(all, lo, hi), 0.03 * QdqMse(all, lo, hi)) << lo << " " << hi;
  }
  // Other batch orders: the same histogram, min and max, so exactly the same range.
  std::reverse(batches.begin(), batches.end());
  const TensorRange rev = RangeOf(Collect(batches), CalibrationMethod::kMse);
  std::shuffle(batches.begin(), batches.end(), std::mt19937(3));
  const TensorRange shuf = RangeOf(Collect(batches), CalibrationMethod::kMse);
  EXPECT_EQ(rev.min, r.min);
  EXPECT_EQ(rev.max, r.max);
  EXPECT_EQ(shuf.min, r.min);
  EXPECT_EQ(shuf.max, r.max);
}

TEST(QuantCalibration, MseOnUniformDataIsAlmostMinMax) {
  // An even ramp over [-1, 3]: no tail to trade against. The optimum still clips a sliver
  // at each end: with density N/4, clipping d costs N d^3 / 12 per end and saves
  // N (4 - 2d)^2 / (12 * 255^2) of noise, balanced at d = 0.0064 (0.16% of the range).
  Batch b;
  const int n = 200001;
  for (int i = 0; i < n; ++i) b.push_back(static_cast<float>(-1.0 + 4.0 * i / (n - 1)));
  std::vector<Batch> batches;
  for (size_t i = 0; i < b.size(); i += 50000)
    batches.emplace_back(b.begin() + i, b.begin() + std::min(b.size(), i + 50000));
  const CalibrationStats stats = Collect(batches);
  const TensorRange mm = RangeOf(stats, CalibrationMethod::kMinMax);
  const TensorRange r = RangeOf(stats, CalibrationMethod::kMse);
  const double bin = 4.0 / 2048;  // an ORT-sized bin over the data
  EXPECT_NEAR(r.min, mm.min, 10 * bin);
  EXPECT_NEAR(r.max, mm.max, 10 * bin);
  EXPECT_LE(QdqMse(b, r.min, r.max), 1.001 * QdqMse(b, mm.min, mm.max));
}

TEST(QuantCalibration, MseMatchesABruteForceSearchOnReluData) {
  // Relu(N(0, 1)): half the values are exact zeros, which the grid represents exactly.
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.f, 1.f);
  Batch b;
  for (int i = 0; i < 40000; ++i) b.push_back(std::max(0.f, normal(rng)));
  const CalibrationStats stats = Collect({b});
  const TensorRange mm = RangeOf(stats, CalibrationMethod::kMinMax);
  const TensorRange r = RangeOf(stats, CalibrationMethod::kMse);
  EXPECT_EQ(r.min, 0.0);
  EXPECT_LT(r.max, mm.max);
  // The best upper bound on a fine scan, measured on the data through the scheme.
  double best = INFINITY, best_hi = 0;
  for (int i = 1; i <= 400; ++i) {
    const double hi = mm.max * i / 400;
    const double e = QdqMse(b, 0, hi);
    if (e < best) best = e, best_hi = hi;
  }
  const double e = QdqMse(b, r.min, r.max);
  EXPECT_LE(e, 1.02 * best) << "mse range " << r.max << " (" << e << "), scan " << best_hi << " (" << best << ")";
  EXPECT_NEAR(r.max, best_hi, 0.1 * best_hi);
}

TEST(QuantCalibration, MseSymmetricAndOptions) {
  const std::vector<Batch> batches = GaussianWithRareOutliers(12);
  const std::vector<float> all = Concat(batches);
  const CalibrationStats stats = Collect(batches);
  CalibrationOptions o;
  o.mse_symmetric = true;
  o.mse_num_levels = 255;  // symmetric uint8: [0, 254]
  const TensorRange r = RangeOf(stats, CalibrationMethod::kMse, o);
  EXPECT_EQ(r.min, -r.max);
  EXPECT_GT(r.max, 2.5);
  EXPECT_LT(r.max, 10.0);
  EXPECT_LT(QdqMse(all, r.min, r.max, true), 0.6 * QdqMse(all, -40.0, 40.0, true));
  // Fewer levels: more rounding noise per step, so the range shrinks (4 bits: ~2.5 sigma).
  o.mse_num_levels = 15;
  const TensorRange r4 = RangeOf(stats, CalibrationMethod::kMse, o);
  EXPECT_LT(r4.max, r.max);
  EXPECT_GT(r4.max, 1.5);
  EXPECT_LT(r4.max, 3.5);
  o.mse_num_levels = 1;
  auto bad = stats.Ranges(CalibrationMethod::kMse, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'t'"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("levels"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace seqto::quant
