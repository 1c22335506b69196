// Learned rounding (quant/recover/adaround.cc) on a hand-built chain with every layer
// kind it refines (conv, depthwise conv, 1x1 conv, Gemm, MatMul): each layer's
// output error on the calibration data goes down, every integer stays within one of
// round-to-nearest and within the type's range, the quantized model's output gets
// closer to the float one on other data, an excluded group gets its float weight
// back, and the same seed gives the same model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "quant/calib/calibrate.h"
#include "quant/recover/recover.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto::quant::recover {
namespace {

using namespace seqto::testing;
using nlohmann::json;

// x [N, 4, 6, 6] -> A: conv 3x3 pad 1 (8) -> Relu -> B: depthwise 3x3 pad 1 ->
// Relu -> C: conv 1x1 stride 2 (8 -> 6) -> Flatten [N, 54] -> G: Gemm (transB, bias)
// [N, 10] -> Relu -> M: MatMul [10, 5] = y.
ir::Model Chain() {
  std::mt19937 rng(1);
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.name = "chain";
  g.inputs.push_back(FloatValue("x", {{-1, "N"}, {4}, {6}, {6}}));
  g.outputs.push_back(FloatValue("y", {{-1, "N"}, {5}}));
  // A's channels span 100x in range (as BN folding leaves them): per-tensor
  // quantization rounds the weak ones coarsely, which is where rounding matters.
  Tensor wa = RandomTensor({8, 4, 3, 3}, rng, -0.3f, 0.3f);
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t k = 0; k < 36; ++k) wa.data<float>()[c * 36 + k] *= std::pow(10.0f, float(c % 3) - 2.0f);
  g.initializers["wa"] = wa;
  g.initializers["ba"] = RandomTensor({8}, rng, 0.0f, 0.2f);
  g.initializers["wb"] = RandomTensor({8, 1, 3, 3}, rng, -0.5f, 0.5f);
  g.initializers["bb"] = RandomTensor({8}, rng, 0.0f, 0.2f);
  g.initializers["wc"] = RandomTensor({6, 8, 1, 1}, rng, -0.5f, 0.5f);
  g.initializers["wg"] = RandomTensor({10, 54}, rng, -0.2f, 0.2f);
  g.initializers["bg"] = RandomTensor({10}, rng, -0.1f, 0.1f);
  g.initializers["wm"] = RandomTensor({10, 5}, rng, -0.5f, 0.5f);
  ir::Node a = MakeNode("A", "Conv", {"x", "wa", "ba"}, {"a"});
  a.attributes["pads"] = Ints({1, 1, 1, 1});
  ir::Node b = MakeNode("B", "Conv", {"ar", "wb", "bb"}, {"b"});
  b.attributes["pads"] = Ints({1, 1, 1, 1});
  b.attributes["group"] = Int(8);
  ir::Node c = MakeNode("C", "Conv", {"br", "wc"}, {"c"});
  c.attributes["strides"] = Ints({2, 2});
  ir::Node gemm = MakeNode("G", "Gemm", {"f", "wg", "bg"}, {"gy"});
  gemm.attributes["transB"] = Int(1);
  g.nodes = {a,
             MakeNode("relu_a", "Relu", {"a"}, {"ar"}),
             b,
             MakeNode("relu_b", "Relu", {"b"}, {"br"}),
             c,
             MakeNode("flatten", "Flatten", {"c"}, {"f"}),
             gemm,
             MakeNode("relu_g", "Relu", {"gy"}, {"gr"}),
             MakeNode("M", "MatMul", {"gr", "wm"}, {"y"})};
  return m;
}

const std::vector<std::string> kWeights = {"wa", "wb", "wc", "wg", "wm"};

// Inputs correlated as images are (smooth across positions, similar across
// channels): rounding to nearest minimizes the weight error, which is the output
// error only for uncorrelated inputs, so this is where learned rounding helps.
std::vector<runtime::TensorMap> Samples(uint32_t seed, int batches, int64_t batch) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<runtime::TensorMap> out;
  for (int i = 0; i < batches; ++i) {
    Tensor x(DType::kFloat32, {batch, 4, 6, 6});
    float* p = x.data<float>();
    for (int64_t n = 0; n < batch; ++n) {
      const float level = u(rng), slope_y = u(rng), slope_x = u(rng);
      for (int64_t c = 0; c < 4; ++c) {
        const float own = 0.3f * u(rng);
        for (int64_t y = 0; y < 6; ++y)
          for (int64_t z = 0; z < 6; ++z) *p++ = level + own + (slope_y * y + slope_x * z) / 5.0f + 0.1f * u(rng);
      }
    }
    out.push_back({{"x", x}});
  }
  return out;
}

struct Quantized {
  std::optional<QuantPlan> plan;
  json record;  // the adaround entry's result (null without it)
};

// The full static quantization of `model` (MinMax on `samples`), with `recover`
// given the samples (`with_data`) or not; `refined` (if set) receives RefinePlan's
// status instead of the test expecting success.
Quantized Quantize(const ir::Model& model, QuantOptions o, const std::vector<std::string>& recover,
                   const std::vector<runtime::TensorMap>& samples, uint64_t seed = 0, bool with_data = true,
                   Status* refined = nullptr) {
  for (const auto& text : recover) {
    auto spec = ParseRecoverySpec(text, "test");
    EXPECT_TRUE(spec.ok()) << spec.error().message;
    if (spec.ok()) o.recovery.push_back(*spec);
  }
  Quantized out;
  auto prepared = QuantPlan::Prepare(model);
  EXPECT_TRUE(prepared.ok()) << prepared.error().message;
  if (!prepared.ok()) return out;
  auto tensors = QuantPlan::TensorsToCalibrate(*prepared, o);
  EXPECT_TRUE(tensors.ok()) << tensors.error().message;
  if (!tensors.ok()) return out;
  size_t next = 0;
  BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next == samples.size()) return false;
    feeds = samples[next++];
    return true;
  };
  auto stats = Calibrate(*prepared, *tensors, source, o.calibration_options, 1);
  EXPECT_TRUE(stats.ok()) << stats.error().message;
  if (!stats.ok()) return out;
  auto ranges = stats->Ranges(o.calibration);
  auto plan = QuantPlan::Create(*prepared, o, &*ranges);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  if (!plan.ok()) return out;
  BatchList list;
  list.num_batches = samples.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return samples[i]; };
  RecoveryContext ctx;
  ctx.calibration = with_data ? &list : nullptr;
  ctx.seed = seed;
  json record = json::array();
  Status s = RefinePlan(*plan, ctx, record);
  if (refined)
    *refined = s;
  else
    EXPECT_TRUE(s.ok()) << s.message();
  for (const auto& r : record)
    if (r.value("name", "") == "adaround") out.record = r["result"];
  out.plan = std::move(*plan);
  return out;
}

ir::Model Materialize(const QuantPlan& plan, const std::set<std::string>& excluded = {}) {
  auto m = plan.Materialize(excluded);
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : ir::Model();
}

// Output SQNR (dB) of `model` against the float model on `feeds`.
double Sqnr(const ir::Model& reference, const ir::Model& model, const runtime::TensorMap& feeds) {
  auto s0 = runtime::Session::Create(reference);
  auto s1 = runtime::Session::Create(model);
  EXPECT_TRUE(s0.ok() && s1.ok());
  auto y0 = (*s0)->Run(feeds);
  auto y1 = (*s1)->Run(feeds);
  EXPECT_TRUE(y0.ok() && y1.ok());
  const auto r = y0->at("y").ToDoubles(), q = y1->at("y").ToDoubles();
  double signal = 0, noise = 0;
  for (size_t i = 0; i < r.size(); ++i) signal += r[i] * r[i], noise += (r[i] - q[i]) * (r[i] - q[i]);
  return 10 * std::log10(signal / noise);
}

// The integers a quantized model stores for weight `w` (its "_quantized" initializer).
std::vector<int64_t> WeightIntegers(const ir::Model& m, const std::string& w) {
  auto it = m.graph.initializers.find(w + "_quantized");
  EXPECT_NE(it, m.graph.initializers.end()) << w;
  return it == m.graph.initializers.end() ? std::vector<int64_t>{} : it->second.ToInt64s();
}

class AdaRoundTypes : public ::testing::TestWithParam<std::tuple<QuantType, bool>> {};

TEST_P(AdaRoundTypes, LowersEachLayersErrorWithinOneOfNearest) {
  const auto [type, per_channel] = GetParam();
  const auto samples = Samples(3, 4, 16);
  QuantOptions o;
  o.weight_type = type;
  o.per_channel = per_channel;
  o.activation_type = QuantType::kUInt16;  // the weights' rounding is the main error
  const Quantized plain = Quantize(Chain(), o, {}, samples);
  const Quantized learned = Quantize(Chain(), o, {"adaround:iterations=400,holdout=0"}, samples);
  ASSERT_TRUE(plain.plan && learned.plan);
  const json& r = learned.record;
  ASSERT_EQ(r.value("layers", 0), 5) << r;
  EXPECT_EQ(r.value("samples", 0), 64);
  EXPECT_FALSE(r.contains("skipped")) << r;
  for (const auto& layer : r["per_layer"]) {
    SCOPED_TRACE(layer.dump());
    EXPECT_FALSE(layer.value("kept_nearest", true));
    EXPECT_LT(layer["error_learned"].get<double>(), layer["error_nearest"].get<double>());
    EXPECT_GT(layer["flipped"].get<double>(), 0.0);
  }
  EXPECT_LT(r["mean_error_learned"].get<double>(), r["mean_error_nearest"].get<double>());
  // Every integer is round-to-nearest's or one away, inside the type's range.
  // (Per-channel uint8 weights are int8, as in ORT.)
  const QRange range = GetQRange(per_channel && type == QuantType::kUInt8 ? QuantType::kInt8 : type, false, false);
  const ir::Model q0 = Materialize(*plain.plan), q1 = Materialize(*learned.plan);
  int64_t differ = 0, total = 0;
  for (const auto& w : kWeights) {
    const auto a = WeightIntegers(q0, w), b = WeightIntegers(q1, w);
    ASSERT_EQ(a.size(), b.size()) << w;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LE(std::abs(a[i] - b[i]), 1) << w << "[" << i << "]";
      EXPECT_GE(b[i], range.qmin) << w << "[" << i << "]";
      EXPECT_LE(b[i], range.qmax) << w << "[" << i << "]";
      differ += a[i] != b[i];
    }
    total += static_cast<int64_t>(a.size());
    // The scales are the plan's own.
    EXPECT_EQ(q0.graph.initializers.at(w + "_scale").ToDoubles(), q1.graph.initializers.at(w + "_scale").ToDoubles());
  }
  EXPECT_GT(differ, 0);
  EXPECT_NEAR(double(differ) / total, r["flipped"].get<double>(), 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Weights, AdaRoundTypes,
                         ::testing::Values(std::make_tuple(QuantType::kInt8, false),
                                           std::make_tuple(QuantType::kInt8, true),
                                           std::make_tuple(QuantType::kUInt8, false),
                                           std::make_tuple(QuantType::kUInt8, true)));

TEST(AdaRound, OutputGetsCloserToFloat) {
  const auto samples = Samples(5, 4, 16);
  const runtime::TensorMap test = Samples(6, 1, 64)[0];
  // uint16 activations leave the weights' rounding as the main error.
  for (QuantType activations : {QuantType::kUInt8, QuantType::kUInt16}) {
    SCOPED_TRACE(QuantTypeName(activations));
    QuantOptions o;
    o.activation_type = activations;
    const Quantized plain = Quantize(Chain(), o, {}, samples);
    const Quantized learned = Quantize(Chain(), o, {"adaround"}, samples);
    ASSERT_TRUE(plain.plan && learned.plan);
    const double before = Sqnr(Chain(), Materialize(*plain.plan), test);
    const double after = Sqnr(Chain(), Materialize(*learned.plan), test);
    EXPECT_GT(after, before + 1.0) << "nearest " << before << " dB, learned " << after << " dB";
  }
}

TEST(AdaRound, ExcludedGroupGetsItsFloatWeightBack) {
  const auto samples = Samples(3, 1, 16);
  const Quantized learned = Quantize(Chain(), QuantOptions{}, {"adaround:iterations=100"}, samples);
  ASSERT_TRUE(learned.plan);
  const QuantGroup* b = nullptr;
  for (const auto& g : learned.plan->groups())
    if (std::find(g.weights.begin(), g.weights.end(), "wb") != g.weights.end()) b = &g;
  ASSERT_NE(b, nullptr);
  const ir::Model full = Materialize(*learned.plan);
  const ir::Model without_b = Materialize(*learned.plan, {b->name});
  // B's weight is the float one again; the other layers keep their learned integers.
  ASSERT_TRUE(without_b.graph.initializers.count("wb"));
  EXPECT_EQ(without_b.graph.initializers.at("wb").ToDoubles(), Chain().graph.initializers.at("wb").ToDoubles());
  EXPECT_FALSE(without_b.graph.initializers.count("wb_quantized"));
  for (const std::string w : {"wa", "wc", "wg", "wm"}) EXPECT_EQ(WeightIntegers(full, w), WeightIntegers(without_b, w));
}

TEST(AdaRound, SameSeedSameModel) {
  const auto samples = Samples(3, 2, 16);
  const std::string spec = "adaround:iterations=200,samples=24,positions=8,batch=64";
  const Quantized a = Quantize(Chain(), QuantOptions{}, {spec}, samples);
  const Quantized b = Quantize(Chain(), QuantOptions{}, {spec}, samples);
  const Quantized c = Quantize(Chain(), QuantOptions{}, {spec + ",seed=1"}, samples);
  const Quantized d = Quantize(Chain(), QuantOptions{}, {spec}, samples, /*seed=*/1);
  ASSERT_TRUE(a.plan && b.plan && c.plan && d.plan);
  const ir::Model ma = Materialize(*a.plan), mb = Materialize(*b.plan), mc = Materialize(*c.plan),
                  md = Materialize(*d.plan);
  bool seed_matters = false;
  for (const auto& w : kWeights) {
    EXPECT_EQ(WeightIntegers(ma, w), WeightIntegers(mb, w)) << w;
    seed_matters |= WeightIntegers(ma, w) != WeightIntegers(mc, w);
    EXPECT_EQ(WeightIntegers(mc, w), WeightIntegers(md, w)) << w;  // the option adds to the run's seed
  }
  EXPECT_TRUE(seed_matters);
  EXPECT_EQ(a.record["per_layer"].size(), b.record["per_layer"].size());
  for (size_t i = 0; i < a.record["per_layer"].size(); ++i)
    EXPECT_EQ(a.record["per_layer"][i]["error_learned"], b.record["per_layer"][i]["error_learned"]);
}

TEST(AdaRound, CachesAtMostTheSamplesAndPositionsAsked) {
  const auto samples = Samples(3, 3, 10);
  const Quantized r = Quantize(Chain(), QuantOptions{}, {"adaround:iterations=10,samples=15,positions=4"}, samples);
  ASSERT_TRUE(r.plan);
  EXPECT_EQ(r.record.value("samples", 0), 15) << r.record;
  const json& layers = r.record["per_layer"];
  ASSERT_EQ(layers.size(), 4u) << r.record;
  // Convs: 4 of 36 (A, B) or 9 (C) positions per sample; MatMul: one row.
  EXPECT_EQ(layers[0].value("columns", 0), 60);
  EXPECT_EQ(layers[1].value("columns", 0), 60);
  EXPECT_EQ(layers[2].value("columns", 0), 60);
  EXPECT_EQ(layers[3].value("columns", 0), 15);
  // The Gemm has 54 weights per output and only 12 training columns (3 of the 15
  // samples are held out): it keeps nearest rounding, and the record says why.
  ASSERT_TRUE(r.record["skipped"].contains("G")) << r.record;
  EXPECT_NE(r.record["skipped"]["G"].get<std::string>().find("12 training columns for 54 weights"), std::string::npos);
}

TEST(AdaRound, NeedsCalibrationData) {
  Status refined = Status::Ok();
  Quantize(Chain(), QuantOptions{}, {"adaround"}, Samples(3, 1, 4), 0, /*with_data=*/false, &refined);
  ASSERT_FALSE(refined.ok());
  EXPECT_NE(refined.message().find("'adaround' needs calibration data"), std::string::npos) << refined.message();
}

}  // namespace
}  // namespace seqto::quant::recover
