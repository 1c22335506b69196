// fuse-unary-lookups (rewrite/fuse_unary_lookups.cc) and the QLookup kernel: QDQ
// regions built here on an 8-bit input that holds all 256 codes (shuffled, plus a
// tail, 294 elements: no multiple of a vector width) run four ways, unfused
// (optimize = false) and fused, each with the reference kernels and with the
// default ones; the fused results must equal the unfused ones bit for bit, per
// kernel choice. Each test also checks what the fused session runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/quant/qlookup.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using runtime::Session;
using runtime::SessionOptions;
using runtime::TensorMap;
using testing::MakeNode;

const Shape kShape = {2, 3, 7, 7};

class RegionModel {
 public:
  explicit RegionModel(DType type, DType input_type = DType::kUndefined) : type_(type) {
    model_.opsets[""] = 13;
    model_.opsets["com.microsoft"] = 1;
    if (input_type == DType::kUndefined) input_type = type;
    ir::ValueInfo in{"q", input_type, std::vector<ir::Dim>{}};
    for (int64_t d : kShape) in.shape->push_back({d, ""});
    model_.graph.inputs.push_back(in);
  }

  std::string Op(const std::string& op, std::vector<std::string> in, std::map<std::string, ir::Attribute> attrs = {},
                 const std::string& domain = "") {
    const std::string out = op + "_" + std::to_string(model_.graph.nodes.size());
    ir::Node n = MakeNode(out, op, std::move(in), {out}, domain);
    n.attributes = std::move(attrs);
    model_.graph.nodes.push_back(n);
    return out;
  }
  std::string Const(Tensor t) {
    const std::string name = "c" + std::to_string(model_.graph.initializers.size());
    model_.graph.initializers[name] = std::move(t);
    return name;
  }
  std::string Scalar(float v, Shape shape = {}) {
    return Const(Tensor::FromVector<float>(shape, std::vector<float>(NumElements(shape), v)));
  }
  std::string ZeroPoint(int32_t zp, DType type) {
    Tensor t(type, {});
    if (type == DType::kUInt8)
      t.data<uint8_t>()[0] = static_cast<uint8_t>(zp);
    else
      t.data<int8_t>()[0] = static_cast<int8_t>(zp);
    return Const(t);
  }
  // Q and DQ with per-tensor parameters; the zero point sits mid-range.
  std::string Q(const std::string& x, float scale, DType type) {
    return Op("QuantizeLinear", {x, Scalar(scale), ZeroPoint(type == DType::kUInt8 ? 120 : -8, type)});
  }
  std::string Dq(const std::string& x, float scale, DType type) {
    return Op("DequantizeLinear", {x, Scalar(scale), ZeroPoint(type == DType::kUInt8 ? 120 : -8, type)});
  }
  // Q -> DQ, as a quantizer writes after every op.
  std::string Qdq(const std::string& x, float scale) { return Dq(Q(x, scale, type_), scale, type_); }
  // A constant quantized as quantizers quantize it: DQ of an 8-bit tensor.
  std::string QuantizedConst(float v, Shape shape = {1}) {
    const float scale = std::max(std::abs(v), 1e-3f) / 100.f;
    Tensor t(type_, shape);
    const int zp = type_ == DType::kUInt8 ? 120 : -8;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int code = static_cast<int>(std::nearbyint(v / scale)) + zp;
      if (type_ == DType::kUInt8)
        t.data<uint8_t>()[i] = static_cast<uint8_t>(code);
      else
        t.data<int8_t>()[i] = static_cast<int8_t>(code);
    }
    return Op("DequantizeLinear", {Const(t), Scalar(scale), ZeroPoint(zp, type_)});
  }
  void ForgetInputShape() { model_.graph.inputs[0].shape.reset(); }
  void Declare(const std::string& v) {
    ir::ValueInfo vi{v, type_, std::vector<ir::Dim>{}};
    for (int64_t d : kShape) vi.shape->push_back({d, ""});
    model_.graph.value_infos.push_back(vi);
  }
  void Output(const std::string& v) { model_.graph.outputs.push_back({v, DType::kUndefined, std::nullopt}); }

  const ir::Model& model() const { return model_; }
  DType type() const { return type_; }

 private:
  ir::Model model_;
  DType type_;
};

// Every code of `type` once, shuffled, then random codes up to kShape's size.
Tensor AllCodes(DType type) {
  std::mt19937 rng(7);
  std::vector<int> codes(256);
  std::iota(codes.begin(), codes.end(), 0);
  std::shuffle(codes.begin(), codes.end(), rng);
  while (static_cast<int64_t>(codes.size()) < NumElements(kShape)) codes.push_back(static_cast<int>(rng() % 256));
  Tensor t(type, kShape);
  for (size_t i = 0; i < codes.size(); ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(codes[i]);
  return t;
}

TensorMap RunModel(const ir::Model& m, bool optimize, bool reference, const TensorMap& inputs,
                   std::map<std::string, int>* ops = nullptr) {
  SessionOptions o;
  o.optimize = optimize;
  o.reference_only = reference;
  o.threads = 1;
  auto s = Session::Create(m, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  if (ops) {
    (*s)->EnableProfiling(true);
    for (const auto& step : (*s)->Profile()) ++(*ops)[step.op_type];
  }
  auto out = (*s)->Run(inputs);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : TensorMap{};
}

// Runs the model four ways on every code; returns the op types the fused default
// session runs.
std::map<std::string, int> ExpectFusedEqualsUnfused(const RegionModel& b, DType input_type = DType::kUndefined) {
  const TensorMap inputs = {{"q", AllCodes(input_type == DType::kUndefined ? b.type() : input_type)}};
  std::map<std::string, int> ops;
  for (bool reference : {true, false}) {
    const TensorMap want = RunModel(b.model(), false, reference, inputs);
    const TensorMap got = RunModel(b.model(), true, reference, inputs, reference ? nullptr : &ops);
    for (const auto& [name, w] : want) {
      EXPECT_TRUE(got.count(name)) << name;
      if (!got.count(name)) continue;
      const Tensor& g = got.at(name);
      EXPECT_EQ(g.dtype(), w.dtype()) << name;
      EXPECT_EQ(g.shape(), w.shape()) << name;
      if (g.dtype() != w.dtype() || g.shape() != w.shape()) continue;
      const std::vector<double> wv = w.ToDoubles(), gv = g.ToDoubles();
      int differ = 0;
      for (size_t i = 0; i < wv.size(); ++i) differ += wv[i] != gv[i];
      EXPECT_EQ(differ, 0) << name << (reference ? " (reference kernels)" : " (default kernels)");
    }
  }
  return ops;
}

class FuseUnaryLookups : public ::testing::TestWithParam<DType> {};

// x * Clip(x + 3, 0, 6) / 6 with a Q/DQ after every op (PP-LCNet's HardSwish in a
// QDQ model): one lookup, nothing else.
TEST_P(FuseUnaryLookups, WrittenOutHardSwishIsOneLookup) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string x = b.Dq("q", 0.05f, t);
  const std::string a = b.Qdq(b.Op("Add", {x, b.QuantizedConst(3.f)}), 0.06f);
  const std::string c = b.Qdq(b.Op("Clip", {a, b.Scalar(0.f), b.Scalar(6.f)}), 6.f / 255);
  const std::string m = b.Qdq(b.Op("Mul", {x, c}), 0.07f);
  b.Output(b.Q(b.Op("Div", {m, b.Scalar(6.f, {1})}), 0.02f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 1);
  EXPECT_EQ(ops.size(), 1u);
}

// A learnable affine block, Mul(c, x) -> Add(x, c') with rank-1 and rank-4 scalar
// constants, to the other 8-bit type.
TEST_P(FuseUnaryLookups, AffineBlockWithScalarConstantsIsOneLookup) {
  const DType t = GetParam(), other = t == DType::kUInt8 ? DType::kInt8 : DType::kUInt8;
  RegionModel b(t);
  const std::string x = b.Dq("q", 0.03f, t);
  const std::string y = b.Qdq(b.Op("Mul", {b.QuantizedConst(1.3f), x}), 0.04f);
  b.Output(b.Q(b.Op("Add", {y, b.Scalar(-0.2f, {1, 1, 1, 1})}), 0.05f, other));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 1);
  EXPECT_EQ(ops.size(), 1u);
}

// x * Sigmoid(x) and Tanh(x) from one root: two branches, two lookups from q (the
// default kernels' approximations are what the tables hold there).
TEST_P(FuseUnaryLookups, TwoBranchesFromOneRoot) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string x = b.Dq("q", 0.04f, t);
  b.Output(b.Q(b.Op("Mul", {x, b.Op("Sigmoid", {x})}), 0.03f, t));
  b.Output(b.Q(b.Op("Tanh", {b.Dq("q", 0.04f, t)}), 1.f / 127, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 2);
  EXPECT_EQ(ops.size(), 1u);
}

// Relu -> Q(a) -> DQ -> Exp -> HardSigmoid -> Q(b), with a also an output: both
// lookups read q (the chain composes; no lookup reads another).
TEST_P(FuseUnaryLookups, InternalQdqComposesIntoTablesFromTheRoot) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string a = b.Q(b.Op("Relu", {b.Dq("q", 0.02f, t)}), 0.015f, t);
  b.Output(a);
  const std::string e = b.Op("Exp", {b.Dq(a, 0.015f, t)});
  b.Output(b.Q(b.Op("HardSigmoid", {e}, {{"alpha", testing::Float(0.3f)}}), 1.f / 255, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 2);
  EXPECT_EQ(ops.size(), 1u);
}

// The root comes out of a QuantizeLinear of the float input; an all-equal constant
// of shape [1, 3, 1, 7] (broadcast keeps the shape) counts as a scalar; Pow by 2.
TEST_P(FuseUnaryLookups, RootFromQuantizeLinearAndAllEqualConstant) {
  const DType t = GetParam();
  RegionModel b(t, DType::kFloat32);
  const std::string root = b.Q("q", 1.f / 64, t);
  b.Declare(root);  // as shape inference would: the constant's broadcast is checked against it
  const std::string x = b.Dq(root, 1.f / 64, t);
  const std::string y = b.Op("Pow", {b.Op("Sub", {x, b.Scalar(0.5f, {1, 3, 1, 7})}), b.Scalar(2.f)});
  b.Output(b.Q(y, 0.02f, t));
  std::mt19937 rng(3);
  const TensorMap inputs = {{"q", testing::RandomTensor(kShape, rng, -2.f, 2.f)}};
  for (bool reference : {true, false}) {
    std::map<std::string, int> ops;
    const TensorMap want = RunModel(b.model(), false, reference, inputs);
    const TensorMap got = RunModel(b.model(), true, reference, inputs, &ops);
    EXPECT_EQ(want.begin()->second.ToDoubles(), got.begin()->second.ToDoubles());
    EXPECT_EQ(ops["QLookup"], 1);
    EXPECT_EQ(ops.count("Pow") + ops.count("Sub"), 0u);
  }
}

// ONNX Runtime's QOperator form with a constant scalar operand joins a region.
TEST_P(FuseUnaryLookups, QOperatorQLinearAddWithConstantOperand) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string zp = b.ZeroPoint(t == DType::kUInt8 ? 120 : -8, t);
  Tensor c(t, {});
  static_cast<uint8_t*>(c.raw())[0] = 77;
  const std::string y =
      b.Op("QLinearAdd", {"q", b.Scalar(0.05f), zp, b.Const(c), b.Scalar(0.02f), zp, b.Scalar(0.06f), zp}, {},
           "com.microsoft");
  b.Output(b.Q(b.Op("Relu", {b.Dq(y, 0.06f, t)}), 0.03f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 1);
  EXPECT_EQ(ops.size(), 1u);
}

// What must not fold: a per-channel constant, a float value read outside the region,
// a constant whose broadcast raises the rank, a per-channel Q.
TEST_P(FuseUnaryLookups, PerChannelConstantDoesNotFold) {
  const DType t = GetParam();
  RegionModel b(t);
  b.Output(b.Q(b.Op("Add", {b.Dq("q", 0.05f, t), b.Const(Tensor::FromVector<float>({1, 3, 1, 1}, {0.1f, 0.2f, 0.3f}))}),
               0.06f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 0);
}

TEST_P(FuseUnaryLookups, FloatValueReadOutsideStays) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string x = b.Dq("q", 0.05f, t);
  const std::string s = b.Op("Add", {x, b.Scalar(3.f)});
  b.Output(s);  // a float result: the Add must stay
  b.Output(b.Q(b.Op("Relu", {s}), 0.05f, t));
  // The DequantizeLinear is also read by a float op outside: it stays, and the
  // region's other branch still folds.
  b.Output(b.Op("Sqrt", {b.Op("Abs", {x})}));
  b.Output(b.Q(b.Op("Neg", {x}), 0.05f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 1);  // Neg -> Q only
  EXPECT_EQ(ops["Add"], 1);
  EXPECT_EQ(ops["Relu"], 1);
  EXPECT_EQ(ops["DequantizeLinear"], 1);
}

TEST_P(FuseUnaryLookups, RankRaisingConstantDoesNotFold) {
  const DType t = GetParam();
  RegionModel b(t);
  b.Output(b.Q(b.Op("Mul", {b.Dq("q", 0.05f, t), b.Scalar(2.f, {1, 1, 1, 1, 1})}), 0.06f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 0);
}

// Without a known rank for the root, a constant of rank 1 could raise the rank of a
// rank-0 root: it does not fold (a rank-0 constant does).
TEST_P(FuseUnaryLookups, RankOneConstantNeedsTheRootsRank) {
  const DType t = GetParam();
  RegionModel b(t);
  b.ForgetInputShape();
  b.Output(b.Q(b.Op("Mul", {b.Dq("q", 0.04f, t), b.Scalar(2.f, {1})}), 0.06f, t));
  b.Output(b.Q(b.Op("Mul", {b.Dq("q", 0.04f, t), b.Scalar(3.f)}), 0.06f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["QLookup"], 1);  // * 3
  EXPECT_EQ(ops["Mul"], 1);      // * [2] stays a float Mul
}

// A per-channel QuantizeLinear ends the region before it; its output roots another.
TEST_P(FuseUnaryLookups, PerChannelQuantizeLinearEndsTheRegion) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string x = b.Op("Relu", {b.Dq("q", 0.05f, t)});
  Tensor zp(t, {3});
  const std::string q =
      b.Op("QuantizeLinear", {x, b.Const(Tensor::FromVector<float>({3}, {0.05f, 0.06f, 0.07f})), b.Const(zp)},
           {{"axis", testing::Int(1)}});
  b.Output(b.Q(b.Op("Neg", {b.Op("DequantizeLinear", {q, b.Scalar(0.05f), b.ZeroPoint(0, t)})}), 0.05f, t));
  auto ops = ExpectFusedEqualsUnfused(b);
  EXPECT_EQ(ops["Relu"], 1);
  EXPECT_EQ(ops["QLookup"], 1);  // DQ -> Neg -> Q after the per-channel Q
}

// A value hooks must see ends the region: its readers compute from it.
TEST_P(FuseUnaryLookups, KeptValueEndsTheRegion) {
  const DType t = GetParam();
  RegionModel b(t);
  const std::string a = b.Q(b.Op("Relu", {b.Dq("q", 0.02f, t)}), 0.015f, t);
  b.Output(b.Q(b.Op("Neg", {b.Dq(a, 0.015f, t)}), 0.015f, t));
  const TensorMap inputs = {{"q", AllCodes(t)}};
  SessionOptions o;
  o.keep_values = {a};
  o.threads = 1;
  auto s = Session::Create(b.model(), o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  runtime::RunHooks hooks;
  hooks.override_value = [&](const std::string& name, const Tensor& v) -> std::optional<Tensor> {
    if (name != a) return std::nullopt;
    Tensor z = v.Clone();
    std::fill_n(static_cast<uint8_t*>(z.raw()), z.numel(), static_cast<uint8_t>(t == DType::kUInt8 ? 120 : 0xf8));
    return z;  // every element at the zero point: Neg gives the zero point again
  };
  auto out = (*s)->Run(inputs, &hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (double v : out->begin()->second.ToDoubles()) ASSERT_EQ(v, t == DType::kUInt8 ? 120 : -8);
}

INSTANTIATE_TEST_SUITE_P(Types, FuseUnaryLookups, ::testing::Values(DType::kUInt8, DType::kInt8),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Every vector form of the lookup equals the byte loop, on lengths around the
// vector widths.
TEST(QLookupKernel, VectorFormsEqualTheByteLoop) {
  std::mt19937 rng(5);
  std::vector<uint8_t> table(256), x(1000);
  for (auto& v : table) v = static_cast<uint8_t>(rng());
  for (auto& v : x) v = static_cast<uint8_t>(rng());
  std::vector<ops::LookupIsa> isas = {ops::LookupIsa::kScalar};
  if (ops::BestLookupIsa() == ops::LookupIsa::kAvx512Vbmi) isas.push_back(ops::LookupIsa::kAvx512Vbmi);
  for (int64_t n : {0, 1, 31, 32, 33, 63, 64, 65, 127, 200, 1000})
    for (auto isa : isas) {
      std::vector<uint8_t> y(n + 1, 0xab);
      ops::LookupBytes(x.data(), y.data(), n, table.data(), isa);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], table[x[i]]) << "n " << n << " isa " << static_cast<int>(isa);
      EXPECT_EQ(y[n], 0xab) << "wrote past the end, n " << n;
    }
}

}  // namespace
}  // namespace seqto
