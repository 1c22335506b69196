// MACs per node and per quantization group (quant/macs.h), checked against counts
// worked out by hand.
#include "quant/macs.h"

#include <gtest/gtest.h>

#include <random>

#include "quant/quantize.h"
#include "support/test_models.h"

namespace seqto::quant {
namespace {

using testing::FloatValue;
using testing::Int;
using testing::Ints;
using testing::MakeNode;
using testing::RandomTensor;

// x[N,3,8,8] -> conv1 (4 out, 3x3, pad 1) -> relu1 -> dw (depthwise 3x3, stride 2,
// pad 1) -> ct (ConvTranspose 4 -> 2, 2x2, stride 2) -> flat -> gemm (128 -> 10,
// transB) -> mm (10 -> 5) -> y. The batch is symbolic: MACs are counted at batch 1.
ir::Model SmallCnn() {
  std::mt19937 rng(3);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{-1, "N"}, {3}, {8}, {8}}));
  g.outputs.push_back(FloatValue("y", {{-1, "N"}, {5}}));
  g.initializers["w1"] = RandomTensor({4, 3, 3, 3}, rng);
  g.initializers["b1"] = RandomTensor({4}, rng);
  g.initializers["w2"] = RandomTensor({4, 1, 3, 3}, rng);
  g.initializers["w3"] = RandomTensor({4, 2, 2, 2}, rng);
  g.initializers["w4"] = RandomTensor({10, 128}, rng);
  g.initializers["b4"] = RandomTensor({10}, rng);
  g.initializers["w5"] = RandomTensor({10, 5}, rng);
  ir::Node conv1 = MakeNode("conv1", "Conv", {"x", "w1", "b1"}, {"c1"});
  conv1.attributes["pads"] = Ints({1, 1, 1, 1});
  g.nodes.push_back(conv1);
  g.nodes.push_back(MakeNode("relu1", "Relu", {"c1"}, {"r1"}));
  ir::Node dw = MakeNode("dw", "Conv", {"r1", "w2"}, {"c2"});
  dw.attributes["group"] = Int(4);
  dw.attributes["strides"] = Ints({2, 2});
  dw.attributes["pads"] = Ints({1, 1, 1, 1});
  g.nodes.push_back(dw);
  ir::Node ct = MakeNode("ct", "ConvTranspose", {"c2", "w3"}, {"c3"});
  ct.attributes["strides"] = Ints({2, 2});
  g.nodes.push_back(ct);
  g.nodes.push_back(MakeNode("flat", "Flatten", {"c3"}, {"f"}));
  ir::Node gemm = MakeNode("gemm", "Gemm", {"f", "w4", "b4"}, {"h"});
  gemm.attributes["transB"] = Int(1);
  g.nodes.push_back(gemm);
  g.nodes.push_back(MakeNode("mm", "MatMul", {"h", "w5"}, {"y"}));
  return m;
}

// By hand: output elements x reduced elements per output.
const std::map<std::string, int64_t> kSmallCnnMacs = {
    {"conv1", (4 * 8 * 8) * (3 * 3 * 3)},  // 6912
    {"dw", (4 * 4 * 4) * (1 * 3 * 3)},     // 576: one input channel per group
    {"ct", (4 * 4 * 4) * (2 * 2 * 2)},     // 512: input elements x (out/group x kernel)
    {"gemm", 10 * 128},
    {"mm", 5 * 10},
};

TEST(Macs, CountsEachOpByHand) {
  const MacCount count = CountMacs(SmallCnn());
  EXPECT_EQ(count.nodes, kSmallCnnMacs);
  EXPECT_TRUE(count.unknown.empty());
  EXPECT_EQ(count.total, 6912 + 576 + 512 + 1280 + 50);
}

TEST(Macs, BroadcastMatMulTransposedGemmAndUnknownShapes) {
  std::mt19937 rng(5);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back(FloatValue("a", {{-1, "N"}, {3}, {4}}));        // batch 1: [1, 3, 4]
  g.inputs.push_back(FloatValue("b", {{2}, {4}, {5}}));              // broadcast to [2, 3, 5]
  g.inputs.push_back(FloatValue("p", {{6}, {4}}));                   // transA: K = 6, M = 4
  g.inputs.push_back(FloatValue("s", {{-1, "N"}, {-1, "S"}, {8}}));  // a sequence length unknown
  g.initializers["q"] = RandomTensor({6, 7}, rng);
  g.initializers["k"] = RandomTensor({8, 2}, rng);
  g.nodes.push_back(MakeNode("bmm", "MatMul", {"a", "b"}, {"o1"}));
  ir::Node gemm = MakeNode("gemm_t", "Gemm", {"p", "q"}, {"o2"});
  gemm.attributes["transA"] = Int(1);
  g.nodes.push_back(gemm);
  g.nodes.push_back(MakeNode("seq", "MatMul", {"s", "k"}, {"o3"}));
  for (const char* o : {"o1", "o2", "o3"}) g.outputs.push_back({o, DType::kFloat32, std::nullopt});
  const MacCount count = CountMacs(m);
  EXPECT_EQ(count.nodes, (std::map<std::string, int64_t>{{"bmm", 2 * 3 * 5 * 4}, {"gemm_t", 4 * 7 * 6}}));
  EXPECT_EQ(count.unknown, std::vector<std::string>{"seq"});
  EXPECT_EQ(count.total, 120 + 168);
}

TEST(Macs, EachGroupSumsItsNodes) {
  ir::Model model = SmallCnn();
  auto prepared = QuantPlan::Prepare(model);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  QuantOptions o;
  auto tensors = QuantPlan::TensorsToCalibrate(*prepared, o);
  ASSERT_TRUE(tensors.ok()) << tensors.error().message;
  TensorRanges ranges;
  for (const auto& t : *tensors) {
    ranges[t].min = -1.0;
    ranges[t].max = 1.0;
  }
  auto plan = QuantPlan::Create(*prepared, o, &ranges);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->model_macs(), 6912 + 576 + 512 + 1280 + 50);
  EXPECT_TRUE(plan->macs_unknown_nodes().empty());
  ASSERT_GE(plan->groups().size(), 4u);
  int64_t grouped = 0;
  for (const QuantGroup& g : plan->groups()) {
    SCOPED_TRACE(g.name);
    int64_t expected = 0;
    for (const auto& n : g.nodes)
      if (kSmallCnnMacs.count(n)) expected += kSmallCnnMacs.at(n);
    EXPECT_EQ(g.macs, expected);
    grouped += g.macs;
  }
  // The conv's group holds the Relu ORT folds into it: the conv's MACs alone.
  EXPECT_EQ(plan->FindGroup("conv1")->macs, 6912);
  EXPECT_EQ(plan->FindGroup("gemm")->macs, 1280);
  EXPECT_LE(grouped, plan->model_macs());
}

TEST(Macs, AGroupWithAnUnknownNodeIsUnknown) {
  MacCount count;
  count.nodes = {{"a", 10}, {"b", 20}};
  count.unknown = {"c"};
  QuantGroup g1, g2;
  g1.nodes = {"a", "relu", "b"};
  g2.nodes = {"c", "a"};
  EXPECT_EQ(GroupMacs({g1, g2}, count), (std::vector<int64_t>{30, -1}));
}

}  // namespace
}  // namespace seqto::quant
