// The pattern passes (lift-constants, fold-conv-affine, fuse-patterns): each chain
// must become the one op it stands for and compute what the unfused graph computes
// with the reference kernels (float rounding apart: 1e-5 relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::MakeNode;
using testing::RandomTensor;

void AddScalar(ir::Graph& g, const std::string& name, float v, bool as_constant_node = false) {
  if (!as_constant_node) {
    g.initializers[name] = Tensor::Scalar<float>(v);
    return;
  }
  ir::Node c = MakeNode(name + "_node", "Constant", {}, {name});
  c.attributes["value"].type = ir::Attribute::Type::kTensor;
  c.attributes["value"].t = Tensor::FromVector<float>({1}, {v});
  g.nodes.push_back(c);
}

ir::Model NewModel(Shape x_shape) {
  ir::Model m;
  m.opsets[""] = 13;
  std::vector<ir::Dim> dims;
  for (int64_t d : x_shape) dims.push_back({d});
  m.graph.inputs.push_back({"x", DType::kFloat32, dims});
  m.graph.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  return m;
}

// Optimizes with everything but channels-last (counted here: the fusions only).
ir::Graph Optimized(const ir::Model& m, std::set<std::string> keep = {}) {
  ir::Graph g = m.graph;
  rewrite::OptimizeOptions options;
  options.channels_last = false;
  options.keep_values = std::move(keep);
  const Status s = rewrite::Optimize(g, options);
  EXPECT_TRUE(s.ok()) << s.message();
  return g;
}

std::vector<std::string> OpTypes(const ir::Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op_type);
  return ops;
}

// The optimized session (fast and reference kernels) against the unoptimized one
// with reference kernels.
void ExpectSameFunction(const ir::Model& model, const Tensor& x, double rel = 1e-5) {
  runtime::SessionOptions plain;
  plain.optimize = false;
  plain.reference_only = true;
  auto reference = runtime::Session::Create(model, plain);
  ASSERT_TRUE(reference.ok()) << reference.error().message;
  auto want = (*reference)->Run({{"x", x}});
  ASSERT_TRUE(want.ok()) << want.error().message;
  const auto va = want->at("y").ToDoubles();
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast kernels" : "reference kernels");
    runtime::SessionOptions options;
    options.reference_only = !fast;
    auto optimized = runtime::Session::Create(model, options);
    ASSERT_TRUE(optimized.ok()) << optimized.error().message;
    auto got = (*optimized)->Run({{"x", x}});
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->at("y").shape(), want->at("y").shape());
    const auto vb = got->at("y").ToDoubles();
    ASSERT_EQ(va.size(), vb.size());
    for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], rel * (1 + std::fabs(va[i]))) << "at " << i;
  }
}

// x -> Conv -> Mul(s) -> Add(t) -> HardSwish written out -> y, weights as Constant
// nodes (as Paddle2ONNX writes them).
ir::Model ConvAffineHardSwish(bool per_channel, std::mt19937& rng) {
  ir::Model m = NewModel({2, 3, 6, 5});
  auto& g = m.graph;
  auto constant = [&](const std::string& name, Tensor t) {
    ir::Node c = MakeNode(name + "_node", "Constant", {}, {name});
    c.attributes["value"].type = ir::Attribute::Type::kTensor;
    c.attributes["value"].t = std::move(t);
    g.nodes.push_back(c);
  };
  constant("w", RandomTensor({4, 3, 3, 3}, rng));
  constant("b", RandomTensor({4}, rng));
  constant("s", per_channel ? RandomTensor({4, 1, 1}, rng, 0.5f, 2.f) : Tensor::FromVector<float>({1}, {1.5f}));
  constant("t", per_channel ? RandomTensor({1, 4, 1, 1}, rng) : Tensor::FromVector<float>({1}, {0.25f}));
  ir::Node conv = MakeNode("conv", "Conv", {"x", "w", "b"}, {"c"});
  conv.attributes["pads"].type = ir::Attribute::Type::kInts;
  conv.attributes["pads"].ints = {1, 1, 1, 1};
  g.nodes.push_back(conv);
  g.nodes.push_back(MakeNode("mul", "Mul", {"s", "c"}, {"cs"}));
  g.nodes.push_back(MakeNode("add", "Add", {"cs", "t"}, {"h"}));
  AddScalar(g, "three", 3.f, true);
  AddScalar(g, "six", 6.f, true);
  g.nodes.push_back(MakeNode("plus3", "Add", {"h", "three"}, {"h3"}));
  ir::Node clip = MakeNode("clip", "Clip", {"h3"}, {"hc"});
  clip.attributes["min"].type = ir::Attribute::Type::kFloat;
  clip.attributes["min"].f = 0;
  clip.attributes["max"].type = ir::Attribute::Type::kFloat;
  clip.attributes["max"].f = 6;
  g.nodes.push_back(clip);
  g.nodes.push_back(MakeNode("hmul", "Mul", {"h", "hc"}, {"hm"}));
  g.nodes.push_back(MakeNode("div6", "Div", {"hm", "six"}, {"y"}));
  m.opsets[""] = 9;  // Clip with attributes; HardSwish is ONNX opset 14
  return m;
}

TEST(FusePatterns, ConstantNodesConvAffineAndHardSwishBecomeTwoOps) {
  for (bool per_channel : {false, true}) {
    SCOPED_TRACE(per_channel ? "per-channel" : "scalar");
    std::mt19937 rng(5);
    const ir::Model model = ConvAffineHardSwish(per_channel, rng);
    const ir::Graph g = Optimized(model);
    // Nothing left for fuse-conv: the conv stays a Conv (HardSwish is no conv post-op).
    EXPECT_EQ(OpTypes(g), (std::vector<std::string>{"Conv", "HardSwish"}));
    ExpectSameFunction(model, RandomTensor({2, 3, 6, 5}, rng, -3.f, 3.f));
  }
}

TEST(FusePatterns, KeptValuesStopTheFusions) {
  std::mt19937 rng(5);
  const ir::Model model = ConvAffineHardSwish(false, rng);
  // "cs" observed: the Mul folds, the Add does not; "h3" observed: no HardSwish.
  std::vector<std::string> ops = OpTypes(Optimized(model, {"cs", "h3", "three"}));
  std::sort(ops.begin(), ops.end());
  EXPECT_EQ(ops, (std::vector<std::string>{"Add", "Add", "Clip", "Constant", "Conv", "Div", "Mul"}));
}

// x -> Relu -> * a -> + c -> Conv(k x k, pad) -> * s -> y
ir::Model AffineIntoConvModel(int64_t k, int64_t pad, std::mt19937& rng) {
  ir::Model m = NewModel({2, 4, 6, 5});
  auto& g = m.graph;
  g.initializers["w"] = RandomTensor({6, 2, k, k}, rng);  // 2 groups
  g.initializers["b"] = RandomTensor({6}, rng);
  g.initializers["a"] = Tensor::FromVector<float>({1}, {0.7f});
  g.initializers["c"] = Tensor::Scalar<float>(-0.3f);
  g.initializers["s"] = RandomTensor({6, 1, 1}, rng);
  g.nodes.push_back(MakeNode("relu", "Relu", {"x"}, {"r"}));
  g.nodes.push_back(MakeNode("mul_a", "Mul", {"r", "a"}, {"ra"}));
  g.nodes.push_back(MakeNode("add_c", "Add", {"c", "ra"}, {"rc"}));
  ir::Node conv = MakeNode("conv", "Conv", {"rc", "w", "b"}, {"cv"});
  conv.attributes["group"] = testing::Int(2);
  conv.attributes["pads"] = testing::Ints({pad, pad, pad, pad});
  g.nodes.push_back(conv);
  g.nodes.push_back(MakeNode("mul_s", "Mul", {"cv", "s"}, {"y"}));
  return m;
}

TEST(FoldConvAffine, ScaleAndShiftBeforeAnUnpaddedConvFold) {
  for (int64_t k : {1, 3}) {
    SCOPED_TRACE("kernel " + std::to_string(k));
    std::mt19937 rng(23);
    const ir::Model model = AffineIntoConvModel(k, 0, rng);
    const ir::Graph g = Optimized(model);
    // Relu then the conv with everything folded (fuse-conv has nothing to take).
    EXPECT_EQ(OpTypes(g), (std::vector<std::string>{"Relu", "Conv"}));
    ExpectSameFunction(model, RandomTensor({2, 4, 6, 5}, rng, -2.f, 2.f));
  }
}

TEST(FoldConvAffine, ScaleAndShiftBeforeAPaddedConvStay) {
  std::mt19937 rng(23);
  const ir::Model model = AffineIntoConvModel(3, 1, rng);
  const ir::Graph g = Optimized(model);
  // The padded border would see c, not 0: only the Mul after the conv folds.
  EXPECT_EQ(OpTypes(g), (std::vector<std::string>{"Relu", "Mul", "Add", "Conv"}));
  ExpectSameFunction(model, RandomTensor({2, 4, 6, 5}, rng, -2.f, 2.f));
}

// x -> ConvTranspose (one group, 2x2 stride 2, with or without B) -> + bias [1, M, 1, 1]
// -> * scale [M, 1, 1] -> y: the chain folds into the ConvTranspose's W[:, o] and B.
// With two groups nothing folds (W's dim 1 is not the output channels then).
TEST(FoldConvAffine, ChainAfterAConvTransposeFolds) {
  for (int64_t groups : {1, 2})
    for (bool with_b : {false, true}) {
      SCOPED_TRACE("groups " + std::to_string(groups) + (with_b ? ", with B" : ""));
      std::mt19937 rng(24);
      ir::Model m = NewModel({2, 4, 5, 3});
      auto& g = m.graph;
      g.initializers["w"] = RandomTensor({4, 6 / groups, 2, 2}, rng);
      g.initializers["b"] = RandomTensor({6}, rng);
      g.initializers["bias"] = RandomTensor({1, 6, 1, 1}, rng);
      g.initializers["scale"] = RandomTensor({6, 1, 1}, rng);
      ir::Node ct = MakeNode("ct", "ConvTranspose", {"x", "w"}, {"t"});
      if (with_b) ct.inputs.push_back("b");
      ct.attributes["strides"] = testing::Ints({2, 2});
      ct.attributes["group"] = testing::Int(groups);
      g.nodes.push_back(ct);
      g.nodes.push_back(MakeNode("add", "Add", {"t", "bias"}, {"tb"}));
      g.nodes.push_back(MakeNode("mul", "Mul", {"scale", "tb"}, {"y"}));
      const ir::Graph opt = Optimized(m);
      const std::vector<std::string> want = groups == 1 ? std::vector<std::string>{"ConvTranspose"}
                                                        : std::vector<std::string>{"ConvTranspose", "Add", "Mul"};
      EXPECT_EQ(OpTypes(opt), want);
      ExpectSameFunction(m, RandomTensor({2, 4, 5, 3}, rng, -2.f, 2.f));
    }
}

// x -> written-out LayerNorm over the last axis [-> * gamma -> + beta] -> y
ir::Model LayerNormModel(bool affine, bool pow, std::mt19937& rng) {
  ir::Model m = NewModel({2, 5, 8});
  auto& g = m.graph;
  AddScalar(g, "two", 2.f);
  AddScalar(g, "eps", 1e-5f);
  auto mean = [](const std::string& name, const std::string& in, const std::string& out) {
    ir::Node n = MakeNode(name, "ReduceMean", {in}, {out});
    n.attributes["axes"].type = ir::Attribute::Type::kInts;
    n.attributes["axes"].ints = {-1};
    return n;
  };
  g.nodes.push_back(mean("m1", "x", "mu"));
  g.nodes.push_back(MakeNode("sub", "Sub", {"x", "mu"}, {"d"}));
  g.nodes.push_back(pow ? MakeNode("pow", "Pow", {"d", "two"}, {"d2"}) : MakeNode("sq", "Mul", {"d", "d"}, {"d2"}));
  g.nodes.push_back(mean("m2", "d2", "var"));
  g.nodes.push_back(MakeNode("addeps", "Add", {"var", "eps"}, {"ve"}));
  g.nodes.push_back(MakeNode("sqrt", "Sqrt", {"ve"}, {"sd"}));
  g.nodes.push_back(MakeNode("div", "Div", {"d", "sd"}, {affine ? "n" : "y"}));
  if (affine) {
    g.initializers["gamma"] = RandomTensor({8}, rng, 0.5f, 1.5f);
    g.initializers["beta"] = RandomTensor({8}, rng);
    g.nodes.push_back(MakeNode("gmul", "Mul", {"n", "gamma"}, {"ng"}));
    g.nodes.push_back(MakeNode("badd", "Add", {"beta", "ng"}, {"y"}));
  }
  return m;
}

TEST(FusePatterns, WrittenOutLayerNormBecomesLayerNormalization) {
  for (bool affine : {false, true})
    for (bool pow : {false, true}) {
      SCOPED_TRACE(std::string(affine ? "affine" : "plain") + (pow ? ", Pow" : ", Mul"));
      std::mt19937 rng(11);
      const ir::Model model = LayerNormModel(affine, pow, rng);
      const ir::Graph g = Optimized(model);
      ASSERT_EQ(OpTypes(g), std::vector<std::string>{"LayerNormalization"});
      EXPECT_FLOAT_EQ(g.nodes[0].attributes.at("epsilon").f, 1e-5f);
      ExpectSameFunction(model, RandomTensor({2, 5, 8}, rng, -2.f, 3.f));
    }
}

TEST(FusePatterns, LayerNormOverAnotherAxisIsLeftAlone) {
  std::mt19937 rng(11);
  ir::Model model = LayerNormModel(false, true, rng);
  model.graph.nodes[0].attributes["axes"].ints = {1};  // the mean of the subtraction over axis 1
  EXPECT_EQ(Optimized(model).nodes.size(), 7u);
}

// x -> GELU written out in one of the three associations exporters use -> y
ir::Model GeluModel(int form, bool div, std::mt19937&) {
  ir::Model m = NewModel({3, 17});
  auto& g = m.graph;
  AddScalar(g, "r", div ? 1.4142135f : 0.70710678f);
  AddScalar(g, "one", 1.f);
  AddScalar(g, "half", 0.5f);
  g.nodes.push_back(MakeNode("scale", div ? "Div" : "Mul", {"x", "r"}, {"xs"}));
  g.nodes.push_back(MakeNode("erf", "Erf", {"xs"}, {"e"}));
  g.nodes.push_back(MakeNode("plus1", "Add", {"one", "e"}, {"a"}));
  if (form == 0) {
    g.nodes.push_back(MakeNode("m1", "Mul", {"x", "a"}, {"xa"}));
    g.nodes.push_back(MakeNode("m2", "Mul", {"xa", "half"}, {"y"}));
  } else if (form == 1) {
    g.nodes.push_back(MakeNode("m1", "Mul", {"a", "half"}, {"ah"}));
    g.nodes.push_back(MakeNode("m2", "Mul", {"x", "ah"}, {"y"}));
  } else {
    g.nodes.push_back(MakeNode("m0", "Mul", {"x", "half"}, {"xh"}));
    g.nodes.push_back(MakeNode("m1", "Mul", {"xh", "a"}, {"y"}));
  }
  return m;
}

TEST(FusePatterns, WrittenOutGeluBecomesOneOp) {
  for (int form = 0; form < 3; ++form)
    for (bool div : {false, true}) {
      SCOPED_TRACE("form " + std::to_string(form) + (div ? ", Div" : ", Mul"));
      std::mt19937 rng(13);
      const ir::Model model = GeluModel(form, div, rng);
      const ir::Graph g = Optimized(model);
      ASSERT_EQ(OpTypes(g), std::vector<std::string>{"Gelu"});
      EXPECT_EQ(g.nodes[0].domain, "com.seqto");
      ExpectSameFunction(model, RandomTensor({3, 17}, rng, -6.f, 6.f));
    }
}

TEST(FusePatterns, GeluWithOtherConstantsIsLeftAlone) {
  std::mt19937 rng(13);
  ir::Model model = GeluModel(0, true, rng);
  model.graph.initializers["half"] = Tensor::Scalar<float>(0.6f);
  EXPECT_EQ(Optimized(model).nodes.size(), 5u);
}

TEST(FusePatterns, HardSigmoidTimesInputBecomesHardSwish) {
  std::mt19937 rng(17);
  ir::Model model = NewModel({4, 9});
  ir::Node hs = MakeNode("hs", "HardSigmoid", {"x"}, {"s"});
  hs.attributes["alpha"].type = ir::Attribute::Type::kFloat;
  hs.attributes["alpha"].f = 1.f / 6;
  model.graph.nodes.push_back(hs);
  model.graph.nodes.push_back(MakeNode("mul", "Mul", {"s", "x"}, {"y"}));
  ASSERT_EQ(OpTypes(Optimized(model)), std::vector<std::string>{"HardSwish"});
  ExpectSameFunction(model, RandomTensor({4, 9}, rng, -5.f, 5.f));
}

// x -> MatMul(W) -> Add(b) -> y: a linear layer, batched A.
ir::Model LinearModel(std::mt19937& rng) {
  ir::Model m = NewModel({2, 5, 8});
  m.graph.initializers["w"] = RandomTensor({8, 6}, rng);
  m.graph.initializers["b"] = RandomTensor({6}, rng);
  m.graph.nodes.push_back(MakeNode("mm", "MatMul", {"x", "w"}, {"xw"}));
  m.graph.nodes.push_back(MakeNode("add", "Add", {"b", "xw"}, {"y"}));
  return m;
}

TEST(FusePatterns, MatMulPlusBiasBecomesFusedMatMul) {
  std::mt19937 rng(19);
  const ir::Model model = LinearModel(rng);
  const ir::Graph g = Optimized(model);
  ASSERT_EQ(OpTypes(g), std::vector<std::string>{"FusedMatMul"});
  EXPECT_EQ(g.nodes[0].name, "mm");
  const Tensor x = RandomTensor({2, 5, 8}, rng);
  ExpectSameFunction(model, x);
  // The reference kernel rounds the product, then adds: bit-identical to the two ops.
  runtime::SessionOptions plain;
  plain.optimize = false;
  plain.reference_only = true;
  runtime::SessionOptions fused_reference;
  fused_reference.reference_only = true;
  auto a = (*runtime::Session::Create(model, plain))->Run({{"x", x}});
  auto b = (*runtime::Session::Create(model, fused_reference))->Run({{"x", x}});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->at("y").ToDoubles(), b->at("y").ToDoubles());
}

TEST(FusePatterns, MatMulWithABroadcastAddIsLeftAlone) {
  std::mt19937 rng(19);
  ir::Model model = LinearModel(rng);
  model.graph.initializers["b"] = RandomTensor({5, 6}, rng);  // not one value per column
  EXPECT_EQ(Optimized(model).nodes.size(), 2u);
}

TEST(FusePatterns, FusedMatMulRejectsABiasOfTheWrongWidth) {
  std::mt19937 rng(19);
  ir::Model model = LinearModel(rng);
  ir::Graph& g = model.graph;
  g.nodes = {MakeNode("mm", "FusedMatMul", {"x", "w", "b"}, {"y"}, "com.seqto")};
  g.initializers["b"] = RandomTensor({5}, rng);
  for (bool reference : {false, true}) {
    runtime::SessionOptions options;
    options.reference_only = reference;
    auto s = runtime::Session::Create(model, options);
    ASSERT_TRUE(s.ok()) << s.error().message;
    auto out = (*s)->Run({{"x", RandomTensor({2, 5, 8}, rng)}});
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find("Bias has shape 5, expected 6 values"), std::string::npos)
        << out.error().message;
    EXPECT_NE(out.error().message.find("'mm'"), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace seqto
