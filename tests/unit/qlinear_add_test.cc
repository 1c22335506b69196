// com.seqto.QLinearAdd, for every broadcast form (same shape, a bias row, a scalar, a
// column, both operands broadcast, channels-last per-channel operands):
//   - against a simple reference of ONNX Runtime's formula (ops/quant/qlinear_add.cc),
//     element by element with numpy broadcasting: equal bit for bit;
//   - against the unfused DequantizeLinear -> Add -> QuantizeLinear graph it replaces:
//     at most one quantum apart, and only near ties (rarely).
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

Tensor RandomU8(const Shape& shape, std::mt19937& rng) {
  Tensor t(DType::kUInt8, shape);
  std::uniform_int_distribution<int> d(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
  return t;
}

// The parameters of AddModel.
constexpr float kSa = 0.037f, kSb = 0.011f, kSy = 0.043f;
constexpr int32_t kZa = 121, kZb = 7, kZy = 100;

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
  g.initializers["sa"] = Tensor::Scalar<float>(kSa);
  g.initializers["za"] = Tensor::Scalar<uint8_t>(kZa);
  g.initializers["sb"] = Tensor::Scalar<float>(kSb);
  g.initializers["zb"] = Tensor::Scalar<uint8_t>(kZb);
  g.initializers["sy"] = Tensor::Scalar<float>(kSy);
  g.initializers["zy"] = Tensor::Scalar<uint8_t>(kZy);
  g.nodes.push_back(MakeNode("dqa", "DequantizeLinear", {"a", "sa", "za"}, {"fa"}));
  g.nodes.push_back(MakeNode("dqb", "DequantizeLinear", {"b", "sb", "zb"}, {"fb"}));
  g.nodes.push_back(MakeNode("add", "Add", {"fa", "fb"}, {"s"}));
  g.nodes.push_back(MakeNode("q", "QuantizeLinear", {"s", "sy", "zy"}, {"y"}));
  return m;
}

// ONNX Runtime's QLinearAdd for one element: the operand that is a span's scalar
// (`a_is_scalar`) is the inner term.
uint8_t OrtAdd(int32_t a, int32_t b, bool a_is_scalar) {
  const float ra = kSa / kSy, rb = kSb / kSy;
  float v;
  if (a_is_scalar) {
    const float fixed = static_cast<float>(kZy) - std::fma(rb, static_cast<float>(kZb), ra * static_cast<float>(kZa));
    v = std::fma(static_cast<float>(b), rb, std::fma(static_cast<float>(a), ra, fixed));
  } else {
    const float fixed = static_cast<float>(kZy) - std::fma(ra, static_cast<float>(kZa), rb * static_cast<float>(kZb));
    v = std::fma(static_cast<float>(a), ra, std::fma(static_cast<float>(b), rb, fixed));
  }
  return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f));
}

// Y = OrtAdd(A, B) with numpy broadcasting. A is a span's scalar where it is
// constant along Y's last axis and B is not, or where it is one value per channel of a
// 4-D channels-last tensor ([1, 1, 1, C]: ONNX Runtime sees the NCHW [1, C, 1, 1]).
std::vector<double> OrtAddReference(const Tensor& a, const Tensor& b) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const size_t rank = std::max(as.size(), bs.size());
  auto padded = [rank](const Shape& s) {
    Shape p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const Shape pa = padded(as), pb = padded(bs);
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) out[d] = std::max(pa[d], pb[d]);
  const bool a_last_const = rank > 0 && pa[rank - 1] == 1 && out[rank - 1] > 1;
  const bool b_last_const = rank > 0 && pb[rank - 1] == 1 && out[rank - 1] > 1;
  const bool a_per_channel = rank == 4 && a.numel() == out[3] && a.numel() > 1 && b.numel() == NumElements(out);
  const bool a_scalar = a.numel() == 1 && b.numel() > 1;
  const bool a_is_scalar = (a_last_const && !b_last_const) || a_per_channel || a_scalar;
  std::vector<double> y(static_cast<size_t>(NumElements(out)));
  for (int64_t i = 0; i < NumElements(out); ++i) {
    int64_t ia = 0, ib = 0, sa = 1, sb = 1, rest = i;
    for (size_t d = rank; d-- > 0;) {
      const int64_t k = rest % out[d];
      rest /= out[d];
      ia += (pa[d] == 1 ? 0 : k) * sa;
      ib += (pb[d] == 1 ? 0 : k) * sb;
      sa *= pa[d];
      sb *= pb[d];
    }
    y[i] = OrtAdd(a.data<uint8_t>()[ia], b.data<uint8_t>()[ib], a_is_scalar);
  }
  return y;
}

TEST(QLinearAdd, EveryBroadcastFormEqualsOrtsFormulaAndTheUnfusedGraphNearTies) {
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
    const std::vector<double> y = got->at("y").ToDoubles(), y_unfused = want->at("y").ToDoubles();
    const Tensor b = model.graph.initializers.at("b");
    EXPECT_EQ(y, OrtAddReference(a, b));
    ASSERT_EQ(y.size(), y_unfused.size());
    int64_t near_ties = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      EXPECT_LE(std::abs(y[i] - y_unfused[i]), 1) << "element " << i;
      near_ties += y[i] != y_unfused[i];
    }
    EXPECT_LE(near_ties * 100, static_cast<int64_t>(y.size())) << "more than 1% of the elements differ";
  }
}

}  // namespace
}  // namespace seqto
