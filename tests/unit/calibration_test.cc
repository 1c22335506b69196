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
  for (CalibrationMethod m : {CalibrationMethod::kMinMax, CalibrationMethod::kEntropy, CalibrationMethod::kPercentile}) {
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
                              CalibrationMethod::kDistribution}) {
    auto p = ParseCalibrationMethod(CalibrationMethodName(m));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, m);
  }
  EXPECT_EQ(CalibrationMethodName(CalibrationMethod::kMinMax), "minmax");
  EXPECT_EQ(*ParseCalibrationMethod("MinMax"), CalibrationMethod::kMinMax);
  EXPECT_EQ(*ParseCalibrationMethod("Entropy"), CalibrationMethod::kEntropy);
  auto bad = ParseCalibrationMethod("mse");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'mse'"), std::string::npos);
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

}  // namespace
}  // namespace seqto::quant
