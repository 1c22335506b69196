// The pattern passes against ONNX Runtime: a small conv + transformer model whose
// LayerNorm, GELU and HardSwish are written out as exporters write them (weights as
// Constant nodes, per-channel scale and shift after the conv) must, after seqto
// fuses them, give ONNX Runtime's outputs within max|seqto - ort| <= 1e-4 * max|ort|
// + 1e-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "onnxio/model_io.h"
#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::MakeNode;
using testing::RandomTensor;

class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}
  // A Constant node holding t (Paddle2ONNX's way), or an initializer.
  std::string Const(const std::string& name, Tensor t, bool node = false) {
    if (!node) {
      g_.initializers[name] = std::move(t);
      return name;
    }
    ir::Node c = MakeNode(name + "_const", "Constant", {}, {name});
    c.attributes["value"].type = ir::Attribute::Type::kTensor;
    c.attributes["value"].t = std::move(t);
    g_.nodes.push_back(c);
    return name;
  }
  std::string Scalar(float v) { return Const("s" + std::to_string(count_++), Tensor::FromVector<float>({1}, {v})); }
  std::string Op(const std::string& op, std::vector<std::string> in, std::map<std::string, ir::Attribute> attrs = {}) {
    const std::string out = op + "_" + std::to_string(count_++);
    ir::Node n = MakeNode(out, op, std::move(in), {out});
    n.attributes = std::move(attrs);
    g_.nodes.push_back(n);
    return out;
  }

 private:
  ir::Graph& g_;
  int count_ = 0;
};

ir::Model PatternModel() {
  std::mt19937 rng(21);
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.name = "patterns";
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {4}, {6}, {8}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  Builder b(g);
  using testing::Ints;
  // Conv -> * s -> + t(per channel) -> x * Clip(x + 3, 0, 6) / 6
  std::string c = b.Op(
      "Conv", {"x", b.Const("w", RandomTensor({8, 4, 3, 3}, rng), true), b.Const("b", RandomTensor({8}, rng), true)},
      {{"pads", Ints({1, 1, 1, 1})}});
  c = b.Op("Add", {b.Op("Mul", {b.Scalar(1.5f), c}), b.Const("t", RandomTensor({1, 8, 1, 1}, rng), true)});
  // Clip's bounds are rank-0 inputs at opset 13.
  const std::string clip = b.Op("Clip", {b.Op("Add", {c, b.Scalar(3.f)}), b.Const("zero", Tensor::Scalar<float>(0.f)),
                                         b.Const("six", Tensor::Scalar<float>(6.f))});
  std::string h = b.Op("Div", {b.Op("Mul", {c, clip}), b.Scalar(6.f)});
  // [N, 8, 6, 8] -> tokens [N, 48, 8]
  h = b.Op("Reshape", {h, b.Const("shape", Tensor::FromVector<int64_t>({3}, {0, 8, 48}))});
  const std::string t = b.Op("Transpose", {h}, {{"perm", Ints({0, 2, 1})}});
  // LayerNorm written out
  const std::string d = b.Op("Sub", {t, b.Op("ReduceMean", {t}, {{"axes", Ints({-1})}})});
  const std::string var = b.Op("ReduceMean", {b.Op("Pow", {d, b.Scalar(2.f)})}, {{"axes", Ints({-1})}});
  std::string n = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-5f)})})});
  n = b.Op("Add", {b.Op("Mul", {n, b.Const("gamma", RandomTensor({8}, rng, 0.5f, 1.5f))}),
                   b.Const("beta", RandomTensor({8}, rng))});
  // Linear -> GELU written out -> Linear, residual
  std::string u = b.Op(
      "Add", {b.Op("MatMul", {n, b.Const("w1", RandomTensor({8, 16}, rng))}), b.Const("b1", RandomTensor({16}, rng))});
  const std::string e = b.Op("Erf", {b.Op("Div", {u, b.Scalar(1.4142135f)})});
  u = b.Op("Mul", {b.Op("Mul", {u, b.Op("Add", {e, b.Scalar(1.f)})}), b.Scalar(0.5f)});
  u = b.Op("Add",
           {b.Op("MatMul", {u, b.Const("w2", RandomTensor({16, 8}, rng))}), b.Const("b2", RandomTensor({8}, rng))});
  const std::string r = b.Op("Add", {t, u});
  // Attention over the tokens
  const std::string s = b.Op("Softmax", {b.Op("MatMul", {r, b.Op("Transpose", {r}, {{"perm", Ints({0, 2, 1})}})})},
                             {{"axis", testing::Int(-1)}});
  b.Op("MatMul", {s, r});
  g.nodes.back().outputs[0] = "y";
  return m;
}

TEST(PatternFusions, FusedModelMatchesOrt) {
  const ir::Model model = PatternModel();
  ir::Graph optimized = model.graph;
  ASSERT_TRUE(rewrite::Optimize(optimized, {}).ok());
  std::set<std::string> ops;
  for (const auto& node : optimized.nodes) ops.insert(node.op_type);
  for (const char* op : {"LayerNormalization", "Gelu", "HardSwish"}) EXPECT_TRUE(ops.count(op)) << op;
  EXPECT_FALSE(ops.count("Erf") || ops.count("Sqrt") || ops.count("Clip") || ops.count("Constant"));

  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / ("seqto_patterns_" + std::to_string(::getpid()) + ".onnx"))
          .string();
  ASSERT_TRUE(onnxio::SaveModel(model, path).ok());
  std::mt19937 rng(3);
  const runtime::TensorMap inputs = {{"x", RandomTensor({2, 4, 6, 8}, rng, -2.f, 2.f)}};
  auto session = runtime::Session::Create(model);
  ASSERT_TRUE(session) << session.error().message;
  auto ours = (*session)->Run(inputs);
  ASSERT_TRUE(ours) << ours.error().message;
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  auto ref = testing::OrtRun(path, inputs);
  std::filesystem::remove(path);
  ASSERT_TRUE(ref) << ref.error().message;
  const std::vector<double> a = ours->at("y").ToDoubles(), want = ref->at("y").ToDoubles();
  ASSERT_EQ(ShapeToString(ours->at("y").shape()), ShapeToString(ref->at("y").shape()));
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(want[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - want[i]));
  }
  EXPECT_LE(max_diff, 1e-4 * max_ref + 1e-5) << "max |ort| = " << max_ref;
}

}  // namespace
}  // namespace seqto
