// Graph passes: each pass must leave a valid graph that computes the same function.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "rewrite/passes.h"
#include "runtime/session.h"

namespace seqto {
namespace {

Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

ir::Node MakeNode(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out) {
  ir::Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

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
    ASSERT_TRUE(rewrite::Optimize(folded, {}).ok());
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
  ASSERT_TRUE(rewrite::Optimize(model.graph, options).ok());
  EXPECT_EQ(model.graph.nodes.size(), 3u);
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

}  // namespace
}  // namespace seqto
