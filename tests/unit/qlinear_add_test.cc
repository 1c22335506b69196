// com.seqto.QLinearAdd against the unfused DequantizeLinear -> Add -> QuantizeLinear
// graph it replaces, for every broadcast form (same shape, a bias row, a scalar, a
// column, both operands broadcast): the results must be equal bit for bit.
#include <gtest/gtest.h>

#include <random>

#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::MakeNode;

Tensor RandomU8(const Shape& shape, std::mt19937& rng) {
  Tensor t(DType::kUInt8, shape);
  std::uniform_int_distribution<int> d(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
  return t;
}

// y = Q(DQ(a) + DQ(b)), a an input, b a constant (as a bias or a residual would be).
ir::Model AddModel(const Shape& a_shape, const Tensor& b) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  std::vector<ir::Dim> dims;
  for (int64_t d : a_shape) dims.push_back({d});
  g.inputs.push_back({"a", DType::kUInt8, dims});
  g.outputs.push_back({"y", DType::kUInt8, std::nullopt});
  g.initializers["b"] = b;
  g.initializers["sa"] = Tensor::Scalar<float>(0.037f);
  g.initializers["za"] = Tensor::Scalar<uint8_t>(121);
  g.initializers["sb"] = Tensor::Scalar<float>(0.011f);
  g.initializers["zb"] = Tensor::Scalar<uint8_t>(7);
  g.initializers["sy"] = Tensor::Scalar<float>(0.043f);
  g.initializers["zy"] = Tensor::Scalar<uint8_t>(100);
  g.nodes.push_back(MakeNode("dqa", "DequantizeLinear", {"a", "sa", "za"}, {"fa"}));
  g.nodes.push_back(MakeNode("dqb", "DequantizeLinear", {"b", "sb", "zb"}, {"fb"}));
  g.nodes.push_back(MakeNode("add", "Add", {"fa", "fb"}, {"s"}));
  g.nodes.push_back(MakeNode("q", "QuantizeLinear", {"s", "sy", "zy"}, {"y"}));
  return m;
}

TEST(QLinearAdd, EveryBroadcastFormEqualsTheUnfusedGraph) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 5, 8}, {2, 5, 8}},  // same shape
      {{2, 5, 8}, {8}},        // bias row
      {{2, 5, 8}, {1}},        // scalar
      {{2, 5, 8}, {}},         // rank-0 scalar
      {{2, 5, 8}, {5, 1}},     // column
      {{2, 1, 8}, {3, 1}},     // both broadcast
      {{8}, {2, 5, 8}},        // A the smaller one
      {{3, 200}, {200}},       // rows long enough to split across threads
      // Channels-last per-channel operands and scalars (tiled into blocks of whole
      // periods; 60000 elements: several blocks, the last one partial).
      {{2, 6, 7, 24}, {1, 1, 1, 24}},
      {{1, 1, 1, 24}, {2, 6, 7, 24}},
      {{1, 50, 50, 24}, {1, 1, 1, 24}},
      {{1, 9, 9, 1}, {1, 1, 1, 1}},
      {{3, 7, 5}, {7, 5}},  // a period (35) that does not divide the block
  };
  for (const auto& [a_shape, b_shape] : cases) {
    SCOPED_TRACE(ShapeToString(a_shape) + " + " + ShapeToString(b_shape));
    std::mt19937 rng(9);
    const ir::Model model = AddModel(a_shape, RandomU8(b_shape, rng));
    const Tensor a = RandomU8(a_shape, rng);
    runtime::SessionOptions unfused;
    unfused.optimize = false;
    auto ref = runtime::Session::Create(model, unfused);
    auto fused = runtime::Session::Create(model, {});
    ASSERT_TRUE(ref.ok() && fused.ok());
    ir::Graph g = model.graph;
    ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
    ASSERT_EQ(g.nodes.size(), 1u);
    ASSERT_EQ(g.nodes[0].op_type, "QLinearAdd");
    auto want = (*ref)->Run({{"a", a}});
    auto got = (*fused)->Run({{"a", a}});
    ASSERT_TRUE(want.ok()) << want.error().message;
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->at("y").shape(), want->at("y").shape());
    EXPECT_EQ(got->at("y").ToDoubles(), want->at("y").ToDoubles());
  }
}

}  // namespace
}  // namespace seqto
