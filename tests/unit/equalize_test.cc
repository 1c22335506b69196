// Cross-layer equalization (quant/recover/equalize.cc) on a hand-built chain whose
// channels have ranges 100x apart: the float model computes the same after it, the
// pairs' ranges end up equal, ReLU6 is handled as each `relu6` mode says, high-bias
// absorption is exact where it is allowed, and per-tensor quantization loses less.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/calib/calibrate.h"
#include "quant/recover/recover.h"
#include "runtime/session.h"
#include "support/test_models.h"
#include "support/test_quantize.h"

namespace seqto::quant::recover {
namespace {

using namespace seqto::testing;
using nlohmann::json;

// x [N, 4, 6, 6] -> A: conv 3x3 pad 1 (8 out) -> Relu -> B: depthwise 3x3 pad 1 ->
// Clip(0, 6) -> C: conv 1x1 (8 -> 5) -> D: conv 1x1 (5 -> 3) = y. A's output
// channels have weight ranges 0.01..1 (as BN folding leaves them) and B's weights
// reading them 10..0.1; `b_bias` is added to B's bias (a large value gives C's input a
// high floor).
ir::Model Chain(float b_bias, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.name = "chain";
  g.inputs.push_back(FloatValue("x", {{-1, "N"}, {4}, {6}, {6}}));
  g.outputs.push_back(FloatValue("y", {{-1, "N"}, {3}, {6}, {6}}));
  Tensor wa = RandomTensor({8, 4, 3, 3}, rng);
  float* a = wa.data<float>();
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t k = 0; k < 36; ++k) a[c * 36 + k] *= std::pow(10.0f, float(c % 3) - 2.0f);
  g.initializers["wa"] = wa;
  g.initializers["ba"] = RandomTensor({8}, rng, -0.1f, 0.1f);
  // B reads the weak channels with strong weights (as after BN folding), so every
  // channel matters as much at the output.
  Tensor wb = RandomTensor({8, 1, 3, 3}, rng);
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t k = 0; k < 9; ++k) wb.data<float>()[c * 9 + k] *= std::pow(10.0f, 2.0f - float(c % 3)) / 10.0f;
  g.initializers["wb"] = wb;
  Tensor bb = RandomTensor({8}, rng, -0.1f, 0.1f);
  for (int64_t c = 0; c < 8; ++c) bb.data<float>()[c] += b_bias;
  g.initializers["bb"] = bb;
  g.initializers["wc"] = RandomTensor({5, 8, 1, 1}, rng);
  g.initializers["bc"] = RandomTensor({5}, rng, -0.1f, 0.1f);
  g.initializers["wd"] = RandomTensor({3, 5, 1, 1}, rng);
  g.initializers["lo"] = Tensor::Scalar<float>(0.0f);
  g.initializers["hi"] = Tensor::Scalar<float>(6.0f);
  ir::Node conv_a = MakeNode("A", "Conv", {"x", "wa", "ba"}, {"a"});
  conv_a.attributes["pads"] = Ints({1, 1, 1, 1});
  ir::Node conv_b = MakeNode("B", "Conv", {"ar", "wb", "bb"}, {"b"});
  conv_b.attributes["pads"] = Ints({1, 1, 1, 1});
  conv_b.attributes["group"] = Int(8);
  g.nodes = {conv_a,
             MakeNode("relu", "Relu", {"a"}, {"ar"}),
             conv_b,
             MakeNode("relu6", "Clip", {"b", "lo", "hi"}, {"br"}),
             MakeNode("C", "Conv", {"br", "wc", "bc"}, {"c"}),
             MakeNode("D", "Conv", {"c", "wd"}, {"y"})};
  return m;
}

runtime::TensorMap RunModel(const ir::Model& m, const runtime::TensorMap& feeds) {
  auto s = runtime::Session::Create(m);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  auto out = (*s)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : runtime::TensorMap{};
}

using Rewritten = testing::RewrittenForTest;

Rewritten Equalize(const ir::Model& m, const std::string& spec_text, const std::vector<runtime::TensorMap>& samples) {
  auto r = testing::RewriteForTest(m, spec_text, samples);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : Rewritten{m, nullptr};
}

// Per-output-channel max |w| of a conv weight, and per-input-channel max |w| (the
// depthwise weight's input channel c is its output channel c).
std::vector<double> OutputRanges(const Tensor& w) {
  std::vector<double> r(w.dim(0), 0.0);
  const int64_t per = w.numel() / w.dim(0);
  const float* x = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) r[i / per] = std::max(r[i / per], std::fabs(double(x[i])));
  return r;
}

TEST(Equalize, SameFloatOutputsAndEqualRanges) {
  std::mt19937 rng(7);
  const ir::Model m = Chain(0.0f);
  const runtime::TensorMap feeds = {{"x", RandomTensor({2, 4, 6, 6}, rng)}};
  // relu6=0: A -> Relu -> B and C -> D are pairs; B -> Clip(0, 6) -> C is not.
  const Rewritten r = Equalize(m, "cle:relu6=0,bias_absorption=0,iterations=100,tolerance=1e-6", {});
  EXPECT_EQ(r.record.value("pairs", 0), 2) << r.record;
  EXPECT_TRUE(r.record.value("converged", false)) << r.record;
  EXPECT_EQ(r.record.value("relu6_replaced", -1), 0);
  const auto& init = r.model.graph.initializers;
  // A's output channel ranges equal B's (depthwise: the same channel) after it.
  const auto ra = OutputRanges(init.at("wa")), rb = OutputRanges(init.at("wb"));
  for (size_t c = 0; c < ra.size(); ++c) EXPECT_NEAR(ra[c] / rb[c], 1.0, 1e-4) << c;
  // Before, they were 100x apart across channels.
  const auto ra0 = OutputRanges(m.graph.initializers.at("wa"));
  EXPECT_GT(*std::max_element(ra0.begin(), ra0.end()) / *std::min_element(ra0.begin(), ra0.end()), 20.0);
  // The pair behind the ReLU6 is not equalized: B's outputs (its bias) keep their
  // scale. C -> D is, and the model computes the same.
  EXPECT_EQ(init.at("bb").ToDoubles(), m.graph.initializers.at("bb").ToDoubles());
  EXPECT_NE(init.at("wd").ToDoubles(), m.graph.initializers.at("wd").ToDoubles());
  EXPECT_LT(testing::MaxRelativeDiff(RunModel(m, feeds).at("y"), RunModel(r.model, feeds).at("y")), 1e-5);
  // The input model's tensors are not written through (they share storage).
  EXPECT_EQ(m.graph.initializers.at("wa").ToDoubles(), Chain(0.0f).graph.initializers.at("wa").ToDoubles());
}

TEST(Equalize, Relu6ModesReplaceOnlyWhatTheyMay) {
  std::mt19937 rng(3);
  const ir::Model m = Chain(0.0f);
  // Small inputs never reach 6 after B; large ones do.
  const std::vector<runtime::TensorMap> small = {{{"x", RandomTensor({4, 4, 6, 6}, rng, -0.5f, 0.5f)}}};
  const std::vector<runtime::TensorMap> large = {{{"x", RandomTensor({4, 4, 6, 6}, rng, -300.f, 300.f)}}};
  auto clips = [](const ir::Model& model) {
    int n = 0;
    for (const auto& node : model.graph.nodes) n += node.op_type == "Clip";
    return n;
  };
  const Rewritten unclipped = Equalize(m, "cle:relu6=1", small);
  EXPECT_EQ(unclipped.record.value("relu6_replaced", -1), 1) << unclipped.record;
  EXPECT_EQ(clips(unclipped.model), 0);
  EXPECT_EQ(unclipped.record.value("pairs", 0), 3);
  // Same outputs on those samples.
  EXPECT_LT(testing::MaxRelativeDiff(RunModel(m, small[0]).at("y"), RunModel(unclipped.model, small[0]).at("y")), 1e-5);

  const Rewritten clipped = Equalize(m, "cle:relu6=1", large);
  EXPECT_EQ(clipped.record.value("relu6_replaced", -1), 0) << clipped.record;
  EXPECT_EQ(clips(clipped.model), 1);
  EXPECT_LT(testing::MaxRelativeDiff(RunModel(m, large[0]).at("y"), RunModel(clipped.model, large[0]).at("y")), 1e-5);

  const Rewritten forced = Equalize(m, "cle:relu6=2", large);
  EXPECT_EQ(forced.record.value("relu6_replaced", -1), 1) << forced.record;
  EXPECT_EQ(clips(forced.model), 0);
  // It says how often the replaced clip would have clipped, and that outputs moved.
  ASSERT_TRUE(forced.record["share_above_6"].is_object()) << forced.record;
  EXPECT_GT(forced.record["share_above_6"].begin()->get<double>(), 0.01) << forced.record;
  EXPECT_TRUE(forced.record["float_output_sqnr_db"].is_number()) << forced.record;
  EXPECT_LT(forced.record["float_output_sqnr_db"].get<double>(), 60.0);

  // Without samples (dynamic quantization) relu6=1 cannot tell: it keeps every ReLU6
  // and says so.
  auto spec = ParseRecoverySpec("cle:relu6=1", "test");
  ASSERT_TRUE(spec.ok());
  QuantOptions o;
  o.recovery = {*spec};
  json record;
  auto out = RewriteFloatModel(m, o, RecoveryContext{}, record);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(clips(*out), 1);
  EXPECT_TRUE(record[0]["result"].contains("relu6_kept")) << record;
  EXPECT_EQ(record[0]["result"].value("relu6_replaced", -1), 0);
}

TEST(Equalize, HighBiasAbsorptionIsExactWhereAllowed) {
  std::mt19937 rng(5);
  // B's bias 50 keeps C's input (after the replaced clip) far above 0.
  const ir::Model m = Chain(50.0f);
  const std::vector<runtime::TensorMap> samples = {{{"x", RandomTensor({4, 4, 6, 6}, rng, -0.2f, 0.2f)}}};
  const Rewritten with = Equalize(m, "cle:relu6=2", samples);
  const Rewritten without = Equalize(m, "cle:relu6=2,bias_absorption=0", samples);
  // Only B -> C qualifies: A -> B reads padding, C -> D has no Relu.
  EXPECT_EQ(with.record.value("absorbed_pairs", 0), 1) << with.record;
  EXPECT_EQ(without.record.value("absorbed_pairs", -1), 0);
  EXPECT_GT(with.record.value("absorbed_channels", 0), 4);
  // B's bias came down by what C now adds, and the outputs did not move (against the
  // same rewrite without absorption: relu6=2 itself changes the model, as B's
  // outputs are far above 6).
  const auto b_with = with.model.graph.initializers.at("bb").ToDoubles();
  const auto b_without = without.model.graph.initializers.at("bb").ToDoubles();
  for (size_t c = 0; c < b_with.size(); ++c) EXPECT_LT(b_with[c], b_without[c]) << c;
  EXPECT_LT(
      testing::MaxRelativeDiff(RunModel(without.model, samples[0]).at("y"), RunModel(with.model, samples[0]).at("y")),
      1e-4);
}

// Full per-tensor quantization of `model` (MinMax on `samples`), optionally after
// `recover`; its output SQNR (dB) against the float model on `test`.
double QuantizedSqnr(const ir::Model& model, const std::vector<std::string>& recover,
                     const std::vector<runtime::TensorMap>& samples, const runtime::TensorMap& test) {
  QuantOptions o;
  for (const auto& text : recover) o.recovery.push_back(*ParseRecoverySpec(text, "test"));
  auto prepared = QuantPlan::Prepare(model);
  EXPECT_TRUE(prepared.ok());
  BatchList list;
  list.num_batches = samples.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return samples[i]; };
  RecoveryContext ctx;
  ctx.calibration = &list;
  json record;
  auto rewritten = RewriteFloatModel(*prepared, o, ctx, record);
  EXPECT_TRUE(rewritten.ok()) << rewritten.error().message;
  auto tensors = QuantPlan::TensorsToCalibrate(*rewritten, o);
  size_t next = 0;
  BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next == samples.size()) return false;
    feeds = samples[next++];
    return true;
  };
  auto stats = Calibrate(*rewritten, *tensors, source, o.calibration_options, 1);
  EXPECT_TRUE(stats.ok());
  auto ranges = stats->Ranges(o.calibration);
  auto plan = QuantPlan::Create(*rewritten, o, &*ranges);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(RefinePlan(*plan, ctx, record).ok());
  auto q = plan->Materialize();
  EXPECT_TRUE(q.ok());
  if (!recover.empty()) {
    EXPECT_TRUE(q->metadata.count("seqto.recovery"));
  }
  const auto ref = RunModel(model, test).at("y").ToDoubles(), got = RunModel(*q, test).at("y").ToDoubles();
  double signal = 0, noise = 0;
  for (size_t i = 0; i < ref.size(); ++i) signal += ref[i] * ref[i], noise += (ref[i] - got[i]) * (ref[i] - got[i]);
  return 10 * std::log10(signal / noise);
}

TEST(Equalize, PerTensorQuantizationLosesLess) {
  std::mt19937 rng(11);
  const ir::Model m = Chain(0.0f);
  const std::vector<runtime::TensorMap> samples = {{{"x", RandomTensor({8, 4, 6, 6}, rng)}}};
  const runtime::TensorMap test = {{"x", RandomTensor({8, 4, 6, 6}, rng)}};
  const double before = QuantizedSqnr(m, {}, samples, test);
  const double after = QuantizedSqnr(m, {"cle:relu6=1"}, samples, test);
  EXPECT_GT(after, before + 3.0) << "before " << before << " dB, after " << after << " dB";
}

}  // namespace
}  // namespace seqto::quant::recover
