// The QDQ rewriter and quantization groups (quant/quantize.h) on small hand-built
// models with hand-set ranges, so every scale is computed by hand here; and the group
// guarantees on the bundled Fashion-MNIST models.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/npy.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/node_filter.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto::quant {
namespace {

using testing::FloatValue;
using testing::Int;
using testing::Ints;
using testing::MakeNode;
using testing::RandomTensor;

TensorRange Range(double lo, double hi) {
  TensorRange r;
  r.min = lo;
  r.max = hi;
  return r;
}

// x[N,2,4,4] -> conv (3x3, pad 1, bias) -> c -> relu -> r -> reshape [-1, 48] -> f
//   -> mm (MatMul [48, 5]) -> y
// The conv weight's largest magnitude is 1.27, so its symmetric int8 scale is 0.01.
ir::Model ConvReluMatMul(int64_t opset = 13) {
  std::mt19937 rng(11);
  ir::Model m;
  m.opsets[""] = opset;
  auto& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{-1, "N"}, {2}, {4}, {4}}));
  g.outputs.push_back(FloatValue("y", {{-1, "N"}, {5}}));
  Tensor w = RandomTensor({3, 2, 3, 3}, rng);
  w.data<float>()[5] = -1.27f;
  g.initializers["w"] = w;
  g.initializers["b"] = Tensor::FromVector<float>({3}, {0.5f, -0.25f, 0.125f});
  g.initializers["shape"] = Tensor::FromVector<int64_t>({2}, {-1, 48});
  g.initializers["m"] = RandomTensor({48, 5}, rng);
  ir::Node conv = MakeNode("conv", "Conv", {"x", "w", "b"}, {"c"});
  conv.attributes["pads"] = Ints({1, 1, 1, 1});
  g.nodes.push_back(conv);
  g.nodes.push_back(MakeNode("relu", "Relu", {"c"}, {"r"}));
  g.nodes.push_back(MakeNode("flat", "Reshape", {"r", "shape"}, {"f"}));
  g.nodes.push_back(MakeNode("mm", "MatMul", {"f", "m"}, {"y"}));
  for (const char* v : {"c", "r", "f"}) g.value_infos.push_back({v, DType::kFloat32, std::nullopt});
  return m;
}

TensorRanges ConvReluMatMulRanges() {
  return {{"x", Range(-1, 1)}, {"c", Range(-2, 6)}, {"r", Range(0, 6)}, {"f", Range(0, 6)}, {"y", Range(-4, 4)}};
}

// x -> conv1 -> c1 -.
//                    add -> s -> conv3 -> y
// x -> conv2 -> c2 -'
// Every tensor of `add` is also needed by a conv: excluding it alone would change
// nothing, so it must join a conv's group.
ir::Model TwoBranches() {
  std::mt19937 rng(5);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back(FloatValue("x", {{1}, {2}, {3}, {3}}));
  g.outputs.push_back(FloatValue("y", {{1}, {2}, {3}, {3}}));
  for (const char* w : {"w1", "w2", "w3"}) g.initializers[w] = RandomTensor({2, 2, 1, 1}, rng);
  g.nodes.push_back(MakeNode("conv1", "Conv", {"x", "w1"}, {"c1"}));
  g.nodes.push_back(MakeNode("conv2", "Conv", {"x", "w2"}, {"c2"}));
  g.nodes.push_back(MakeNode("add", "Add", {"c1", "c2"}, {"s"}));
  g.nodes.push_back(MakeNode("conv3", "Conv", {"s", "w3"}, {"y"}));
  for (const char* v : {"c1", "c2", "s"}) g.value_infos.push_back({v, DType::kFloat32, std::nullopt});
  return m;
}

TensorRanges TwoBranchesRanges() {
  return {{"x", Range(-1, 1)}, {"c1", Range(-2, 2)}, {"c2", Range(-3, 3)}, {"s", Range(-4, 4)}, {"y", Range(-5, 5)}};
}

const ir::Node* FindNode(const ir::Model& m, const std::string& name) {
  for (const auto& n : m.graph.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

const ir::Node* Producer(const ir::Model& m, const std::string& value) {
  for (const auto& n : m.graph.nodes)
    for (const auto& o : n.outputs)
      if (o == value) return &n;
  return nullptr;
}

std::vector<const ir::Node*> NodesOf(const ir::Model& m, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const auto& n : m.graph.nodes)
    if (n.op_type == op) out.push_back(&n);
  return out;
}

const Tensor& Init(const ir::Model& m, const std::string& name) {
  static const Tensor kNone;
  auto it = m.graph.initializers.find(name);
  EXPECT_NE(it, m.graph.initializers.end()) << "no initializer '" << name << "'";
  return it == m.graph.initializers.end() ? kNone : it->second;
}

float ScalarF(const ir::Model& m, const std::string& name) {
  return static_cast<float>(Init(m, name).ToDoubles().at(0));
}
int64_t ScalarI(const ir::Model& m, const std::string& name) { return Init(m, name).ToInt64s().at(0); }

size_t CountQdq(const ir::Model& m) {
  return NodesOf(m, "QuantizeLinear").size() + NodesOf(m, "DequantizeLinear").size();
}

Expected<QuantPlan> MakePlan(const ir::Model& model, const QuantOptions& o, const TensorRanges& ranges) {
  SEQTO_ASSIGN_OR_RETURN(ir::Model prepared, QuantPlan::Prepare(model));
  return QuantPlan::Create(prepared, o, &ranges);
}

runtime::TensorMap RunModel(const ir::Model& m, const runtime::TensorMap& feeds) {
  auto s = runtime::Session::Create(m);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  auto out = (*s)->Run(feeds);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : runtime::TensorMap{};
}

// The min/max every value of `m` takes on `feeds` (a calibration by hand).
TensorRanges ObservedRanges(const ir::Model& m, const runtime::TensorMap& feeds) {
  TensorRanges ranges;
  runtime::SessionOptions so;
  so.optimize = false;
  auto s = runtime::Session::Create(m, so);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return ranges;
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& v) {
    if (v.dtype() != DType::kFloat32) return;
    const auto d = v.ToDoubles();
    ranges[name] = Range(*std::min_element(d.begin(), d.end()), *std::max_element(d.begin(), d.end()));
  };
  EXPECT_TRUE((*s)->Run(feeds, &hooks).ok());
  return ranges;
}

// max |a - b| <= 5% of max |a| + 0.05 for every output.
void ExpectClose(const runtime::TensorMap& ref, const runtime::TensorMap& got) {
  ASSERT_EQ(ref.size(), got.size());
  for (const auto& [name, t] : ref) {
    ASSERT_TRUE(got.count(name)) << name;
    const auto a = t.ToDoubles(), c = got.at(name).ToDoubles();
    ASSERT_EQ(a.size(), c.size());
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(a[i]));
      max_diff = std::max(max_diff, std::fabs(a[i] - c[i]));
    }
    EXPECT_LT(max_diff, 0.05 * max_ref + 0.05) << name;
  }
}

std::string Bytes(const ir::Model& m) {
  auto s = onnxio::SerializeModel(m);
  EXPECT_TRUE(s.ok());
  return s.ok() ? *s : std::string();
}

void ExpectChecks(const ir::Model& m) {
  Status s = onnxio::CheckModel(m);
  EXPECT_TRUE(s.ok()) << s.message();
}

// ---------------------------------------------------------------------------------

TEST(QuantGlob, MatchesLikeShellPatterns) {
  EXPECT_TRUE(GlobMatch("conv*", "conv12"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("/layer?/conv*/Conv", "/layer3/conv2/Conv"));
  EXPECT_FALSE(GlobMatch("/layer?/conv*/Conv", "/layer12/conv2/Conv"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYY"));
  EXPECT_TRUE(GlobMatch("layer[1-3]", "layer2"));
  EXPECT_FALSE(GlobMatch("layer[!1-3]", "layer2"));
  EXPECT_TRUE(GlobMatch("a\\*", "a*"));
  EXPECT_FALSE(GlobMatch("a\\*", "ab"));
  EXPECT_TRUE(GlobMatch("[x", "[x"));  // an unclosed set is a plain '['
  EXPECT_FALSE(IsGlob("/features/features.0/Conv"));
  EXPECT_TRUE(IsGlob("conv*"));
}

TEST(QuantNodeFilter, EveryPatternMustMatchAndOpTypesMustBeSupported) {
  const ir::Model m = ConvReluMatMul();
  const std::set<std::string> supported = {"Conv", "MatMul", "Relu"};
  NodeFilterSpec spec;
  spec.exclude = {"nope"};
  auto f = NodeFilter::ForGraph(m.graph, spec, supported);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("nodes_to_exclude"), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("'nope'"), std::string::npos) << f.error().message;

  spec.exclude = {"zz*"};
  f = NodeFilter::ForGraph(m.graph, spec, supported);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("'zz*'"), std::string::npos) << f.error().message;

  spec = {};
  spec.include = {"c*", "mm"};
  spec.include_label = "--nodes";
  f = NodeFilter::ForGraph(m.graph, spec, supported);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(f->Selects(*FindNode(m, "conv")));
  EXPECT_TRUE(f->Selects(*FindNode(m, "mm")));
  EXPECT_FALSE(f->Selects(*FindNode(m, "relu")));  // not included
  EXPECT_FALSE(f->Selects(*FindNode(m, "flat")));  // Reshape is not in `supported`

  spec = {};
  spec.op_types = {"LSTM"};
  f = NodeFilter::ForGraph(m.graph, spec, supported);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("'LSTM'"), std::string::npos) << f.error().message;
}

TEST(QuantStatic, InsertsQdqAsOnnxRuntimeDoes) {
  auto plan = MakePlan(ConvReluMatMul(), QuantOptions{}, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);

  // The input: uint8, range [-1, 1]: scale 2/255, zero point round(127.5) = 128.
  const ir::Node* xq = FindNode(*q, "x_QuantizeLinear");
  ASSERT_NE(xq, nullptr);
  EXPECT_EQ(xq->inputs, (std::vector<std::string>{"x", "x_scale", "x_zero_point"}));
  EXPECT_FLOAT_EQ(ScalarF(*q, "x_scale"), static_cast<float>(2.0 / 255));
  EXPECT_EQ(ScalarI(*q, "x_zero_point"), 128);
  EXPECT_EQ(Init(*q, "x_zero_point").dtype(), DType::kUInt8);
  const ir::Node* conv = FindNode(*q, "conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->inputs[0], "x_DequantizeLinear_Output");

  // The weight: int8 symmetric per tensor, max |w| = 1.27 -> scale 0.01.
  EXPECT_EQ(conv->inputs[1], "w_DequantizeLinear_Output");
  const ir::Node* wdq = Producer(*q, "w_DequantizeLinear_Output");
  ASSERT_NE(wdq, nullptr);
  EXPECT_EQ(wdq->inputs[0], "w_quantized");
  EXPECT_EQ(Init(*q, "w_quantized").dtype(), DType::kInt8);
  const float sw = ScalarF(*q, "w_scale");
  EXPECT_FLOAT_EQ(sw, 0.01f);
  EXPECT_EQ(ScalarI(*q, "w_zero_point"), 0);
  EXPECT_FALSE(q->graph.initializers.count("w"));  // the float weight is gone

  // The bias: int32, scale s_x * s_w (a float32 product), zero point 0; the DQ writes
  // the bias's own name.
  const ir::Node* bdq = Producer(*q, "b");
  ASSERT_NE(bdq, nullptr);
  EXPECT_EQ(bdq->op_type, "DequantizeLinear");
  const Tensor& bq = Init(*q, "b_quantized");
  EXPECT_EQ(bq.dtype(), DType::kInt32);
  const float sb = static_cast<float>(2.0 / 255) * 0.01f;
  EXPECT_FLOAT_EQ(ScalarF(*q, "b_quantized_scale"), sb);
  EXPECT_EQ(ScalarI(*q, "b_quantized_zero_point"), 0);
  const std::vector<float> b = {0.5f, -0.25f, 0.125f};
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(bq.data<int32_t>()[k], static_cast<int32_t>(std::nearbyint(static_cast<double>(b[k]) / sb)));

  // Relu is ORT's removable activation: no Q/DQ between conv and relu; its output is
  // quantized with its own range [0, 6] (scale 6/255, zero point 0).
  EXPECT_EQ(FindNode(*q, "relu")->inputs[0], "c");
  EXPECT_EQ(FindNode(*q, "c_QuantizeLinear"), nullptr);
  EXPECT_FLOAT_EQ(ScalarF(*q, "r_scale"), static_cast<float>(6.0 / 255));
  EXPECT_EQ(ScalarI(*q, "r_zero_point"), 0);

  // Reshape passes quantization through: its output reuses r's initializers.
  const ir::Node* fq = FindNode(*q, "f_QuantizeLinear");
  ASSERT_NE(fq, nullptr);
  EXPECT_EQ(fq->inputs[1], "r_scale");
  EXPECT_EQ(fq->inputs[2], "r_zero_point");
  EXPECT_FALSE(q->graph.initializers.count("f_scale"));
  EXPECT_EQ(FindNode(*q, "flat")->inputs[0], "r_DequantizeLinear_Output");

  // A graph output keeps its name and float type: the producer writes
  // y_QuantizeLinear_Input and the DQ writes y.
  EXPECT_EQ(FindNode(*q, "mm")->outputs[0], "y_QuantizeLinear_Input");
  EXPECT_EQ(Producer(*q, "y")->op_type, "DequantizeLinear");
  ASSERT_EQ(q->graph.outputs.size(), 1u);
  EXPECT_EQ(q->graph.outputs[0].name, "y");
  EXPECT_EQ(q->graph.outputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(FindNode(*q, "mm")->inputs[1], "m_DequantizeLinear_Output");

  // x, r, f, y: a Q and a DQ each; w, b, m: a DQ each.
  EXPECT_EQ(NodesOf(*q, "QuantizeLinear").size(), 4u);
  EXPECT_EQ(NodesOf(*q, "DequantizeLinear").size(), 7u);
  for (const auto& n : q->graph.nodes) EXPECT_TRUE(n.domain.empty()) << n.name;

  // Calibrated on the data it runs on, the QDQ model stays close to the float one
  // (8-bit everywhere: a few percent).
  std::mt19937 rng(3);
  runtime::TensorMap feeds = {{"x", RandomTensor({2, 2, 4, 4}, rng)}};
  auto calibrated = MakePlan(ConvReluMatMul(), QuantOptions{}, ObservedRanges(ConvReluMatMul(), feeds));
  ASSERT_TRUE(calibrated.ok()) << calibrated.error().message;
  auto qc = calibrated->Materialize();
  ASSERT_TRUE(qc.ok()) << qc.error().message;
  ExpectClose(RunModel(calibrated->prepared_model(), feeds), RunModel(*qc, feeds));
}

TEST(QuantStatic, OneSharedQdqPairPerTensor) {
  auto plan = MakePlan(TwoBranches(), QuantOptions{}, TwoBranchesRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);
  int x_q = 0;
  for (const auto* n : NodesOf(*q, "QuantizeLinear")) x_q += n->inputs[0] == "x";
  EXPECT_EQ(x_q, 1);
  EXPECT_EQ(FindNode(*q, "conv1")->inputs[0], "x_DequantizeLinear_Output");
  EXPECT_EQ(FindNode(*q, "conv2")->inputs[0], "x_DequantizeLinear_Output");
  EXPECT_EQ(FindNode(*q, "add")->inputs,
            (std::vector<std::string>{"c1_DequantizeLinear_Output", "c2_DequantizeLinear_Output"}));
  EXPECT_EQ(FindNode(*q, "conv3")->inputs[0], "s_DequantizeLinear_Output");
  // x, c1, c2, s, y: Q and DQ; w1..w3: DQ.
  EXPECT_EQ(CountQdq(*q), 13u);
}

TEST(QuantStatic, PerChannelAxisOfEachOp) {
  struct Case {
    std::string op;
    Shape weight;
    int64_t trans_b;
    int64_t axis;
    Shape x;
  };
  const std::vector<Case> cases = {
      {"Conv", {4, 2, 1, 1}, 0, 0, {1, 2, 3, 3}},
      {"ConvTranspose", {2, 3, 1, 1}, 0, 1, {1, 2, 3, 3}},
      {"MatMul", {6, 5}, 0, 1, {2, 6}},
      {"Gemm", {6, 5}, 0, 1, {2, 6}},
      {"Gemm", {5, 6}, 1, 0, {2, 6}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op + " transB=" + std::to_string(c.trans_b));
    std::mt19937 rng(1);
    ir::Model m;
    m.opsets[""] = 13;
    std::vector<ir::Dim> dims;
    for (int64_t d : c.x) dims.push_back({d});
    m.graph.inputs.push_back(FloatValue("x", dims));
    m.graph.outputs.push_back(FloatValue("y", {{-1, "a"}, {-1, "b"}, {-1, "c"}, {-1, "d"}}));
    if (c.x.size() == 2) m.graph.outputs[0].shape->resize(2);
    m.graph.initializers["w"] = RandomTensor(c.weight, rng);
    const int64_t channels = c.weight[static_cast<size_t>(c.axis)];
    std::vector<std::string> inputs = {"x", "w"};
    if (c.op != "MatMul") {
      m.graph.initializers["b"] = RandomTensor({channels}, rng);
      inputs.push_back("b");
    }
    ir::Node n = MakeNode("node", c.op, inputs, {"y"});
    if (c.op == "Gemm") n.attributes["transB"] = Int(c.trans_b);
    m.graph.nodes.push_back(n);
    QuantOptions o;
    o.per_channel = true;
    o.weight_type = QuantType::kUInt8;  // ORT makes per-channel weights int8 anyway
    auto plan = MakePlan(m, o, {{"x", Range(-1, 1)}, {"y", Range(-3, 3)}});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    auto q = plan->Materialize();
    ASSERT_TRUE(q.ok()) << q.error().message;
    ExpectChecks(*q);
    const ir::Node* dq = Producer(*q, "w_DequantizeLinear_Output");
    ASSERT_NE(dq, nullptr);
    ASSERT_TRUE(dq->has_attr("axis"));
    EXPECT_EQ(dq->attributes.at("axis").i, c.axis);
    EXPECT_EQ(Init(*q, "w_scale").shape(), Shape{channels});
    EXPECT_EQ(Init(*q, "w_zero_point").dtype(), DType::kInt8);
    // Each channel's scale is its own max |w| / 127 (symmetric int8).
    const Tensor& w = m.graph.initializers.at("w");
    std::vector<double> amax(static_cast<size_t>(channels), 0);
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(c.axis) + 1; d < c.weight.size(); ++d) inner *= c.weight[d];
    for (int64_t i = 0; i < w.numel(); ++i) {
      const size_t ch = static_cast<size_t>((i / inner) % channels);
      amax[ch] = std::max(amax[ch], std::fabs(static_cast<double>(w.data<float>()[i])));
    }
    const auto scales = Init(*q, "w_scale").ToDoubles();
    for (int64_t ch = 0; ch < channels; ++ch)
      EXPECT_FLOAT_EQ(static_cast<float>(scales[ch]), static_cast<float>(2 * amax[ch] / 254)) << "channel " << ch;
    if (c.op != "MatMul") {
      // Per-channel bias: scale s_x * s_w[c], axis 0.
      const ir::Node* bdq = Producer(*q, "b");
      ASSERT_NE(bdq, nullptr);
      EXPECT_EQ(bdq->attributes.at("axis").i, 0);
      const auto bs = Init(*q, "b_quantized_scale").ToDoubles();
      ASSERT_EQ(bs.size(), static_cast<size_t>(channels));
      for (int64_t ch = 0; ch < channels; ++ch)
        EXPECT_FLOAT_EQ(static_cast<float>(bs[ch]), static_cast<float>(2.0 / 255) * static_cast<float>(scales[ch]));
    }
    // The model runs.
    runtime::TensorMap feeds = {{"x", RandomTensor(c.x, rng)}};
    EXPECT_TRUE(RunModel(*q, feeds).count("y"));
  }
}

TEST(QuantStatic, ReduceRangeAppliesToPerChannelWeightsOnly) {
  // ORT: per-tensor QDQ weights ignore reduce_range; per-channel ones use [-64, 64].
  for (bool per_channel : {false, true}) {
    QuantOptions o;
    o.reduce_range = true;
    o.per_channel = per_channel;
    auto plan = MakePlan(ConvReluMatMul(), o, ConvReluMatMulRanges());
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    auto q = plan->Materialize();
    ASSERT_TRUE(q.ok()) << q.error().message;
    const auto s = Init(*q, "w_scale").ToDoubles();
    if (!per_channel) {
      EXPECT_FLOAT_EQ(static_cast<float>(s[0]), 0.01f);
    } else {
      // Channel 0 holds the 1.27.
      EXPECT_FLOAT_EQ(static_cast<float>(s[0]), static_cast<float>(2 * 1.27f / 128.0));
    }
    // Activations never use reduce_range.
    EXPECT_FLOAT_EQ(ScalarF(*q, "x_scale"), static_cast<float>(2.0 / 255));
  }
}

TEST(QuantStatic, OptionsChangeTypesAndSymmetry) {
  QuantOptions o;
  o.activation_type = QuantType::kInt8;
  o.activation_symmetric = true;
  o.quantize_bias = false;
  o.tensor_overrides["r"].scale = 0.5f;
  o.tensor_overrides["r"].zero_point = 3;
  auto plan = MakePlan(ConvReluMatMul(), o, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);
  // Symmetric int8 activations: [-1, 1] -> scale 2/254, zero point 0.
  EXPECT_EQ(Init(*q, "x_zero_point").dtype(), DType::kInt8);
  EXPECT_FLOAT_EQ(ScalarF(*q, "x_scale"), static_cast<float>(2.0 / 254));
  EXPECT_EQ(ScalarI(*q, "x_zero_point"), 0);
  // Symmetric activations: ORT keeps a Q/DQ between conv and relu.
  EXPECT_NE(FindNode(*q, "c_QuantizeLinear"), nullptr);
  // QuantizeBias off: the bias stays float.
  EXPECT_TRUE(q->graph.initializers.count("b"));
  EXPECT_EQ(Producer(*q, "b"), nullptr);
  // The override wins over the range.
  EXPECT_FLOAT_EQ(ScalarF(*q, "r_scale"), 0.5f);
  EXPECT_EQ(ScalarI(*q, "r_zero_point"), 3);

  // 16-bit activations: ORT puts every Q/DQ in com.microsoft before opset 21.
  QuantOptions o16;
  o16.activation_type = QuantType::kUInt16;
  auto plan16 = MakePlan(ConvReluMatMul(), o16, ConvReluMatMulRanges());
  ASSERT_TRUE(plan16.ok()) << plan16.error().message;
  auto q16 = plan16->Materialize();
  ASSERT_TRUE(q16.ok()) << q16.error().message;
  ExpectChecks(*q16);
  EXPECT_EQ(Init(*q16, "x_zero_point").dtype(), DType::kUInt16);
  EXPECT_EQ(ScalarI(*q16, "x_zero_point"), 32768);  // round(0 + 1 / (2/65535)) = round(32767.5)
  for (const auto* n : NodesOf(*q16, "QuantizeLinear")) EXPECT_EQ(n->domain, "com.microsoft");
  EXPECT_EQ(q16->opsets.at("com.microsoft"), 1);

  // Power-of-two scales need int8/int16.
  QuantOptions p2;
  p2.power_of_two = true;
  auto bad = MakePlan(ConvReluMatMul(), p2, ConvReluMatMulRanges());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("power-of-two"), std::string::npos) << bad.error().message;
  p2.activation_type = QuantType::kInt8;
  auto good = MakePlan(ConvReluMatMul(), p2, ConvReluMatMulRanges());
  ASSERT_TRUE(good.ok()) << good.error().message;
  auto qp2 = good->Materialize();
  ASSERT_TRUE(qp2.ok()) << qp2.error().message;
  const float s = ScalarF(*qp2, "x_scale");
  int e = 0;
  EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;  // a power of two
  EXPECT_GE(s * 127, 1.0f);                 // that covers [-1, 1]
  EXPECT_LT(s * 127 / 2, 1.0f);
}

TEST(QuantStatic, NodeFilterSelectsNodes) {
  QuantOptions o;
  o.nodes_to_exclude = {"con?"};
  auto plan = MakePlan(ConvReluMatMul(), o, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->FindGroup("conv"), nullptr);
  ASSERT_NE(plan->FindGroup("mm"), nullptr);
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(FindNode(*q, "x_QuantizeLinear"), nullptr);
  EXPECT_TRUE(q->graph.initializers.count("w"));

  o = {};
  o.op_types_to_quantize = {"MatMul"};
  plan = MakePlan(ConvReluMatMul(), o, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->groups().size(), 1u);
  EXPECT_EQ(plan->groups()[0].name, "mm");

  for (auto [field, value] : {std::pair{"nodes_to_exclude", "conv9"}, std::pair{"nodes_to_quantize", "mm*x"},
                              std::pair{"op_types_to_quantize", "LSTM"}}) {
    o = {};
    if (std::string(field) == "nodes_to_exclude") o.nodes_to_exclude = {value};
    if (std::string(field) == "nodes_to_quantize") o.nodes_to_quantize = {value};
    if (std::string(field) == "op_types_to_quantize") o.op_types_to_quantize = {value};
    auto prepared = QuantPlan::Prepare(ConvReluMatMul());
    ASSERT_TRUE(prepared.ok());
    auto tensors = QuantPlan::TensorsToCalibrate(*prepared, o);
    ASSERT_FALSE(tensors.ok()) << field;
    EXPECT_NE(tensors.error().message.find(std::string("'") + value + "'"), std::string::npos)
        << tensors.error().message;
    EXPECT_NE(tensors.error().message.find(field), std::string::npos) << tensors.error().message;
    const TensorRanges ranges = ConvReluMatMulRanges();
    auto p = QuantPlan::Create(*prepared, o, &ranges);
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.error().message.find(value), std::string::npos) << p.error().message;
  }
}

TEST(QuantStatic, TensorsToCalibrateAreTheQuantizableActivations) {
  auto prepared = QuantPlan::Prepare(ConvReluMatMul());
  ASSERT_TRUE(prepared.ok());
  auto t = QuantPlan::TensorsToCalibrate(*prepared, QuantOptions{});
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(*t, (std::set<std::string>{"x", "c", "r", "f", "y"}));
  QuantOptions dyn;
  dyn.mode = QuantMode::kDynamic;
  t = QuantPlan::TensorsToCalibrate(*prepared, dyn);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
}

TEST(QuantStatic, ErrorsNameWhatIsWrong) {
  auto prepared = QuantPlan::Prepare(ConvReluMatMul());
  ASSERT_TRUE(prepared.ok());
  EXPECT_FALSE(QuantPlan::Create(*prepared, QuantOptions{}, nullptr).ok());
  TensorRanges ranges = ConvReluMatMulRanges();
  ranges.erase("y");
  auto p = QuantPlan::Create(*prepared, QuantOptions{}, &ranges);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("'y'"), std::string::npos) << p.error().message;

  ranges = ConvReluMatMulRanges();
  auto plan = QuantPlan::Create(*prepared, QuantOptions{}, &ranges);
  ASSERT_TRUE(plan.ok());
  auto m = plan->Materialize({"no_such_group"});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("'no_such_group'"), std::string::npos) << m.error().message;

  QuantOptions o;
  o.activation_type = QuantType::kInt4;
  p = QuantPlan::Create(*prepared, o, &ranges);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("not supported yet"), std::string::npos) << p.error().message;

  o = {};
  o.tensor_overrides["nothing"].scale = 1.0f;
  p = QuantPlan::Create(*prepared, o, &ranges);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("'nothing'"), std::string::npos) << p.error().message;
}

TEST(QuantGroups, GroupsOfTheHandBuiltModels) {
  auto plan = MakePlan(ConvReluMatMul(), QuantOptions{}, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->groups().size(), 2u);
  const QuantGroup& conv = plan->groups()[0];
  EXPECT_EQ(conv.name, "conv");
  EXPECT_EQ(conv.op_type, "Conv");
  EXPECT_EQ(conv.order, 0u);
  // The relu ORT folds into the conv and the reshape that repeats its parameters.
  EXPECT_EQ(conv.nodes, (std::vector<std::string>{"conv", "relu", "flat"}));
  EXPECT_EQ(conv.weights, (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(conv.activations, (std::vector<std::string>{"x", "r", "f"}));
  EXPECT_EQ(conv.weight_elements, 3 * 2 * 3 * 3 + 3);
  EXPECT_EQ(conv.output_channels, 3);
  // Excluding the conv group removes the input's Q/DQ, the weight's and the bias's;
  // r's Q/DQ go too (nobody else needs r) while f's stay (the MatMul needs f).
  EXPECT_EQ(std::set<std::string>(conv.owned_qdq_nodes.begin(), conv.owned_qdq_nodes.end()),
            (std::set<std::string>{"x_QuantizeLinear", "x_DequantizeLinear", "w_DequantizeLinear", "b_DequantizeLinear",
                                   "r_QuantizeLinear", "r_DequantizeLinear"}));
  const QuantGroup& mm = plan->groups()[1];
  EXPECT_EQ(mm.name, "mm");
  EXPECT_EQ(mm.output_channels, 5);
  EXPECT_EQ(mm.weight_elements, 48 * 5);
  EXPECT_EQ(std::set<std::string>(mm.owned_qdq_nodes.begin(), mm.owned_qdq_nodes.end()),
            (std::set<std::string>{"m_DequantizeLinear", "y_QuantizeLinear", "y_DequantizeLinear"}));

  // Excluding conv: f keeps a Q/DQ (for the MatMul), now with its own range.
  auto q = plan->Materialize({"conv"});
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);
  ASSERT_NE(FindNode(*q, "f_QuantizeLinear"), nullptr);
  EXPECT_EQ(FindNode(*q, "f_QuantizeLinear")->inputs[1], "f_scale");
  for (const auto& name : conv.owned_qdq_nodes) EXPECT_EQ(FindNode(*q, name), nullptr) << name;

  // The Add of two convs joins the conv that produces its latest input.
  auto two = MakePlan(TwoBranches(), QuantOptions{}, TwoBranchesRanges());
  ASSERT_TRUE(two.ok()) << two.error().message;
  ASSERT_EQ(two->groups().size(), 3u);
  EXPECT_EQ(two->FindGroup("add"), nullptr);
  ASSERT_NE(two->FindGroup("conv2"), nullptr);
  EXPECT_EQ(two->FindGroup("conv2")->nodes, (std::vector<std::string>{"conv2", "add"}));
}

// Every group's exclusion changes the model, removes its owned Q/DQ, and excluding
// all groups gives back the float model.
void CheckGroupGuarantees(const QuantPlan& plan, const runtime::TensorMap& feeds) {
  auto full = plan.Materialize();
  ASSERT_TRUE(full.ok()) << full.error().message;
  ExpectChecks(*full);
  const std::string full_bytes = Bytes(*full);
  std::set<std::string> all;
  for (const auto& g : plan.groups()) {
    SCOPED_TRACE("group " + g.name);
    all.insert(g.name);
    EXPECT_FALSE(g.nodes.empty());
    auto q = plan.Materialize({g.name});
    ASSERT_TRUE(q.ok()) << q.error().message;
    EXPECT_NE(Bytes(*q), full_bytes);
    EXPECT_FALSE(g.owned_qdq_nodes.empty());
    for (const auto& name : g.owned_qdq_nodes) {
      EXPECT_NE(FindNode(*full, name), nullptr) << name;
      EXPECT_EQ(FindNode(*q, name), nullptr) << name;
    }
    ExpectChecks(*q);
  }
  auto none = plan.Materialize(all);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(CountQdq(*none), 0u);
  EXPECT_EQ(NodesOf(*none, "DynamicQuantizeLinear").size(), 0u);
  const auto ref = RunModel(plan.prepared_model(), feeds), got = RunModel(*none, feeds);
  ASSERT_EQ(ref.size(), got.size());
  for (const auto& [name, t] : ref) EXPECT_EQ(t.ToDoubles(), got.at(name).ToDoubles()) << name;
}

TEST(QuantGroups, ExclusionGuaranteesOnHandBuiltModels) {
  std::mt19937 rng(9);
  for (bool per_channel : {false, true}) {
    QuantOptions o;
    o.per_channel = per_channel;
    auto plan = MakePlan(ConvReluMatMul(), o, ConvReluMatMulRanges());
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    CheckGroupGuarantees(*plan, {{"x", RandomTensor({2, 2, 4, 4}, rng)}});
    auto two = MakePlan(TwoBranches(), o, TwoBranchesRanges());
    ASSERT_TRUE(two.ok()) << two.error().message;
    CheckGroupGuarantees(*two, {{"x", RandomTensor({1, 2, 3, 3}, rng)}});
  }
}

// The bundled Fashion-MNIST models, calibrated on their 8 sample images.
Expected<QuantPlan> ExamplePlan(const std::string& name, const QuantOptions& o) {
  const std::string dir = std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/";
  SEQTO_ASSIGN_OR_RETURN(ir::Model model, onnxio::LoadModel(dir + name + ".onnx"));
  SEQTO_ASSIGN_OR_RETURN(ir::Model prepared, QuantPlan::Prepare(model));
  SEQTO_ASSIGN_OR_RETURN(std::set<std::string> tensors, QuantPlan::TensorsToCalibrate(prepared, o));
  SEQTO_ASSIGN_OR_RETURN(Tensor x, ReadNpy(dir + "sample_input.npy"));
  bool done = false;
  BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (done) return false;
    feeds["input"] = x;
    done = true;
    return true;
  };
  std::optional<TensorRanges> ranges;
  if (o.mode == QuantMode::kStatic) {
    SEQTO_ASSIGN_OR_RETURN(CalibrationStats stats, Calibrate(prepared, tensors, source, o.calibration_options, 1));
    SEQTO_ASSIGN_OR_RETURN(ranges, stats.Ranges(o.calibration));
  }
  return QuantPlan::Create(prepared, o, ranges ? &*ranges : nullptr);
}

TEST(QuantGroups, ExclusionGuaranteesOnTheBundledModels) {
  const std::string dir = std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/";
  auto x = ReadNpy(dir + "sample_input.npy");
  ASSERT_TRUE(x.ok()) << x.error().message;
  for (const char* name : {"mobilenetv2", "resnet"}) {
    for (QuantMode mode : {QuantMode::kStatic, QuantMode::kDynamic}) {
      SCOPED_TRACE(std::string(name) + (mode == QuantMode::kStatic ? " static" : " dynamic"));
      QuantOptions o;
      o.mode = mode;
      o.per_channel = true;
      auto plan = ExamplePlan(name, o);
      ASSERT_TRUE(plan.ok()) << plan.error().message;
      EXPECT_GE(plan->groups().size(), 10u);
      // No BatchNormalization is left to quantize: it was folded.
      for (const auto& n : plan->prepared_model().graph.nodes) EXPECT_NE(n.op_type, "BatchNormalization");
      CheckGroupGuarantees(*plan, {{"input", *x}});
    }
  }
}

TEST(QuantFallback, Int16Int16ActivationsAndFloat16KeepTheStructure) {
  auto plan = MakePlan(ConvReluMatMul(), QuantOptions{}, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  std::mt19937 rng(4);
  runtime::TensorMap feeds = {{"x", RandomTensor({2, 2, 4, 4}, rng)}};

  auto q16 = plan->Materialize({"conv"}, Fallback::kInt16);
  ASSERT_TRUE(q16.ok()) << q16.error().message;
  ExpectChecks(*q16);
  // The conv group's tensors use int16 from the same ranges; weights int16 symmetric.
  EXPECT_EQ(Init(*q16, "x_zero_point").dtype(), DType::kInt16);
  EXPECT_FLOAT_EQ(ScalarF(*q16, "x_scale"), static_cast<float>(2.0 / 65535));
  EXPECT_EQ(Init(*q16, "w_quantized").dtype(), DType::kInt16);
  EXPECT_FLOAT_EQ(ScalarF(*q16, "w_scale"), static_cast<float>(2 * 1.27f / 65534.0));
  // f is shared by the conv group (through the reshape) and the MatMul: the wider type wins.
  EXPECT_EQ(Init(*q16, "r_zero_point").dtype(), DType::kInt16);
  EXPECT_EQ(Init(*q16, "m_zero_point").dtype(), DType::kInt8);  // the MatMul's own weight stays 8-bit
  EXPECT_EQ(Init(*q16, "y_zero_point").dtype(), DType::kUInt8);
  for (const auto* n : NodesOf(*q16, "DequantizeLinear")) EXPECT_EQ(n->domain, "com.microsoft");
  const auto got16 = RunModel(*q16, feeds);
  ASSERT_TRUE(got16.count("y"));

  // 16-bit activations only: the conv's activations as in kInt16, its weight exactly
  // the full quantization's (type, scale and integers).
  auto qa16 = plan->Materialize({"conv"}, Fallback::kInt16Activations);
  ASSERT_TRUE(qa16.ok()) << qa16.error().message;
  ExpectChecks(*qa16);
  EXPECT_EQ(Init(*qa16, "x_zero_point").dtype(), DType::kInt16);
  EXPECT_FLOAT_EQ(ScalarF(*qa16, "x_scale"), static_cast<float>(2.0 / 65535));
  EXPECT_EQ(Init(*qa16, "r_zero_point").dtype(), DType::kInt16);
  EXPECT_EQ(Init(*qa16, "y_zero_point").dtype(), DType::kUInt8);
  auto q8 = plan->Materialize();
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ(Init(*qa16, "w_quantized").dtype(), DType::kInt8);
  EXPECT_EQ(Init(*qa16, "w_quantized").ToInt64s(), Init(*q8, "w_quantized").ToInt64s());
  EXPECT_FLOAT_EQ(ScalarF(*qa16, "w_scale"), ScalarF(*q8, "w_scale"));
  ASSERT_TRUE(RunModel(*qa16, feeds).count("y"));

  auto qf16 = plan->Materialize({"conv"}, Fallback::kFloat16);
  ASSERT_TRUE(qf16.ok()) << qf16.error().message;
  ExpectChecks(*qf16);
  EXPECT_EQ(Init(*qf16, "w_float16").dtype(), DType::kFloat16);
  ASSERT_NE(FindNode(*qf16, "x_CastToFloat16"), nullptr);
  EXPECT_EQ(FindNode(*qf16, "conv")->inputs[0], "x_Float16_Output");
  EXPECT_EQ(FindNode(*qf16, "x_QuantizeLinear"), nullptr);
  EXPECT_NE(FindNode(*qf16, "y_QuantizeLinear"), nullptr);  // the MatMul stays quantized
  const auto gotf16 = RunModel(*qf16, feeds);
  ASSERT_TRUE(gotf16.count("y"));

  // Calibrated on the data they run on, the fallback models are close to float, and
  // the 16-bit ones closer than the full 8-bit model.
  auto calibrated = MakePlan(ConvReluMatMul(), QuantOptions{}, ObservedRanges(ConvReluMatMul(), feeds));
  ASSERT_TRUE(calibrated.ok()) << calibrated.error().message;
  const auto ref = RunModel(calibrated->prepared_model(), feeds);
  auto error = [&](Fallback fb) {
    auto m = calibrated->Materialize({"conv"}, fb);
    EXPECT_TRUE(m.ok()) << m.error().message;
    const auto got = RunModel(*m, feeds);
    ExpectClose(ref, got);
    double e = 0;
    const auto a = ref.at("y").ToDoubles(), c = got.at("y").ToDoubles();
    for (size_t i = 0; i < a.size(); ++i) e += (a[i] - c[i]) * (a[i] - c[i]);
    return e;
  };
  auto full = calibrated->Materialize();
  ASSERT_TRUE(full.ok());
  const auto got8 = RunModel(*full, feeds);
  double e8 = 0;
  for (size_t i = 0; i < ref.at("y").ToDoubles().size(); ++i)
    e8 += std::pow(ref.at("y").ToDoubles()[i] - got8.at("y").ToDoubles()[i], 2);
  EXPECT_LT(error(Fallback::kInt16), e8);
  EXPECT_LT(error(Fallback::kInt16Activations), e8);
  EXPECT_LT(error(Fallback::kFloat16), e8);
  EXPECT_LT(error(Fallback::kFloat), e8);
}

TEST(QuantOpset, RaisesToThirteenForPerChannelWhenTheOpsAllow) {
  QuantOptions o;
  o.per_channel = true;
  auto plan = MakePlan(ConvReluMatMul(11), o, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->onnx_opset(), 13);
  ExpectChecks(*q);
  // Per tensor, opset 11 is enough.
  plan = MakePlan(ConvReluMatMul(11), QuantOptions{}, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  q = plan->Materialize();
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->onnx_opset(), 11);

  // A Softmax changes meaning at opset 13: no silent upgrade.
  ir::Model m = ConvReluMatMul(11);
  m.graph.nodes.push_back(MakeNode("softmax", "Softmax", {"y"}, {"p"}));
  m.graph.outputs[0].name = "p";
  m.graph.value_infos.push_back({"y", DType::kFloat32, std::nullopt});
  TensorRanges ranges = ConvReluMatMulRanges();
  ranges["p"] = Range(0, 1);
  o.op_types_to_quantize = {"Conv", "MatMul"};
  auto bad = MakePlan(m, o, ranges);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("Softmax"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("opset 13"), std::string::npos) << bad.error().message;
}

TEST(QuantDynamic, EmitsWhatQuantizeDynamicEmits) {
  QuantOptions o;
  o.mode = QuantMode::kDynamic;
  auto prepared = QuantPlan::Prepare(ConvReluMatMul());
  ASSERT_TRUE(prepared.ok());
  auto plan = QuantPlan::Create(*prepared, o, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->groups().size(), 2u);
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);
  EXPECT_EQ(q->onnx_opset(), 13);
  EXPECT_EQ(FindNode(*q, "conv"), nullptr);
  EXPECT_EQ(FindNode(*q, "mm"), nullptr);

  const ir::Node* dql = FindNode(*q, "x_QuantizeLinear");
  ASSERT_NE(dql, nullptr);
  EXPECT_EQ(dql->op_type, "DynamicQuantizeLinear");
  EXPECT_EQ(dql->outputs, (std::vector<std::string>{"x_quantized", "x_scale", "x_zero_point"}));
  const ir::Node* ci = FindNode(*q, "conv_quant");
  ASSERT_NE(ci, nullptr);
  EXPECT_EQ(ci->op_type, "ConvInteger");
  EXPECT_EQ(ci->inputs, (std::vector<std::string>{"x_quantized", "w_quantized", "x_zero_point", "w_zero_point"}));
  EXPECT_EQ(ci->attributes.at("pads").ints, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(Init(*q, "w_quantized").dtype(), DType::kInt8);
  EXPECT_FLOAT_EQ(ScalarF(*q, "w_scale"), 0.01f);
  const ir::Node* cast = FindNode(*q, "c_output_quantized_cast");
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->attributes.at("to").i, 1);
  const ir::Node* scales = FindNode(*q, "conv_quant_scales_mul");
  ASSERT_NE(scales, nullptr);
  EXPECT_EQ(scales->inputs, (std::vector<std::string>{"x_scale", "w_scale"}));
  const ir::Node* out_mul = FindNode(*q, "conv_quant_output_scale_mul");
  ASSERT_NE(out_mul, nullptr);
  EXPECT_EQ(out_mul->outputs[0], "cquant_scaled_output");
  // The bias: reshaped to [1, C, 1, 1] and added in float.
  const ir::Node* reshape = FindNode(*q, "c_bias_reshape");
  ASSERT_NE(reshape, nullptr);
  EXPECT_EQ(Init(*q, "c_bias_reshape_shape").ToInt64s(), (std::vector<int64_t>{1, -1, 1, 1}));
  EXPECT_EQ(Producer(*q, "c")->name, "c_bias_add");
  EXPECT_TRUE(q->graph.initializers.count("b"));

  const ir::Node* mi = FindNode(*q, "mm_quant");
  ASSERT_NE(mi, nullptr);
  EXPECT_EQ(mi->op_type, "MatMulInteger");
  EXPECT_EQ(FindNode(*q, "f_QuantizeLinear")->op_type, "DynamicQuantizeLinear");
  EXPECT_EQ(Producer(*q, "y")->name, "mm_quant_output_scale_mul");
  EXPECT_EQ(NodesOf(*q, "QuantizeLinear").size(), 0u);

  std::mt19937 rng(8);
  runtime::TensorMap feeds = {{"x", RandomTensor({3, 2, 4, 4}, rng)}};
  const auto ref = RunModel(plan->prepared_model(), feeds), got = RunModel(*q, feeds);
  const auto a = ref.at("y").ToDoubles(), c = got.at("y").ToDoubles();
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(a[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - c[i]));
  }
  EXPECT_LT(max_diff, 0.05 * max_ref + 0.05);

  // Excluding a dynamic group restores its float node; fallbacks need static mode.
  auto q1 = plan->Materialize({"mm"});
  ASSERT_TRUE(q1.ok());
  EXPECT_NE(FindNode(*q1, "mm"), nullptr);
  EXPECT_EQ(FindNode(*q1, "f_QuantizeLinear"), nullptr);
  EXPECT_FALSE(plan->Materialize({"mm"}, Fallback::kInt16).ok());

  // Gemm becomes a MatMulInteger on the transposed weight (alpha folded in), beta * C added.
  ir::Model gm;
  gm.opsets[""] = 13;
  gm.graph.inputs.push_back(FloatValue("a", {{2}, {6}}));
  gm.graph.outputs.push_back(FloatValue("g", {{2}, {5}}));
  gm.graph.initializers["B"] = RandomTensor({5, 6}, rng);
  gm.graph.initializers["C"] = RandomTensor({5}, rng);
  ir::Node gemm = MakeNode("gemm", "Gemm", {"a", "B", "C"}, {"g"});
  gemm.attributes["transB"] = Int(1);
  gemm.attributes["alpha"].type = ir::Attribute::Type::kFloat;
  gemm.attributes["alpha"].f = 0.5f;
  gemm.attributes["beta"].type = ir::Attribute::Type::kFloat;
  gemm.attributes["beta"].f = 2.0f;
  gm.graph.nodes.push_back(gemm);
  auto gprep = QuantPlan::Prepare(gm);
  ASSERT_TRUE(gprep.ok());
  auto gplan = QuantPlan::Create(*gprep, o, nullptr);
  ASSERT_TRUE(gplan.ok()) << gplan.error().message;
  auto gq = gplan->Materialize();
  ASSERT_TRUE(gq.ok()) << gq.error().message;
  ExpectChecks(*gq);
  EXPECT_EQ(Init(*gq, "B_quantized").shape(), (Shape{6, 5}));
  runtime::TensorMap gfeeds = {{"a", RandomTensor({2, 6}, rng)}};
  const auto gref = RunModel(gm, gfeeds), ggot = RunModel(*gq, gfeeds);
  const auto ga = gref.at("g").ToDoubles(), gc = ggot.at("g").ToDoubles();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(gc[i], ga[i], 0.05) << i;
}

}  // namespace
}  // namespace seqto::quant

namespace seqto::quant {
namespace {

TEST(QuantStatic, PerChannelDeadAndTinyChannelsKeepTheirBias) {
  // A folded BatchNorm whose gamma is ~0 leaves output channels with zero or tiny
  // weights and a bias (PP-OCRv4's recognizer). Channel 1: all zero, so its range is
  // empty and its scale 1 (ORT's rule); channel 2: weights ~1e-30, a scale ~1e-32 at
  // which its bias would need ~2^90 times int32's range. The weight's scale of such
  // a channel grows by the smallest power of two at which the bias fits; the bias
  // keeps scale s_x * s_w[c]; the other channels are untouched.
  ir::Model m = ConvReluMatMul();
  Tensor& w = m.graph.initializers.at("w");
  float* wd = w.data<float>();
  for (int64_t i = 18; i < 36; ++i) wd[i] = 0.0f;
  for (int64_t i = 36; i < 54; ++i) wd[i] *= 1e-30f;
  const std::vector<float> b = {0.5f, 0.75f, -0.625f};
  m.graph.initializers["b"] = Tensor::FromVector<float>({3}, b);
  std::mt19937 rng(3);
  runtime::TensorMap feeds = {{"x", RandomTensor({4, 2, 4, 4}, rng)}};
  QuantOptions o;
  o.per_channel = true;
  auto plan = MakePlan(m, o, ObservedRanges(m, feeds));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize();
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);

  RangeOptions int8;
  int8.type = QuantType::kInt8;
  int8.symmetric = true;
  auto own = ComputeWeightParams(w, int8, 0, "w");
  ASSERT_TRUE(own.ok()) << own.error().message;
  EXPECT_EQ(own->scale[1], 1.0f);
  EXPECT_LT(own->scale[2], 1e-31f);
  const float sx = ScalarF(*q, "x_scale");
  const auto sw = Init(*q, "w_scale").ToDoubles();
  const auto sb = Init(*q, "b_quantized_scale").ToDoubles();
  const Tensor& bq = Init(*q, "b_quantized");
  ASSERT_EQ(sw.size(), 3u);
  ASSERT_EQ(sb.size(), 3u);
  EXPECT_EQ(static_cast<float>(sw[0]), own->scale[0]);
  EXPECT_EQ(static_cast<float>(sw[1]), own->scale[1]);
  const int k = std::ilogb(static_cast<float>(sw[2])) - std::ilogb(own->scale[2]);
  EXPECT_EQ(static_cast<float>(sw[2]), std::ldexp(own->scale[2], k));
  const double limit = INT32_MAX / 2;
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(static_cast<float>(sb[c]), sx * static_cast<float>(sw[c])) << c;
    const int32_t v = bq.data<int32_t>()[c];
    EXPECT_LE(std::abs(v), limit) << c;
    EXPECT_NEAR(v * sb[c], b[c], sb[c]) << c;
  }
  // The smallest power: half the scale would not hold the bias.
  EXPECT_GT(std::fabs(b[2]) / (sx * std::ldexp(static_cast<float>(sw[2]), -1)), limit);
  // Channel 2's weights all round to 0 at that scale (they were ~1e-30 anyway).
  const auto wq = Init(*q, "w_quantized").ToInt64s();
  for (int64_t i = 36; i < 54; ++i) EXPECT_EQ(wq[static_cast<size_t>(i)], 0) << i;
  // The quantized model runs and stays within quantization error of the float one.
  ExpectClose(RunModel(m, feeds), RunModel(*q, feeds));
}

TEST(QuantFallback, ABiasInt32CannotHoldGetsALargerWeightScale) {
  // int16 input and weight scales make s_x * s_w ~ 1.2e-9: a bias of 3 would need
  // 2.5e9 > int32. The weight's scale grows by the smallest power of two that makes
  // it fit (with a bit of headroom); the bias keeps scale s_x * s_w, which integer
  // kernels assume.
  ir::Model m = ConvReluMatMul();
  m.graph.initializers["b"] = Tensor::FromVector<float>({3}, {3.0f, -0.25f, 0.125f});
  auto plan = MakePlan(m, QuantOptions{}, ConvReluMatMulRanges());
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto q = plan->Materialize({"conv"}, Fallback::kInt16);
  ASSERT_TRUE(q.ok()) << q.error().message;
  ExpectChecks(*q);
  RangeOptions int16;
  int16.type = QuantType::kInt16;
  int16.symmetric = true;
  auto own = ComputeWeightParams(m.graph.initializers.at("w"), int16, std::nullopt, "w");
  ASSERT_TRUE(own.ok()) << own.error().message;
  EXPECT_FLOAT_EQ(ScalarF(*q, "w_scale"), own->scale[0] * 4);  // 2.5e9 / 4 < 2^30
  const float s = ScalarF(*q, "b_quantized_scale");
  EXPECT_EQ(s, ScalarF(*q, "x_scale") * ScalarF(*q, "w_scale"));
  const Tensor& bq = Init(*q, "b_quantized");
  const std::vector<float> b = {3.0f, -0.25f, 0.125f};
  for (int k = 0; k < 3; ++k) {
    EXPECT_LE(std::abs(bq.data<int32_t>()[k]), 1 << 30);
    EXPECT_NEAR(bq.data<int32_t>()[k] * static_cast<double>(s), b[k], s);
  }
  // In the 8-bit model the same bias fits at s_x * s_w.
  auto q8 = plan->Materialize();
  ASSERT_TRUE(q8.ok());
  EXPECT_FLOAT_EQ(ScalarF(*q8, "b_quantized_scale"), ScalarF(*q8, "x_scale") * ScalarF(*q8, "w_scale"));
}

}  // namespace
}  // namespace seqto::quant
