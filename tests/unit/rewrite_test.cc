// Graph passes: each pass must leave a valid graph that computes the same function.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::MakeNode;
using testing::RandomTensor;

// x -> Conv(3x3, pad 1) -> BatchNormalization -> Relu -> y
ir::Model ConvBnModel(bool with_bias, std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {7}, {5}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  g.initializers["w"] = RandomTensor({4, 3, 3, 3}, rng);
  std::vector<std::string> conv_in = {"x", "w"};
  if (with_bias) {
    g.initializers["b"] = RandomTensor({4}, rng);
    conv_in.push_back("b");
  }
  g.initializers["scale"] = RandomTensor({4}, rng, 0.5f, 2.f);
  g.initializers["beta"] = RandomTensor({4}, rng);
  g.initializers["mean"] = RandomTensor({4}, rng);
  g.initializers["var"] = RandomTensor({4}, rng, 0.1f, 3.f);
  ir::Node conv = MakeNode("conv", "Conv", conv_in, {"c"});
  conv.attributes["pads"].type = ir::Attribute::Type::kInts;
  conv.attributes["pads"].ints = {1, 1, 1, 1};
  g.nodes.push_back(conv);
  g.nodes.push_back(MakeNode("bn", "BatchNormalization", {"c", "scale", "beta", "mean", "var"}, {"bn_out"}));
  g.nodes.push_back(MakeNode("relu", "Relu", {"bn_out"}, {"y"}));
  return m;
}

TEST(FoldBatchNorm, RemovesTheNodeAndKeepsTheFunction) {
  for (bool with_bias : {false, true}) {
    std::mt19937 rng(7);
    ir::Model model = ConvBnModel(with_bias, rng);
    ir::Graph folded = model.graph;
    rewrite::OptimizeOptions fold_only;
    fold_only.fuse_conv = false;
    fold_only.channels_last = false;
    ASSERT_TRUE(rewrite::Optimize(folded, fold_only).ok());
    ASSERT_EQ(folded.nodes.size(), 2u);
    EXPECT_EQ(folded.nodes[0].op_type, "Conv");
    EXPECT_EQ(folded.initializers.count("mean"), 0u) << "unused statistics are dropped";

    runtime::SessionOptions plain;
    plain.optimize = false;
    auto reference = runtime::Session::Create(model, plain);
    auto optimized = runtime::Session::Create(model, {});
    ASSERT_TRUE(reference.ok()) << reference.error().message;
    ASSERT_TRUE(optimized.ok()) << optimized.error().message;
    const Tensor x = RandomTensor({2, 3, 7, 5}, rng);
    auto a = (*reference)->Run({{"x", x}});
    auto b = (*optimized)->Run({{"x", x}});
    ASSERT_TRUE(a.ok() && b.ok());
    const auto va = a->at("y").ToDoubles(), vb = b->at("y").ToDoubles();
    ASSERT_EQ(va.size(), vb.size());
    for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-5 + 1e-5 * std::fabs(va[i]));
  }
}

TEST(FoldBatchNorm, LeavesKeptValuesAlone) {
  std::mt19937 rng(1);
  ir::Model model = ConvBnModel(true, rng);
  rewrite::OptimizeOptions options;
  options.keep_values = {"c"};
  options.channels_last = false;  // counted here: the fusion passes only
  ASSERT_TRUE(rewrite::Optimize(model.graph, options).ok());
  EXPECT_EQ(model.graph.nodes.size(), 3u);
}

// x -> Conv -> BN -> Add(x) -> act -> Conv -> act2 -> y : a residual block whose
// convs, BN, Add and activations fuse into two FusedConv nodes.
ir::Model ResidualModel(const std::string& act, std::mt19937& rng) {
  ir::Model m = ConvBnModel(true, rng);
  auto& g = m.graph;
  g.inputs[0].shape = std::vector<ir::Dim>{{-1, "N"}, {4}, {7}, {5}};
  g.initializers["w"] = RandomTensor({4, 4, 3, 3}, rng);
  g.nodes.pop_back();  // the Relu
  g.nodes.push_back(MakeNode("add", "Add", {"x", "bn_out"}, {"sum"}));
  ir::Node a1 = MakeNode("act1", act, {"sum"}, {"a1"});
  if (act == "Clip") {
    g.initializers["lo"] = Tensor::Scalar<float>(0.f);
    g.initializers["hi"] = Tensor::Scalar<float>(0.5f);
    a1.inputs = {"sum", "lo", "hi"};
  }
  if (act == "LeakyRelu") {
    a1.attributes["alpha"].type = ir::Attribute::Type::kFloat;
    a1.attributes["alpha"].f = 0.2f;
  }
  g.nodes.push_back(a1);
  g.initializers["w2"] = RandomTensor({6, 4, 1, 1}, rng);
  g.nodes.push_back(MakeNode("conv2", "Conv", {"a1", "w2"}, {"c2"}));
  g.nodes.push_back(MakeNode("relu2", "Relu", {"c2"}, {"y"}));
  return m;
}

// The unoptimized graph on the reference kernels: what every pass must keep computing.
runtime::SessionOptions Unoptimized() {
  runtime::SessionOptions plain;
  plain.optimize = false;
  plain.reference_only = true;
  return plain;
}

// Output "y" of `model` run on input "x" (empty, with a test failure, when it cannot run).
Tensor RunY(const ir::Model& model, const runtime::SessionOptions& options, const Tensor& x) {
  auto session = runtime::Session::Create(model, options);
  EXPECT_TRUE(session.ok()) << session.error().message;
  if (!session.ok()) return Tensor();
  auto out = (*session)->Run({{"x", x}});
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? out->at("y") : Tensor();
}

void ExpectSameOutputs(const ir::Model& model, const runtime::SessionOptions& options, const Tensor& x) {
  const Tensor a = RunY(model, Unoptimized(), x), b = RunY(model, options, x);
  ASSERT_TRUE(a.defined() && b.defined());
  const auto va = a.ToDoubles(), vb = b.ToDoubles();
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vb[i], 1e-5 + 1e-4 * std::fabs(va[i])) << "at " << i;
}

TEST(FuseConv, ResidualBlocksFuseAndComputeTheSame) {
  for (const std::string act : {"Relu", "Clip", "LeakyRelu"}) {
    SCOPED_TRACE(act);
    std::mt19937 rng(3);
    ir::Model model = ResidualModel(act, rng);
    ir::Graph g = model.graph;
    rewrite::OptimizeOptions fusion_only;
    fusion_only.channels_last = false;  // counted here: the fusion passes only
    ASSERT_TRUE(rewrite::Optimize(g, fusion_only).ok());
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].op_type, "FusedConv");
    EXPECT_EQ(g.nodes[0].inputs.size(), 4u) << "the residual Add became the sum operand";
    EXPECT_EQ(g.nodes[1].op_type, "FusedConv");
    for (bool reference : {false, true}) {
      runtime::SessionOptions options;
      options.reference_only = reference;
      ExpectSameOutputs(model, options, RandomTensor({3, 4, 7, 5}, rng));
    }
  }
}

TEST(FuseConv, KeptValuesAreNotFusedAway) {
  std::mt19937 rng(3);
  ir::Model model = ResidualModel("Relu", rng);
  rewrite::OptimizeOptions options;
  options.keep_values = {"sum", "c2"};
  options.channels_last = false;  // counted here: the fusion passes only
  ASSERT_TRUE(rewrite::Optimize(model.graph, options).ok());
  // BN folds into conv, conv+Add fuse (sum is the Add's output, kept), act1 stays,
  // conv2 stays unfused because c2 is kept.
  std::vector<std::string> ops;
  for (const auto& n : model.graph.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"FusedConv", "Relu", "Conv", "Relu"}));
}

TEST(FuseConv, BroadcastSumFallsBackAndStaysCorrect) {
  std::mt19937 rng(5);
  ir::Model model = ResidualModel("Relu", rng);
  // Add a per-channel tensor instead of x: the sum operand broadcasts.
  model.graph.initializers["chan"] = RandomTensor({4, 1, 1}, rng);
  for (auto& n : model.graph.nodes)
    if (n.name == "add") n.inputs = {"chan", "bn_out"};
  ExpectSameOutputs(model, {}, RandomTensor({2, 4, 7, 5}, rng));
}

// x -> Conv(3x3, pad 1, bias) -> Clip(0, 6) -> Q -> DQ -> Conv(1x1) -> Add(residual)
// -> Q -> DQ -> y, with `type` (16 or 8-bit) Q/DQ (zero point `zp`, scale 0.25) and small integer weights
// and quarter-integer inputs: every conv output is exact in float whatever the
// summation order, and many land on rounding ties, so fused and unfused runs must
// agree bit for bit.
ir::Model FakeQuantModel(DType type, int32_t zp, const char* domain, std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  m.opsets["com.microsoft"] = 1;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {4}, {9}, {7}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  std::uniform_int_distribution<int> small(-2, 2);
  auto integers = [&](Shape shape, float unit) {
    Tensor t(DType::kFloat32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = unit * static_cast<float>(small(rng));
    return t;
  };
  g.initializers["w1"] = integers({6, 4, 3, 3}, 1.f);
  g.initializers["b1"] = integers({6}, 0.125f);
  g.initializers["w2"] = integers({6, 6, 1, 1}, 1.f);
  g.initializers["lo"] = Tensor::Scalar<float>(0.f);
  g.initializers["hi"] = Tensor::Scalar<float>(6.f);
  g.initializers["s"] = Tensor::Scalar<float>(0.25f);
  Tensor z(type, {});
  std::memset(z.raw(), 0, z.nbytes());
  if (type == DType::kInt16) z.data<int16_t>()[0] = static_cast<int16_t>(zp);
  if (type == DType::kUInt16) z.data<uint16_t>()[0] = static_cast<uint16_t>(zp);
  if (type == DType::kUInt8) z.data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  if (type == DType::kInt8) z.data<int8_t>()[0] = static_cast<int8_t>(zp);
  g.initializers["z"] = z;
  auto qdq = [&](const std::string& in, const std::string& out) {
    ir::Node q = MakeNode(in + "_q", "QuantizeLinear", {in, "s", "z"}, {in + "_int"});
    ir::Node dq = MakeNode(in + "_dq", "DequantizeLinear", {in + "_int", "s", "z"}, {out});
    q.domain = dq.domain = domain;
    g.nodes.push_back(q);
    g.nodes.push_back(dq);
  };
  g.nodes.push_back(MakeNode("conv1", "Conv", {"x", "w1", "b1"}, {"c1"}));
  g.nodes.back().attributes["pads"] = testing::Ints({1, 1, 1, 1});
  g.nodes.push_back(MakeNode("clip", "Clip", {"c1", "lo", "hi"}, {"a1"}));
  qdq("a1", "a1_fq");
  g.nodes.push_back(MakeNode("conv2", "Conv", {"a1_fq", "w2"}, {"c2"}));
  g.nodes.push_back(MakeNode("add", "Add", {"c2", "a1_fq"}, {"r2"}));
  qdq("r2", "y");
  return m;
}

TEST(FuseConv, QuantizeDequantizeAfterAConvIsItsPostOpWithTheSameValues) {
  std::mt19937 rng(17);
  struct Case {
    DType type;
    int32_t zp;
    const char* domain;
  };
  for (const Case& c : {Case{DType::kInt16, -3, "com.microsoft"}, Case{DType::kUInt16, 40, "com.microsoft"},
                        Case{DType::kUInt8, 3, ""}, Case{DType::kInt8, -120, ""}}) {
    SCOPED_TRACE(DTypeName(c.type));
    const ir::Model model = FakeQuantModel(c.type, c.zp, c.domain, rng);
    ir::Graph g = model.graph;
    rewrite::OptimizeOptions fusion_only;
    fusion_only.channels_last = false;
    fusion_only.fuse_qdq = false;  // 8-bit: the pairs between float convs, as a float island has them
    ASSERT_TRUE(rewrite::Optimize(g, fusion_only).ok());
    std::vector<std::string> ops;
    for (const auto& n : g.nodes) ops.push_back(n.op_type);
    EXPECT_EQ(ops, (std::vector<std::string>{"FusedConv", "FusedConv"}));
    EXPECT_TRUE(g.nodes[0].has_attr("output_fake_quant"));  // after its Clip
    EXPECT_TRUE(g.nodes[1].has_attr("output_fake_quant"));  // after its residual sum
    EXPECT_EQ(g.nodes[1].inputs.size(), 4u);
    // Quarter-integer inputs, some past the clamp and the 8-bit range.
    Tensor x(DType::kFloat32, {3, 4, 9, 7});
    std::uniform_int_distribution<int> quarters(-60, 60);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(quarters(rng));
    x.data<float>()[200] = std::nanf("");  // quantizes to the zero point: dequantized 0
    const Tensor want = RunY(model, Unoptimized(), x);
    ASSERT_TRUE(want.defined());
    for (bool channels_last : {false, true})
      for (bool reference : {false, true}) {
        SCOPED_TRACE(std::string(channels_last ? "channels-last" : "NCHW") + (reference ? " reference" : " fast"));
        runtime::SessionOptions options;
        options.reference_only = reference;
        options.channels_last = channels_last;
        const Tensor got = RunY(model, options, x);
        ASSERT_TRUE(got.defined());
        EXPECT_EQ(got.ToDoubles(), want.ToDoubles());
      }
  }
}

TEST(GraphPatch, InvalidResultIsReportedWithThePassName) {
  std::mt19937 rng(1);
  ir::Model model = ConvBnModel(false, rng);
  rewrite::GraphPatch patch;
  patch.RemoveNode("conv");  // leaves "c" undefined
  Status s = rewrite::ApplyPatch(model.graph, std::move(patch), "broken-pass");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("broken-pass"), std::string::npos) << s.message();
}

// x -> Conv(W1 = DequantizeLinear(int8 per-channel)) -> Conv(W2 = Cast(float16)) -> y:
// the weights of int16 / float16 fallback groups. Folding them gives the very values
// the DequantizeLinear and Cast kernels compute, so the result is bit-identical.
TEST(FoldConstantWeights, DequantizedAndHalfWeightsBecomeFloatInitializers) {
  std::mt19937 rng(11);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {6}, {5}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  Tensor w1(DType::kInt8, {4, 3, 3, 3});
  for (int64_t i = 0; i < w1.numel(); ++i)
    w1.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  g.initializers["w1.q"] = w1;
  g.initializers["w1.scale"] = RandomTensor({4}, rng, 0.001f, 0.05f);
  Tensor zp(DType::kInt8, {4});
  for (int i = 0; i < 4; ++i) zp.data<int8_t>()[i] = static_cast<int8_t>(i - 2);
  g.initializers["w1.zp"] = zp;
  ir::Node dq = MakeNode("w1.dq", "DequantizeLinear", {"w1.q", "w1.scale", "w1.zp"}, {"w1"});
  dq.attributes["axis"] = testing::Int(0);
  g.nodes.push_back(dq);
  const Tensor w2f = RandomTensor({2, 4, 1, 1}, rng);
  Tensor w2(DType::kFloat16, w2f.shape());
  for (int64_t i = 0; i < w2.numel(); ++i) static_cast<uint16_t*>(w2.raw())[i] = FloatToHalf(w2f.data<float>()[i]);
  g.initializers["w2.h"] = w2;
  ir::Node cast = MakeNode("w2.cast", "Cast", {"w2.h"}, {"w2"});
  cast.attributes["to"] = testing::Int(static_cast<int64_t>(DType::kFloat32));
  g.nodes.push_back(cast);
  g.nodes.push_back(MakeNode("conv1", "Conv", {"x", "w1"}, {"c1"}));
  g.nodes.push_back(MakeNode("conv2", "Conv", {"c1", "w2"}, {"y"}));

  ir::Graph folded = g;
  rewrite::OptimizeOptions only_fold;
  only_fold.fold_batchnorm = only_fold.fuse_qdq = only_fold.fuse_conv = only_fold.channels_last = false;
  ASSERT_TRUE(rewrite::Optimize(folded, only_fold).ok());
  ASSERT_EQ(folded.nodes.size(), 2u);
  for (const auto& n : folded.nodes) EXPECT_EQ(n.op_type, "Conv");
  ASSERT_TRUE(folded.initializers.count("w1") && folded.initializers.count("w2"));

  const runtime::TensorMap feeds{{"x", RandomTensor({2, 3, 6, 5}, rng)}};
  runtime::SessionOptions plain;
  plain.optimize = false;
  plain.reference_only = true;
  auto want = runtime::Session::Create(m, plain);
  ir::Model fm = m;
  fm.graph = folded;
  auto got = runtime::Session::Create(fm, plain);
  ASSERT_TRUE(want.ok() && got.ok());
  auto a = (*want)->Run(feeds), b = (*got)->Run(feeds);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->at("y").ToDoubles(), b->at("y").ToDoubles());

  // A kept weight stays computed by its node (hooks must see it).
  ir::Graph kept = g;
  only_fold.keep_values = {"w1"};
  ASSERT_TRUE(rewrite::Optimize(kept, only_fold).ok());
  EXPECT_EQ(kept.nodes.size(), 3u);
}

}  // namespace
}  // namespace seqto
