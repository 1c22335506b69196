#include "support/test_models.h"

#include <cmath>
#include <utility>

namespace seqto::testing {

ir::Attribute Int(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}

ir::Attribute Ints(std::vector<int64_t> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

ir::Attribute Float(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}

ir::Attribute String(std::string v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}

ir::ValueInfo FloatValue(std::string name, std::vector<ir::Dim> dims) {
  return {std::move(name), DType::kFloat32, std::move(dims)};
}

ir::Node MakeNode(std::string name, std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                  std::string domain) {
  ir::Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.domain = std::move(domain);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

ir::Model DetectorHeadModel(std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {8}, {6}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  auto conv = [&](const std::string& name, const std::string& in, Shape w_shape, int64_t stride) {
    g.initializers[name + ".w"] = RandomTensor(w_shape, rng, -0.5f, 0.5f);
    g.initializers[name + ".b"] = RandomTensor({w_shape[0]}, rng);
    ir::Node n = MakeNode(name, "Conv", {in, name + ".w", name + ".b"}, {name + ".out"});
    n.attributes["pads"] = Ints({1, 1, 1, 1});
    n.attributes["strides"] = Ints({stride, stride});
    g.nodes.push_back(n);
    g.nodes.push_back(MakeNode(name + ".relu", "Relu", {name + ".out"}, {name + ".act"}));
    return name + ".act";
  };
  const std::string a = conv("a", "x", {6, 3, 3, 3}, 1);
  const std::string b = conv("b", a, {6, 6, 3, 3}, 2);
  g.initializers["roi"] = Tensor(DType::kFloat32, {0});
  g.initializers["up2"] = Tensor::FromVector<float>({4}, {1, 1, 2, 2});
  ir::Node near = MakeNode("near", "Resize", {b, "roi", "up2"}, {"near.out"});
  near.attributes["mode"] = String("nearest");
  near.attributes["coordinate_transformation_mode"] = String("asymmetric");
  near.attributes["nearest_mode"] = String("floor");
  g.nodes.push_back(near);
  g.nodes.push_back(MakeNode("sum", "Add", {"near.out", a}, {"sum.out"}));
  ir::Node lin = MakeNode("lin", "Resize", {b, "roi", "up2"}, {"lin.out"});
  lin.attributes["mode"] = String("linear");
  g.nodes.push_back(lin);
  ir::Node cat = MakeNode("cat", "Concat", {"near.out", "sum.out", "lin.out"}, {"cat.out"});
  cat.attributes["axis"] = Int(1);
  g.nodes.push_back(cat);
  const std::string c = conv("c", "cat.out", {8, 18, 3, 3}, 1);
  auto up = [&](const std::string& name, const std::string& in, int64_t cin, int64_t cout, bool bias) {
    g.initializers[name + ".w"] = RandomTensor({cin, cout, 2, 2}, rng, -0.5f, 0.5f);
    std::vector<std::string> inputs{in, name + ".w"};
    if (bias) {
      g.initializers[name + ".b"] = RandomTensor({cout}, rng);
      inputs.push_back(name + ".b");
    }
    ir::Node n = MakeNode(name, "ConvTranspose", inputs, {name + ".out"});
    n.attributes["kernel_shape"] = Ints({2, 2});
    n.attributes["strides"] = Ints({2, 2});
    g.nodes.push_back(n);
    return name + ".out";
  };
  const std::string t1 = up("t1", c, 8, 8, false);
  g.initializers["t1.bias"] = RandomTensor({1, 8, 1, 1}, rng);
  g.nodes.push_back(MakeNode("t1.add", "Add", {t1, "t1.bias"}, {"t1.biased"}));
  for (const char* p : {"bn.scale", "bn.beta", "bn.mean"}) g.initializers[p] = RandomTensor({8}, rng);
  g.initializers["bn.var"] = RandomTensor({8}, rng, 0.5f, 2.f);
  g.nodes.push_back(
      MakeNode("bn", "BatchNormalization", {"t1.biased", "bn.scale", "bn.beta", "bn.mean", "bn.var"}, {"bn.out"}));
  g.nodes.push_back(MakeNode("bn.relu", "Relu", {"bn.out"}, {"bn.act"}));
  const std::string t2 = up("t2", "bn.act", 8, 1, true);
  g.nodes.push_back(MakeNode("sigmoid", "Sigmoid", {t2}, {"y"}));
  return m;
}

ir::Model OutlierTransformerModel(std::mt19937& rng) {
  constexpr int64_t kTokens = 28, kIn = 28, kDim = 64, kHidden = 128, kClasses = 10;
  ir::Model m;
  m.opsets[""] = 17;
  ir::Graph& g = m.graph;
  g.name = "outlier_transformer";
  g.inputs.push_back(FloatValue("x", {{-1, "N"}, {kTokens}, {kIn}}));
  g.outputs.push_back(FloatValue("logits", {{-1, "N"}, {kClasses}}));
  auto dense = [&](const std::string& name, const std::string& in, int64_t k, int64_t n) {
    const float bound = 1.0f / std::sqrt(float(k));
    g.initializers[name + ".w"] = RandomTensor({k, n}, rng, -bound, bound);
    g.initializers[name + ".b"] = RandomTensor({n}, rng, -0.1f, 0.1f);
    g.nodes.push_back(MakeNode(name, "MatMul", {in, name + ".w"}, {name + ".mm"}));
    g.nodes.push_back(MakeNode(name + ".bias", "Add", {name + ".mm", name + ".b"}, {name + ".out"}));
    return name + ".out";
  };
  const std::string h = dense("embed", "x", kIn, kDim);
  Tensor gamma = RandomTensor({kDim}, rng, 0.8f, 1.2f);
  const std::vector<std::pair<int64_t, float>> outliers = {{3, 30.f}, {17, 50.f}, {40, 80.f}, {55, 100.f}};
  for (const auto& [c, f] : outliers) gamma.data<float>()[c] *= f;
  g.initializers["ln.gamma"] = gamma;
  g.initializers["ln.beta"] = RandomTensor({kDim}, rng, -0.1f, 0.1f);
  ir::Node ln = MakeNode("ln", "LayerNormalization", {h, "ln.gamma", "ln.beta"}, {"ln.out"});
  ln.attributes["axis"] = Int(-1);
  g.nodes.push_back(ln);
  const std::string up = dense("up", "ln.out", kDim, kHidden);
  float* w_up = g.initializers.at("up.w").data<float>();
  for (const auto& [c, f] : outliers)
    for (int64_t n = 0; n < kHidden; ++n) w_up[c * kHidden + n] /= std::sqrt(f);
  g.nodes.push_back(MakeNode("up.relu", "Relu", {up}, {"up.act"}));
  const std::string down = dense("down", "up.act", kHidden, kDim);
  g.nodes.push_back(MakeNode("residual", "Add", {h, down}, {"res"}));
  ir::Node mean = MakeNode("pool", "ReduceMean", {"res"}, {"pooled"});
  mean.attributes["axes"] = Ints({1});
  mean.attributes["keepdims"] = Int(0);
  g.nodes.push_back(mean);
  dense("head", "pooled", kDim, kClasses);
  g.nodes.back().outputs[0] = "logits";
  return m;
}

}  // namespace seqto::testing
