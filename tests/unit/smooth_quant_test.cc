// SmoothQuant (quant/recover/smooth_quant.cc) on hand-built graphs, one per way of
// absorbing 1/s: the rewritten float model computes the same (within 1e-4 relative)
// whether 1/s folds into a LayerNormalization, a decomposed LayerNorm's Mul + Add, a
// MatMul/Gemm producer through Relu, or goes into an inserted Mul; MatMuls reading
// one input share one s; Gemm's transB is respected; the activation's channel ranges
// really even out; and the options (alpha, search, folding) do what they say.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "quant/recover/recover.h"
#include "runtime/session.h"
#include "support/test_models.h"
#include "support/test_quantize.h"
#include "tune/config.h"

namespace seqto::quant::recover {
namespace {

using namespace seqto::testing;
using nlohmann::json;

runtime::TensorMap RunModel(const ir::Model& m, const runtime::TensorMap& feeds) {
  runtime::SessionOptions so;
  so.optimize = false;  // compare the graphs as written
  auto s = runtime::Session::Create(m, so);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  auto out = (*s)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : runtime::TensorMap{};
}

using Rewritten = testing::RewrittenForTest;

Rewritten Smooth(const ir::Model& m, const std::string& spec_text, const std::vector<runtime::TensorMap>& samples) {
  auto r = testing::RewriteForTest(m, spec_text, samples);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : Rewritten{m, nullptr};
}

// x with channel c of its last axis scaled by `outlier` for c % 5 == 1: the outlier
// channels SmoothQuant is for.
Tensor Input(Shape shape, std::mt19937& rng, float outlier = 20.0f) {
  Tensor t = RandomTensor(shape, rng);
  const int64_t k = shape.back();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (i % k % 5 == 1) t.data<float>()[i] *= outlier;
  return t;
}

// Checks that `r` computes what `m` does on fresh inputs, for every output.
void ExpectSameFunction(const ir::Model& m, const ir::Model& r, const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const runtime::TensorMap feeds = {{"x", Input(shape, rng)}};
  const auto a = RunModel(m, feeds), b = RunModel(r, feeds);
  ASSERT_EQ(a.size(), m.graph.outputs.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_LT(testing::MaxRelativeDiff(t, b.at(name)), 1e-4) << name;
  }
}

int Count(const ir::Model& m, const std::string& op) {
  int n = 0;
  for (const auto& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

// x [4, 10] -> LayerNormalization (gamma, beta) = a; a -> MatMul (W1 [10, 6]) = y1;
// a -> Gemm (W2 [7, 10], transB, C [7]) = y2: one group of two consumers.
ir::Model LayerNormModel(std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 17;
  ir::Graph& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{4}, {10}}));
  g.outputs.push_back(FloatValue("y1", {{4}, {6}}));
  g.outputs.push_back(FloatValue("y2", {{4}, {7}}));
  Tensor gamma = RandomTensor({10}, rng, 0.5f, 1.5f);
  gamma.data<float>()[2] = 40.0f;  // an outlier channel
  g.initializers["gamma"] = gamma;
  g.initializers["beta"] = RandomTensor({10}, rng);
  g.initializers["w1"] = RandomTensor({10, 6}, rng);
  g.initializers["w2"] = RandomTensor({7, 10}, rng);
  g.initializers["c2"] = RandomTensor({7}, rng);
  g.nodes = {MakeNode("ln", "LayerNormalization", {"x", "gamma", "beta"}, {"a"}),
             MakeNode("mm", "MatMul", {"a", "w1"}, {"y1"}), MakeNode("gemm", "Gemm", {"a", "w2", "c2"}, {"y2"})};
  g.nodes[2].attributes["transB"] = Int(1);
  return m;
}

TEST(SmoothQuant, FoldsIntoLayerNormalizationForASharedGroup) {
  std::mt19937 rng(1);
  const ir::Model m = LayerNormModel(rng);
  const std::vector<runtime::TensorMap> samples = {{{"x", Input({4, 10}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant", samples);
  EXPECT_EQ(r.record.value("groups", 0), 1) << r.record;
  EXPECT_EQ(r.record.value("matmuls", 0), 2) << r.record;
  EXPECT_EQ(r.record.value("folded", 0), 1) << r.record;
  EXPECT_EQ(r.record.value("inserted_muls", -1), 0) << r.record;
  EXPECT_EQ(Count(r.model, "Mul"), 0);
  ExpectSameFunction(m, r.model, {4, 10}, 2);
  // One s for both: the MatMul's row j and the Gemm's (transposed) column j moved
  // by the same factor, the inverse of gamma's and beta's.
  const auto& init = r.model.graph.initializers;
  const auto g0 = m.graph.initializers.at("gamma").ToDoubles(), g1 = init.at("gamma").ToDoubles();
  const auto w1a = m.graph.initializers.at("w1").ToDoubles(), w1b = init.at("w1").ToDoubles();
  const auto w2a = m.graph.initializers.at("w2").ToDoubles(), w2b = init.at("w2").ToDoubles();
  for (int j = 0; j < 10; ++j) {
    const double s = g0[j] / g1[j];
    EXPECT_NEAR(w1b[j * 6] / w1a[j * 6], s, 1e-4 * s) << j;
    EXPECT_NEAR(w2b[3 * 10 + j] / w2a[3 * 10 + j], s, 1e-4 * s) << j;
  }
  // The outlier channel's share of the activation range shrank: its s is the largest.
  EXPECT_GT(g0[2] / g1[2], 3.0 * g0[0] / g1[0]);
  EXPECT_GT(r.record.value("scale_max", 0.0), r.record.value("scale_min", 0.0));
  // Equal float outputs on the calibration samples too, as the record measures.
  ASSERT_TRUE(r.record.contains("float_output_sqnr_db")) << r.record;
  if (r.record["float_output_sqnr_db"].is_number()) {
    EXPECT_GT(r.record["float_output_sqnr_db"].get<double>(), 80.0);
  }
  // The input model's tensors are not written through (they share storage).
  std::mt19937 again(1);
  EXPECT_EQ(m.graph.initializers.at("gamma").ToDoubles(),
            LayerNormModel(again).graph.initializers.at("gamma").ToDoubles());
}

TEST(SmoothQuant, FoldingOffInsertsAMulWithTheSameFunction) {
  std::mt19937 rng(3);
  const ir::Model m = LayerNormModel(rng);
  const std::vector<runtime::TensorMap> samples = {{{"x", Input({4, 10}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant:folding=false", samples);
  EXPECT_EQ(r.record.value("folded", -1), 0) << r.record;
  EXPECT_EQ(r.record.value("inserted_muls", 0), 1) << r.record;
  EXPECT_EQ(Count(r.model, "Mul"), 1);
  EXPECT_EQ(r.model.graph.initializers.at("gamma").ToDoubles(), m.graph.initializers.at("gamma").ToDoubles());
  EXPECT_TRUE(r.model.graph.Verify().ok());
  ExpectSameFunction(m, r.model, {4, 10}, 4);
}

// x [2, 3, 8] -> Div (by 2) -> Mul (gamma [8]) -> Add (beta [1, 8]) = a -> MatMul
// (W [8, 5]) = y: the decomposed LayerNorm's tail, a rank-3 MatMul.
TEST(SmoothQuant, FoldsIntoADecomposedLayerNormsMulAndAdd) {
  std::mt19937 rng(5);
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{2}, {3}, {8}}));
  g.outputs.push_back(FloatValue("y", {{2}, {3}, {5}}));
  g.initializers["two"] = Tensor::Scalar<float>(2.0f);
  g.initializers["gamma"] = RandomTensor({8}, rng, 0.5f, 30.0f);
  g.initializers["beta"] = RandomTensor({1, 8}, rng);
  g.initializers["w"] = RandomTensor({8, 5}, rng);
  g.nodes = {MakeNode("div", "Div", {"x", "two"}, {"d"}), MakeNode("mul", "Mul", {"gamma", "d"}, {"m"}),
             MakeNode("add", "Add", {"m", "beta"}, {"a"}), MakeNode("mm", "MatMul", {"a", "w"}, {"y"})};
  const std::vector<runtime::TensorMap> samples = {{{"x", Input({2, 3, 8}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant:alpha=0.7", samples);
  EXPECT_EQ(r.record.value("folded", 0), 1) << r.record;
  EXPECT_EQ(r.record.value("alpha_min", 0.0), 0.7) << r.record;
  EXPECT_NE(r.model.graph.initializers.at("gamma").ToDoubles(), g.initializers.at("gamma").ToDoubles());
  EXPECT_EQ(r.model.graph.initializers.at("beta").shape(), (Shape{1, 8}));
  EXPECT_EQ(Count(r.model, "Mul"), 1);
  ExpectSameFunction(m, r.model, {2, 3, 8}, 6);
}

// x [6, 9] -> Gemm (W0 [12, 9] transB, C0) -> Relu -> MatMul (W1 [12, 4]) -> Add
// (b1) -> Relu = a2 -> MatMul (W2 [4, 3]) = y: each smoothed input folds into the
// MatMul/Gemm before it (through Relu, and through the Add of its bias).
TEST(SmoothQuant, FoldsIntoMatMulAndGemmProducersThroughRelu) {
  std::mt19937 rng(7);
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{6}, {9}}));
  g.outputs.push_back(FloatValue("y", {{6}, {3}}));
  Tensor w0 = RandomTensor({12, 9}, rng);
  for (int64_t k = 0; k < 9; ++k) w0.data<float>()[5 * 9 + k] *= 25.0f;  // output channel 5 is an outlier
  g.initializers["w0"] = w0;
  g.initializers["c0"] = RandomTensor({12}, rng);
  g.initializers["w1"] = RandomTensor({12, 4}, rng);
  g.initializers["b1"] = RandomTensor({4}, rng);
  g.initializers["w2"] = RandomTensor({4, 3}, rng);
  g.nodes = {MakeNode("gemm", "Gemm", {"x", "w0", "c0"}, {"g"}), MakeNode("relu0", "Relu", {"g"}, {"a1"}),
             MakeNode("mm1", "MatMul", {"a1", "w1"}, {"h"}),     MakeNode("add1", "Add", {"h", "b1"}, {"hb"}),
             MakeNode("relu1", "Relu", {"hb"}, {"a2"}),          MakeNode("mm2", "MatMul", {"a2", "w2"}, {"y"})};
  g.nodes[0].attributes["transB"] = Int(1);
  const std::vector<runtime::TensorMap> samples = {{{"x", Input({6, 9}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant", samples);
  // x (a graph input) gets a Mul; a1 folds into the Gemm, a2 into mm1 and its bias.
  EXPECT_EQ(r.record.value("groups", 0), 3) << r.record;
  EXPECT_EQ(r.record.value("folded", 0), 2) << r.record;
  EXPECT_EQ(r.record.value("inserted_muls", 0), 1) << r.record;
  EXPECT_NE(r.model.graph.initializers.at("c0").ToDoubles(), g.initializers.at("c0").ToDoubles());
  EXPECT_NE(r.model.graph.initializers.at("b1").ToDoubles(), g.initializers.at("b1").ToDoubles());
  ExpectSameFunction(m, r.model, {6, 9}, 8);
}

// A value read by a MatMul and by something else cannot fold (the other reader would
// see A / s): a Mul is inserted for the MatMul alone. A MatMul outside the quantized
// nodes is left alone.
TEST(SmoothQuant, OtherReadersAndExcludedMatMulsAreRespected) {
  std::mt19937 rng(9);
  ir::Model m = LayerNormModel(rng);
  m.graph.outputs.push_back(FloatValue("a", {{4}, {10}}));  // a is also a graph output
  const std::vector<runtime::TensorMap> samples = {{{"x", Input({4, 10}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant", samples);
  EXPECT_EQ(r.record.value("folded", -1), 0) << r.record;
  EXPECT_EQ(r.record.value("inserted_muls", 0), 1) << r.record;
  ExpectSameFunction(m, r.model, {4, 10}, 10);

  QuantOptions o;
  o.recovery = {*ParseRecoverySpec("smooth_quant", "test")};
  o.nodes_to_exclude = {"gemm"};
  BatchList list;
  list.num_batches = samples.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return samples[i]; };
  RecoveryContext ctx;
  ctx.calibration = &list;
  json record;
  auto out = RewriteFloatModel(LayerNormModel(rng), o, ctx, record);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(record[0]["result"].value("matmuls", 0), 1) << record;
}

TEST(SmoothQuant, AlphaSearchPicksFromTheGridAndKeepsTheFunction) {
  std::mt19937 rng(11);
  const ir::Model m = LayerNormModel(rng);
  std::vector<runtime::TensorMap> samples;
  for (int i = 0; i < 3; ++i) samples.push_back({{"x", Input({4, 10}, rng)}});
  const Rewritten r = Smooth(m, "smooth_quant:alpha_search=true", samples);
  ASSERT_TRUE(r.record.contains("alphas")) << r.record;
  ASSERT_EQ(r.record["alphas"].size(), 1u) << r.record;
  const double a = r.record["alphas"]["a"].get<double>();
  EXPECT_GE(a, 0.0);
  EXPECT_LE(a, 1.0);
  EXPECT_NEAR(a * 20, std::round(a * 20), 1e-9) << a;
  ExpectSameFunction(m, r.model, {4, 10}, 12);
}

TEST(SmoothQuant, NothingToDoWithoutMatMulAndNeedsData) {
  std::mt19937 rng(13);
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs.push_back(FloatValue("x", {{2}, {3}}));
  m.graph.outputs.push_back(FloatValue("y", {{2}, {3}}));
  m.graph.nodes = {MakeNode("relu", "Relu", {"x"}, {"y"})};
  const std::vector<runtime::TensorMap> samples = {{{"x", RandomTensor({2, 3}, rng)}}};
  const Rewritten r = Smooth(m, "smooth_quant", samples);
  EXPECT_EQ(r.record.value("groups", -1), 0) << r.record;
  EXPECT_TRUE(r.record.contains("note")) << r.record;
  const Technique* t = FindTechnique("smooth_quant");
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->applies);
  EXPECT_FALSE(t->applies(m, QuantOptions{}));
  EXPECT_TRUE(t->applies(LayerNormModel(rng), QuantOptions{}));
  QuantOptions convs_only;
  convs_only.op_types_to_quantize = {"Conv"};
  EXPECT_FALSE(t->applies(LayerNormModel(rng), convs_only));
  QuantOptions excluded;
  excluded.nodes_to_exclude = {"mm", "gemm"};
  EXPECT_FALSE(t->applies(LayerNormModel(rng), excluded));

  QuantOptions o;
  o.recovery = {*ParseRecoverySpec("smooth_quant", "test")};
  json record;
  auto out = RewriteFloatModel(m, o, RecoveryContext{}, record);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("'smooth_quant' needs calibration data"), std::string::npos)
      << out.error().message;
  o.mode = QuantMode::kDynamic;
  Status dynamic = CheckRecoverySpecs(o);
  ASSERT_FALSE(dynamic.ok());
  EXPECT_NE(dynamic.message().find("'smooth_quant' needs static quantization"), std::string::npos) << dynamic.message();
}

TEST(SmoothQuant, BadOptionsAreOneClearError) {
  auto alpha = ParseRecoverySpec("smooth_quant:alpha=1.5", "--recover");
  ASSERT_FALSE(alpha.ok());
  EXPECT_NE(alpha.error().message.find("alpha: 1.5 is outside [0, 1]"), std::string::npos) << alpha.error().message;
  auto folding = ParseRecoverySpec("smooth_quant:folding=maybe", "--recover");
  ASSERT_FALSE(folding.ok());
  EXPECT_NE(folding.error().message.find("folding: expected true or false"), std::string::npos)
      << folding.error().message;
}

// ORT's extra options are the technique, and the config writer gives them back as
// ORT's keys (not in quantization.recovery), so a written config reads the same.
TEST(SmoothQuant, OrtExtraOptionsRoundTrip) {
  const json config = {
      {"extra_options", {{"SmoothQuant", true}, {"SmoothQuantAlpha", 0.3}, {"SmoothQuantFolding", false}}},
      {"recovery", {"cle"}}};
  auto o = tune::ParseQuantOptionsJson(config, "quantization");
  ASSERT_TRUE(o.ok()) << o.error().message;
  ASSERT_EQ(o->recovery.size(), 2u);
  EXPECT_EQ(o->recovery[1].name, "smooth_quant");
  EXPECT_EQ(OptionValue(o->recovery[1], "alpha"), 0.3);
  EXPECT_EQ(OptionValue(o->recovery[1], "folding"), 0.0);
  const json written = tune::QuantOptionsToJson(*o);
  EXPECT_EQ(written["extra_options"].value("SmoothQuant", false), true) << written;
  EXPECT_EQ(written["extra_options"].value("SmoothQuantAlpha", 0.0), 0.3) << written;
  ASSERT_EQ(written["recovery"].size(), 1u) << written;
  auto again = tune::ParseQuantOptionsJson(written, "quantization");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(tune::QuantOptionsToJson(*again), written);
  EXPECT_TRUE(again->recovery.back() == o->recovery.back());
  // "auto" is the alpha search; without SmoothQuant nothing is written.
  auto search =
      tune::ParseQuantOptionsJson({{"extra_options", {{"SmoothQuant", true}, {"SmoothQuantAlpha", "auto"}}}}, "q");
  ASSERT_TRUE(search.ok()) << search.error().message;
  EXPECT_EQ(OptionValue(search->recovery.at(0), "alpha_search"), 1.0);
  EXPECT_EQ(tune::QuantOptionsToJson(*search)["extra_options"]["SmoothQuantAlpha"], "auto");
  auto search_again = tune::ParseQuantOptionsJson(tune::QuantOptionsToJson(*search), "q");
  ASSERT_TRUE(search_again.ok());
  EXPECT_TRUE(*search_again == *search);
  EXPECT_FALSE(tune::QuantOptionsToJson(QuantOptions{})["extra_options"].contains("SmoothQuant"));
  auto off = tune::ParseQuantOptionsJson({{"extra_options", {{"SmoothQuant", false}}}}, "q");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->recovery.empty());
}

}  // namespace
}  // namespace seqto::quant::recover
