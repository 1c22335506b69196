// The channels-last layout pass (rewrite/channels_last.cc) and the kernels it
// switches to NHWC: the optimized graph must compute what the plain one does, keep
// every value's name and NCHW shape, and leave Transposes only at region borders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "onnxio/model_io.h"
#include "quantized_examples.h"
#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using runtime::Session;
using runtime::SessionOptions;
using runtime::TensorMap;
using testing::Ints;
using testing::MakeNode;
using testing::RandomTensor;

// x [N, 5, 9, 7] -> conv 3x3 -> Relu -> depthwise 3x3 stride 2 -> Clip(0, 6) = d
//   -> pointwise 1x1 = p -> conv 3x3 dilation 2 -> Add(p) -> Relu = r (a graph output)
//   -> Mul(0.5) -> Sigmoid -> GlobalAveragePool -> Flatten = y
// Odd channel counts (5, 8, 6) and sizes, every kind of conv the CNNs have, a
// residual Add that fuses as the conv's sum, elementwise ops after the last conv.
ir::Model ChainModel(std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {5}, {9}, {7}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  g.outputs.push_back({"r", DType::kFloat32, std::nullopt});
  auto conv = [&](const std::string& name, const std::string& in, const std::string& out, Shape w_shape,
                  std::vector<int64_t> pads, int64_t group = 1, int64_t stride = 1, int64_t dilation = 1) {
    g.initializers[name + ".w"] = RandomTensor(w_shape, rng, -0.5f, 0.5f);
    g.initializers[name + ".b"] = RandomTensor({w_shape[0]}, rng);
    ir::Node n = MakeNode(name, "Conv", {in, name + ".w", name + ".b"}, {out});
    n.attributes["pads"] = Ints(std::move(pads));
    n.attributes["group"] = testing::Int(group);
    n.attributes["strides"] = Ints({stride, stride});
    n.attributes["dilations"] = Ints({dilation, dilation});
    g.nodes.push_back(n);
  };
  conv("conv_a", "x", "a", {8, 5, 3, 3}, {1, 1, 1, 1});
  g.nodes.push_back(MakeNode("relu_a", "Relu", {"a"}, {"ra"}));
  conv("conv_dw", "ra", "dw", {8, 1, 3, 3}, {1, 1, 1, 1}, 8, 2);
  g.initializers["zero"] = Tensor::Scalar<float>(0.f);
  g.initializers["six"] = Tensor::Scalar<float>(6.f);
  g.nodes.push_back(MakeNode("clip_dw", "Clip", {"dw", "zero", "six"}, {"d"}));
  conv("conv_pw", "d", "p", {6, 8, 1, 1}, {0, 0, 0, 0});
  conv("conv_e", "p", "e", {6, 6, 3, 3}, {2, 2, 2, 2}, 1, 1, 2);
  g.nodes.push_back(MakeNode("add", "Add", {"e", "p"}, {"s"}));
  g.nodes.push_back(MakeNode("relu_s", "Relu", {"s"}, {"r"}));
  g.initializers["half"] = Tensor::Scalar<float>(0.5f);
  g.nodes.push_back(MakeNode("mul", "Mul", {"r", "half"}, {"m"}));
  g.nodes.push_back(MakeNode("sigmoid", "Sigmoid", {"m"}, {"sg"}));
  g.nodes.push_back(MakeNode("gap", "GlobalAveragePool", {"sg"}, {"gp"}));
  g.nodes.push_back(MakeNode("flatten", "Flatten", {"gp"}, {"y"}));
  return m;
}

std::map<std::string, int> OpCounts(const ir::Graph& g) {
  std::map<std::string, int> ops;
  for (const auto& n : g.nodes) ++ops[n.op_type];
  return ops;
}

void ExpectClose(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto va = a.ToDoubles(), vb = b.ToDoubles();
  for (size_t i = 0; i < va.size(); ++i)
    ASSERT_NEAR(va[i], vb[i], 1e-5 + 1e-4 * std::fabs(va[i])) << what << " at " << i;
}

TensorMap RunModel(const ir::Model& m, const SessionOptions& o, const TensorMap& feeds,
                   const runtime::RunHooks* hooks = nullptr) {
  auto s = Session::Create(m, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  auto out = (*s)->Run(feeds, hooks);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : TensorMap{};
}

SessionOptions Plain() {
  SessionOptions o;
  o.optimize = false;
  o.reference_only = true;
  return o;
}

TEST(ChannelsLast, ConvChainLeavesTransposesOnlyAtTheBorders) {
  std::mt19937 rng(1);
  ir::Model m = ChainModel(rng);
  ir::Graph g = m.graph;
  ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
  const auto ops = OpCounts(g);
  // x to NHWC; back to NCHW for the graph output r and for the Flatten after the
  // (channels-last) GlobalAveragePool.
  EXPECT_EQ(ops.at("Transpose"), 3);
  EXPECT_EQ(ops.at("FusedConv"), 4);
  for (const auto& n : g.nodes) {
    if (n.op_type == "FusedConv") {
      EXPECT_TRUE(n.has_attr("channels_last")) << n.name;
    }
  }
  // Mul, Sigmoid and GlobalAveragePool ran on the NHWC twins: Sigmoid's NCHW output
  // is no longer computed, the pooled one is (the Flatten reads it).
  // Every original value that is still computed keeps its name.
  std::set<std::string> produced;
  for (const auto& n : g.nodes) produced.insert(n.outputs.begin(), n.outputs.end());
  for (const char* v : {"r", "gp", "y"}) EXPECT_TRUE(produced.count(v)) << v;
  EXPECT_FALSE(produced.count("sg"));
}

TEST(ChannelsLast, ComputesWhatThePlainGraphDoes) {
  std::mt19937 rng(2);
  const ir::Model m = ChainModel(rng);
  for (int64_t batch : {1, 3}) {
    const TensorMap feeds{{"x", RandomTensor({batch, 5, 9, 7}, rng)}};
    const TensorMap want = RunModel(m, Plain(), feeds);
    ASSERT_EQ(want.size(), 2u);
    // The fast kernels, and the channels-last kernels' reference paths.
    for (bool reference : {false, true}) {
      SessionOptions o;
      o.reference_only = reference;
      const TensorMap got = RunModel(m, o, feeds);
      ASSERT_EQ(got.size(), 2u);
      for (const char* name : {"y", "r"}) ExpectClose(want.at(name), got.at(name), name);
    }
  }
}

// A value hooks must see keeps its NCHW tensor, and an override of it reaches every
// reader, the channels-last ones included.
TEST(ChannelsLast, KeptValuesAreObservedAndOverriddenChannelsFirst) {
  std::mt19937 rng(3);
  const ir::Model m = ChainModel(rng);
  const TensorMap feeds{{"x", RandomTensor({2, 5, 9, 7}, rng)}};
  Tensor seen_plain, seen_fast;
  auto hooks_for = [](Tensor& seen) {
    runtime::RunHooks h;
    h.observe = [&seen](const std::string& name, const Tensor& v) {
      if (name == "d") seen = v.Clone();
    };
    h.override_value = [](const std::string& name, const Tensor& v) -> std::optional<Tensor> {
      if (name != "d") return std::nullopt;
      Tensor t = v.Clone();
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = 1.f - p[i];
      return t;
    };
    return h;
  };
  SessionOptions plain = Plain(), fast;
  plain.keep_values = fast.keep_values = {"d"};
  const auto hp = hooks_for(seen_plain), hf = hooks_for(seen_fast);
  const TensorMap want = RunModel(m, plain, feeds, &hp);
  const TensorMap got = RunModel(m, fast, feeds, &hf);
  ASSERT_TRUE(seen_plain.defined() && seen_fast.defined());
  EXPECT_EQ(seen_fast.shape(), (Shape{2, 8, 5, 4}));
  ExpectClose(seen_plain, seen_fast, "d");
  for (const char* name : {"y", "r"}) ExpectClose(want.at(name), got.at(name), name);
}

// When hooks must see every value (calibration, analysis), no conv gains from the
// layout: the pass leaves the graph as it is.
TEST(ChannelsLast, EveryValueKeptLeavesTheGraphAlone) {
  std::mt19937 rng(7);
  const ir::Model m = ChainModel(rng);
  rewrite::OptimizeOptions o;
  for (const auto& n : m.graph.nodes) o.keep_values.insert(n.outputs.begin(), n.outputs.end());
  ir::Graph g = m.graph;
  ASSERT_TRUE(rewrite::Optimize(g, o).ok());
  EXPECT_EQ(OpCounts(g).count("Transpose"), 0u);
  for (const auto& n : g.nodes) EXPECT_FALSE(n.has_attr("channels_last")) << n.name;
}

// A broadcast Sum (rank 4, but [1, C, 1, 1]) runs through the fused conv's unfused
// fallback in channels-last too.
TEST(ChannelsLast, BroadcastSumStaysCorrect) {
  std::mt19937 rng(4);
  ir::Model m = ChainModel(rng);
  m.graph.initializers["chan"] = RandomTensor({1, 6, 1, 1}, rng);
  for (auto& n : m.graph.nodes)
    if (n.name == "add") n.inputs = {"e", "chan"};
  ir::Graph g = m.graph;
  rewrite::OptimizeOptions keep_add;
  keep_add.fold_conv_affine = false;  // else the per-channel Add folds into the conv's bias
  ASSERT_TRUE(rewrite::Optimize(g, keep_add).ok());
  bool fused_chan = false;
  for (const auto& n : g.nodes)
    fused_chan |= n.op_type == "FusedConv" && n.has_attr("channels_last") &&
                  std::count(n.inputs.begin(), n.inputs.end(), "chan/nhwc") == 1;
  EXPECT_TRUE(fused_chan);
  const TensorMap feeds{{"x", RandomTensor({2, 5, 9, 7}, rng)}};
  const TensorMap want = RunModel(m, Plain(), feeds);
  const TensorMap got = RunModel(m, {}, feeds);
  for (const char* name : {"y", "r"}) ExpectClose(want.at(name), got.at(name), name);
}

// A conv whose input has the wrong rank is not converted: the error is the conv's.
TEST(ChannelsLast, WrongRankInputIsTheConvsError) {
  std::mt19937 rng(6);
  ir::Model m = ChainModel(rng);
  m.graph.inputs[0].shape = std::vector<ir::Dim>{{-1, "N"}, {5}, {9}};
  auto s = Session::Create(m, {});
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto out = (*s)->Run({{"x", RandomTensor({2, 5, 9}, rng)}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("'conv_a'"), std::string::npos) << out.error().message;
  EXPECT_EQ(out.error().message.find("Transpose"), std::string::npos) << out.error().message;
}

TEST(ChannelsLast, InternalOpsRejectABadAttribute) {
  std::mt19937 rng(5);
  ir::Model m = ChainModel(rng);
  ir::Graph g = m.graph;
  rewrite::OptimizeOptions o;
  o.channels_last = false;
  ASSERT_TRUE(rewrite::Optimize(g, o).ok());
  for (auto& n : g.nodes)
    if (n.op_type == "FusedConv") n.attributes["channels_last"] = testing::Int(2);
  m.graph = g;
  m.opsets["com.seqto"] = 1;
  SessionOptions so;
  so.optimize = false;
  auto s = Session::Create(m, so);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("channels_last"), std::string::npos) << s.error().message;
}

// The bundled Fashion-MNIST CNNs quantized by quant/ (static, per-channel, MinMax on
// the 8 sample images): every integer conv and the pooled tail run channels-last,
// and the result is what the channels-first int8 graph gives (exactly on the exact
// paths; on oneDNN's, within the one-quantum tie differences its kernels may have).
TEST(ChannelsLast, QuantizedExamplesRunChannelsLast) {
  auto x = testing::ExampleSampleInput();
  ASSERT_TRUE(x.ok()) << x.error().message;
  for (const std::string name : {"resnet", "mobilenetv2"}) {
    SCOPED_TRACE(name);
    auto quantized = testing::QuantizedExample(name, *x);
    ASSERT_TRUE(quantized.ok()) << quantized.error().message;
    const ir::Model& qdq = *quantized;
    ir::Graph g = qdq.graph;
    ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
    int convs = 0, nhwc_convs = 0, transposes = 0;
    for (const auto& n : g.nodes) {
      if (n.op_type == "QLinearConv") {
        ++convs;
        nhwc_convs += n.has_attr("channels_last");
      }
      transposes += n.op_type == "Transpose";
    }
    EXPECT_GT(convs, 0);
    EXPECT_EQ(nhwc_convs, convs);
    // The input's QuantizeLinear writes channels-last itself; one Transpose after the
    // pooling ([N, 1, 1, C]: a free reshape).
    EXPECT_EQ(transposes, 1);
    EXPECT_EQ(OpCounts(g).count("QuantizeLinear"), 1u);
    for (const auto& n : g.nodes)
      if (n.op_type == "QuantizeLinear") {
        EXPECT_TRUE(n.domain == "com.seqto" && n.has_attr("to_channels_last"));
      }

    const std::string input = qdq.graph.inputs.at(0).name;
    const TensorMap feeds{{input, *x}};
    for (bool reference : {true, false}) {
      SCOPED_TRACE(reference ? "exact paths" : "oneDNN paths");
      SessionOptions first, last;
      first.channels_last = false;
      first.reference_only = last.reference_only = reference;
      const TensorMap a = RunModel(qdq, first, feeds), b = RunModel(qdq, last, feeds);
      ASSERT_EQ(a.size(), 1u);
      ASSERT_EQ(b.size(), 1u);
      const auto va = a.begin()->second.ToDoubles(), vb = b.begin()->second.ToDoubles();
      ASSERT_EQ(va.size(), vb.size());
      if (reference) {
        EXPECT_EQ(va, vb);
        continue;
      }
      const double quantum = testing::SmallestGap(va);
      double max_diff = 0;
      for (size_t i = 0; i < va.size(); ++i) max_diff = std::max(max_diff, std::fabs(va[i] - vb[i]));
      EXPECT_LE(max_diff, 3 * quantum + 1e-6) << "quantum " << quantum;
    }
  }
}

// Fused activations keep NaN as the unfused ops do (ONNX Runtime too): oneDNN's
// relu and clip post-ops alone would turn it into 0 or the clip bound.
TEST(ChannelsLast, FusedConvActivationsKeepNaNAsTheUnfusedOps) {
  std::mt19937 rng(5);
  const ir::Model m = ChainModel(rng);
  Tensor x = RandomTensor({2, 5, 9, 7}, rng);
  float* p = x.data<float>();
  p[3] = std::nanf("");
  p[200] = std::nanf("");
  p[400] = INFINITY;  // inf times a zero-padded window and inf - inf give NaN too
  const TensorMap feeds = {{"x", x}};
  SessionOptions unfused;
  unfused.optimize = false;
  const TensorMap want = RunModel(m, unfused, feeds);
  ASSERT_FALSE(want.empty());
  const auto want_r = want.at("r").ToDoubles();
  size_t nans = 0;
  for (double v : want_r) nans += std::isnan(v);
  ASSERT_GT(nans, 0u) << "the test input must reach the outputs as NaN";
  for (bool channels_last : {true, false}) {
    SCOPED_TRACE(channels_last ? "channels_last" : "nchw");
    SessionOptions fused;
    fused.channels_last = channels_last;
    const TensorMap got = RunModel(m, fused, feeds);
    ASSERT_FALSE(got.empty());
    for (const char* name : {"r", "y"}) {
      const auto a = want.at(name).ToDoubles(), b = got.at(name).ToDoubles();
      ASSERT_EQ(a.size(), b.size()) << name;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i])) << name << " at " << i << ": " << a[i] << " vs " << b[i];
        if (!std::isnan(a[i])) {
          ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::fabs(a[i])) << name << " at " << i;
        }
      }
    }
    // Finite inputs afterwards take the fused path again and still agree.
    const TensorMap finite = {{"x", RandomTensor({2, 5, 9, 7}, rng)}};
    ExpectClose(RunModel(m, unfused, finite).at("r"), RunModel(m, fused, finite).at("r"), "finite r");
  }
}

// The same for a NaN that comes from the model, not the inputs: a weight holding NaN.
// The session tells kernels whether a run can hold non-finite values at all; the
// constants count as much as the inputs.
TEST(ChannelsLast, FusedConvActivationsKeepNaNFromAWeight) {
  std::mt19937 rng(6);
  ir::Model m = ChainModel(rng);
  bool poisoned = false;
  for (auto& [name, w] : m.graph.initializers)
    if (!poisoned && w.dtype() == DType::kFloat32 && w.rank() == 4) {
      w = w.Clone();
      w.data<float>()[1] = std::nanf("");
      poisoned = true;
    }
  ASSERT_TRUE(poisoned);
  const TensorMap feeds = {{"x", RandomTensor({2, 5, 9, 7}, rng)}};
  SessionOptions unfused;
  unfused.optimize = false;
  const auto want = RunModel(m, unfused, feeds).at("r").ToDoubles();
  size_t nans = 0;
  for (double v : want) nans += std::isnan(v);
  ASSERT_GT(nans, 0u) << "the NaN weight must reach the outputs";
  SessionOptions fused;
  const auto got = RunModel(m, fused, feeds).at("r").ToDoubles();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(std::isnan(want[i]), std::isnan(got[i])) << "r at " << i;
}

// SqueezeNet's fire modules: conv -> Relu -> MaxPool (3x3, stride 2, ceil_mode) ->
// squeeze 1x1 -> Relu -> [expand 1x1 -> Relu, expand 3x3 -> Relu] -> Concat on
// channels -> AveragePool 2x2 -> conv 1x1 -> GlobalAveragePool -> Flatten = y.
ir::Model FireModel(std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {17}, {15}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  auto conv = [&](const std::string& name, const std::string& in, Shape w_shape, int64_t pad) {
    g.initializers[name + ".w"] = RandomTensor(w_shape, rng, -0.5f, 0.5f);
    g.initializers[name + ".b"] = RandomTensor({w_shape[0]}, rng);
    ir::Node n = MakeNode(name, "Conv", {in, name + ".w", name + ".b"}, {name + ".out"});
    n.attributes["pads"] = Ints({pad, pad, pad, pad});
    g.nodes.push_back(n);
    g.nodes.push_back(MakeNode(name + ".relu", "Relu", {name + ".out"}, {name + ".act"}));
    return name + ".act";
  };
  const std::string stem = conv("stem", "x", {8, 3, 3, 3}, 1);
  ir::Node pool = MakeNode("pool", "MaxPool", {stem}, {"pooled"});
  pool.attributes["kernel_shape"] = Ints({3, 3});
  pool.attributes["strides"] = Ints({2, 2});
  pool.attributes["ceil_mode"] = testing::Int(1);
  g.nodes.push_back(pool);
  const std::string squeeze = conv("squeeze", "pooled", {4, 8, 1, 1}, 0);
  const std::string e1 = conv("expand1", squeeze, {6, 4, 1, 1}, 0);
  const std::string e3 = conv("expand3", squeeze, {5, 4, 3, 3}, 1);
  ir::Node cat = MakeNode("concat", "Concat", {e1, e3}, {"fire"});
  cat.attributes["axis"] = testing::Int(1);
  g.nodes.push_back(cat);
  ir::Node avg = MakeNode("avg", "AveragePool", {"fire"}, {"avg.out"});
  avg.attributes["kernel_shape"] = Ints({2, 2});
  avg.attributes["strides"] = Ints({2, 2});
  g.nodes.push_back(avg);
  const std::string head = conv("head", "avg.out", {7, 11, 1, 1}, 0);
  g.nodes.push_back(MakeNode("gap", "GlobalAveragePool", {head}, {"gp"}));
  g.nodes.push_back(MakeNode("flatten", "Flatten", {"gp"}, {"y"}));
  return m;
}

int Count(const ir::Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

// Pools and the Concat of a fire module join the channels-last region: Transposes
// are left only after the input and before the Flatten.
TEST(ChannelsLast, FireModulesPoolAndConcatChannelsLast) {
  std::mt19937 rng(8);
  const ir::Model m = FireModel(rng);
  ir::Graph g = m.graph;
  ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
  EXPECT_EQ(Count(g, "Transpose"), 2);
  for (const auto& n : g.nodes)
    if (n.op_type == "MaxPool" || n.op_type == "AveragePool" || n.op_type == "GlobalAveragePool") {
      EXPECT_EQ(n.domain, "com.seqto") << n.name;
      EXPECT_TRUE(n.has_attr("channels_last")) << n.name;
    }
  for (const auto& n : g.nodes)
    if (n.op_type == "Concat") {
      EXPECT_EQ(n.attr_int("axis", 0).value(), 3);
    }
  for (int64_t batch : {1, 2}) {
    const TensorMap feeds{{"x", RandomTensor({batch, 3, 17, 15}, rng)}};
    const TensorMap want = RunModel(m, Plain(), feeds);
    for (bool reference : {false, true}) {
      SessionOptions o;
      o.reference_only = reference;
      ExpectClose(want.at("y"), RunModel(m, o, feeds).at("y"), reference ? "y (reference)" : "y (fast)");
    }
  }
}

// Float and int8 pools on channels-last data compute what the channels-first ops do,
// with every window geometry the ops allow (ceil_mode, pads, dilations, strides).
TEST(ChannelsLast, PoolKernelsMatchTheChannelsFirstOps) {
  std::mt19937 rng(9);
  struct Case {
    std::string op;
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil_mode;
  };
  const std::vector<Case> cases = {{"MaxPool", {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1},
                                   {"MaxPool", {2, 3}, {1, 2}, {1, 0, 1, 1}, {2, 1}, 0},
                                   {"AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1},
                                   {"GlobalAveragePool", {}, {}, {}, {}, 0},
                                   {"GlobalMaxPool", {}, {}, {}, {}, 0}};
  for (const auto& c : cases)
    for (DType dtype : {DType::kFloat32, DType::kUInt8, DType::kInt8}) {
      if (dtype != DType::kFloat32 && c.op.find("Max") == std::string::npos) continue;  // 8-bit: max only
      SCOPED_TRACE(c.op + " " + DTypeName(dtype));
      ir::Model m;
      m.opsets[""] = 13;
      m.graph.inputs.push_back({"x", dtype, std::vector<ir::Dim>{{-1, "N"}, {6}, {11}, {9}}});
      m.graph.outputs.push_back({"y", dtype, std::nullopt});
      ir::Node n = MakeNode("pool", c.op, {"x"}, {"y"});
      if (!c.kernel.empty()) {
        n.attributes["kernel_shape"] = Ints(c.kernel);
        n.attributes["strides"] = Ints(c.strides);
        n.attributes["pads"] = Ints(c.pads);
        if (c.op == "MaxPool") n.attributes["dilations"] = Ints(c.dilations);
        n.attributes["ceil_mode"] = testing::Int(c.ceil_mode);
      }
      m.graph.nodes.push_back(n);
      // The same op, channels-last, between two Transposes.
      ir::Model last = m;
      last.opsets["com.seqto"] = 1;
      last.graph.nodes.clear();
      ir::Node to = MakeNode("to", "Transpose", {"x"}, {"x_nhwc"});
      to.attributes["perm"] = Ints({0, 2, 3, 1});
      ir::Node pl = n;
      pl.domain = "com.seqto";
      pl.inputs = {"x_nhwc"};
      pl.outputs = {"y_nhwc"};
      pl.attributes["channels_last"] = testing::Int(1);
      ir::Node back = MakeNode("back", "Transpose", {"y_nhwc"}, {"y"});
      back.attributes["perm"] = Ints({0, 3, 1, 2});
      last.graph.nodes = {to, pl, back};
      Tensor x = RandomTensor({2, 6, 11, 9}, rng, -100.f, 100.f);
      if (dtype != DType::kFloat32) {
        Tensor q(dtype, x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) {
          const float v = x.data<float>()[i];
          if (dtype == DType::kUInt8)
            q.data<uint8_t>()[i] = static_cast<uint8_t>(v + 128.f);
          else
            q.data<int8_t>()[i] = static_cast<int8_t>(v);
        }
        x = q;
      }
      const TensorMap feeds{{"x", x}};
      SessionOptions plain;
      plain.optimize = false;
      plain.reference_only = true;
      const Tensor want = RunModel(m, plain, feeds).at("y");
      for (bool reference : {false, true}) {
        SessionOptions o;
        o.optimize = false;
        o.reference_only = reference;
        const Tensor got = RunModel(last, o, feeds).at("y");
        if (dtype == DType::kFloat32)
          ExpectClose(want, got, reference ? "reference" : "fast");
        else
          EXPECT_EQ(want.ToDoubles(), got.ToDoubles()) << (reference ? "reference" : "fast");
      }
    }
}

// A selectively quantized CNN: groups left in float between int8 regions. The float
// islands (DequantizeLinear -> float conv -> QuantizeLinear) stay inside the
// channels-last region (no Transposes around them), and the result is what the
// channels-first graph computes.
// With int16 or float16 fallbacks too: their constant weights are folded to float
// (rewrite/fold_constant_weights.cc), so their convs run channels-last as well.
TEST(ChannelsLast, FloatIslandsStayInsideTheInt8Region) {
  auto x = testing::ExampleSampleInput();
  ASSERT_TRUE(x.ok()) << x.error().message;
  for (const std::string name : {"resnet", "mobilenetv2"})
    for (quant::Fallback fallback : {quant::Fallback::kFloat, quant::Fallback::kInt16, quant::Fallback::kFloat16}) {
      SCOPED_TRACE(name + " fallback " + std::to_string(static_cast<int>(fallback)));
      auto model = onnxio::LoadModel(std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/" + name + ".onnx");
      ASSERT_TRUE(model.ok()) << model.error().message;
      auto mixed = testing::QuantizeForTest(*model, *x, {1, 3, 4}, fallback);
      ASSERT_TRUE(mixed.ok()) << mixed.error().message;
      ir::Graph g = mixed->graph;
      ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
      int float_convs = 0;
      for (const auto& n : g.nodes)
        if (n.op_type == "FusedConv") {
          ++float_convs;
          EXPECT_TRUE(n.has_attr("channels_last")) << n.name;
        }
      EXPECT_GE(float_convs, 3);
      std::string transposes;
      for (const auto& n : g.nodes)
        if (n.op_type == "Transpose") transposes += " " + n.name;
      EXPECT_EQ(Count(g, "Transpose"), 1) << "only the pooled tail leaves the region:" << transposes;
      const TensorMap feeds{{mixed->graph.inputs.at(0).name, *x}};
      for (bool reference : {true, false}) {
        SCOPED_TRACE(reference ? "exact paths" : "oneDNN paths");
        SessionOptions first, last;
        first.channels_last = false;
        first.reference_only = last.reference_only = reference;
        const auto a = RunModel(*mixed, first, feeds).begin()->second.ToDoubles();
        const auto b = RunModel(*mixed, last, feeds).begin()->second.ToDoubles();
        ASSERT_EQ(a.size(), b.size());
        const double quantum = testing::SmallestGap(a);
        double max_diff = 0;
        for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
        // Float convs in another layout sum in another order: a float difference can
        // move a value across a rounding boundary of the next quantization.
        EXPECT_LE(max_diff, 3 * quantum + 1e-6) << "quantum " << quantum;
      }
    }
}

// The input's QuantizeLinear writing channels-last equals QuantizeLinear and a
// Transpose, bit for bit, on the fast and the reference path.
TEST(ChannelsLast, QuantizeToChannelsLastEqualsQuantizeThenTranspose) {
  std::mt19937 rng(10);
  // 3 channels (an image input: the kernel's vectorized interleave) and 5 (its general
  // loop); 13 x 70 positions end in a partial block.
  for (int64_t channels : {3, 5})
    for (DType type : {DType::kUInt8, DType::kInt8}) {
      ir::Model m;
      m.opsets[""] = 13;
      m.opsets["com.seqto"] = 1;
      m.graph.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {channels}, {13}, {70}}});
      m.graph.outputs.push_back({"y", type, std::nullopt});
      m.graph.initializers["s"] = Tensor::Scalar<float>(0.031f);
      Tensor zp(type, {});
      if (type == DType::kUInt8) zp.data<uint8_t>()[0] = 117;
      m.graph.initializers["zp"] = zp;
      ir::Model fused = m;
      ir::Node q = MakeNode("q", "QuantizeLinear", {"x", "s", "zp"}, {"q"});
      ir::Node t = MakeNode("t", "Transpose", {"q"}, {"y"});
      t.attributes["perm"] = Ints({0, 2, 3, 1});
      m.graph.nodes = {q, t};
      ir::Node f = MakeNode("f", "QuantizeLinear", {"x", "s", "zp"}, {"y"});
      f.domain = "com.seqto";
      f.attributes["to_channels_last"] = testing::Int(1);
      fused.graph.nodes = {f};
      Tensor x = RandomTensor({2, channels, 13, 70}, rng, -5.f, 5.f);
      x.data<float>()[5] = std::nanf("");
      x.data<float>()[6] = 0.031f * 2.5f;  // a tie
      const TensorMap feeds{{"x", x}};
      SessionOptions plain;
      plain.optimize = false;
      const auto want = RunModel(m, plain, feeds).at("y");
      for (bool reference : {false, true}) {
        SessionOptions o = plain;
        o.reference_only = reference;
        const auto got = RunModel(fused, o, feeds).at("y");
        EXPECT_EQ(want.shape(), got.shape());
        EXPECT_EQ(want.ToDoubles(), got.ToDoubles())
            << DTypeName(type) << " C=" << channels << (reference ? " reference" : " fast");
      }
    }
}

// A per-channel constant ([1, C, 1, 1]: a bias or scale an exporter wrote as its own
// op) between two convs joins the region as its [1, 1, 1, C] twin: no Transposes
// around it.
TEST(ChannelsLast, PerChannelConstantsJoinTheRegion) {
  std::mt19937 rng(12);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {8}, {6}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  g.initializers["w1"] = RandomTensor({5, 3, 3, 3}, rng);
  g.initializers["w2"] = RandomTensor({4, 5, 1, 1}, rng);
  g.initializers["bias"] = RandomTensor({1, 5, 1, 1}, rng);
  g.initializers["scale"] = RandomTensor({1, 5, 1, 1}, rng);
  ir::Node c1 = MakeNode("c1", "Conv", {"x", "w1"}, {"a"});
  c1.attributes["pads"] = Ints({1, 1, 1, 1});
  g.nodes.push_back(c1);
  g.nodes.push_back(MakeNode("relu", "Relu", {"a"}, {"r"}));
  g.nodes.push_back(MakeNode("add", "Add", {"r", "bias"}, {"s"}));
  g.nodes.push_back(MakeNode("mul", "Mul", {"scale", "s"}, {"t"}));
  ir::Node c2 = MakeNode("c2", "Conv", {"t", "w2"}, {"y"});
  g.nodes.push_back(c2);
  ir::Graph opt = g;
  ASSERT_TRUE(rewrite::Optimize(opt, {}).ok());
  EXPECT_EQ(Count(opt, "Transpose"), 2) << "the input and the output only";
  for (const auto& n : opt.nodes)
    if (n.op_type == "Add" || n.op_type == "Mul") {
      const bool reads_twin = std::count(n.inputs.begin(), n.inputs.end(), "bias/nhwc") +
                                  std::count(n.inputs.begin(), n.inputs.end(), "scale/nhwc") ==
                              1;
      EXPECT_TRUE(reads_twin) << n.name;
    }
  ASSERT_TRUE(opt.initializers.count("bias/nhwc"));
  EXPECT_EQ(opt.initializers.at("bias/nhwc").shape(), (Shape{1, 1, 1, 5}));
  const TensorMap feeds{{"x", RandomTensor({2, 3, 8, 6}, rng)}};
  const TensorMap want = RunModel(m, Plain(), feeds);
  for (bool reference : {false, true}) {
    SessionOptions o;
    o.reference_only = reference;
    ExpectClose(want.at("y"), RunModel(m, o, feeds).at("y"), reference ? "reference" : "fast");
  }
}

// The int8 global average pool on channels-last data (channels in blocks, split
// across threads, int32 sums) equals the channels-first kernel bit for bit: 150
// channels (a partial last block), both 8-bit types, zero points.
TEST(ChannelsLast, QLinearGlobalAveragePoolMatchesChannelsFirst) {
  std::mt19937 rng(15);
  for (DType dtype : {DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(dtype));
    const bool u8 = dtype == DType::kUInt8;
    ir::Model m;
    m.opsets[""] = 13;
    m.opsets["com.seqto"] = 1;
    auto& g = m.graph;
    g.inputs.push_back({"x", dtype, std::vector<ir::Dim>{{-1, "N"}, {150}, {11}, {9}}});
    g.outputs.push_back({"y", dtype, std::nullopt});
    g.initializers["xs"] = Tensor::Scalar<float>(0.05f);
    g.initializers["ys"] = Tensor::Scalar<float>(0.02f);
    g.initializers["xz"] = u8 ? Tensor::Scalar<uint8_t>(100) : Tensor::Scalar<int8_t>(-7);
    g.initializers["yz"] = u8 ? Tensor::Scalar<uint8_t>(30) : Tensor::Scalar<int8_t>(5);
    g.nodes.push_back(MakeNode("gap", "QLinearGlobalAveragePool", {"x", "xs", "xz", "ys", "yz"}, {"y"}, "com.seqto"));
    ir::Model last = m;
    ir::Node to = MakeNode("to", "Transpose", {"x"}, {"x_nhwc"});
    to.attributes["perm"] = Ints({0, 2, 3, 1});
    ir::Node pool = g.nodes[0];
    pool.inputs[0] = "x_nhwc";
    pool.outputs = {"y_nhwc"};
    pool.attributes["channels_last"] = testing::Int(1);
    ir::Node back = MakeNode("back", "Transpose", {"y_nhwc"}, {"y"});
    back.attributes["perm"] = Ints({0, 3, 1, 2});
    last.graph.nodes = {to, pool, back};
    Tensor x(dtype, {2, 150, 11, 9});
    std::uniform_int_distribution<int> d(0, 255);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (u8)
        x.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
      else
        x.data<int8_t>()[i] = static_cast<int8_t>(d(rng) - 128);
    }
    const TensorMap feeds{{"x", x}};
    SessionOptions o;
    o.optimize = false;
    const Tensor want = RunModel(m, o, feeds).at("y");
    const Tensor got = RunModel(last, o, feeds).at("y");
    EXPECT_EQ(want.shape(), got.shape());
    EXPECT_EQ(want.ToDoubles(), got.ToDoubles());
  }
}

// The whole neck and head stays channels-last: the Resizes (their scales permuted),
// the Concat, the ConvTransposes and the BatchNormalization (as a depthwise 1x1 conv)
// join the region, and the optimized graph computes what the plain one does.
TEST(ChannelsLast, DetectorHeadRunsChannelsLast) {
  std::mt19937 rng(13);
  const ir::Model m = testing::DetectorHeadModel(rng);
  ir::Graph g = m.graph;
  ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
  std::string transposes;
  for (const auto& n : g.nodes)
    if (n.op_type == "Transpose") transposes += " " + n.name;
  EXPECT_EQ(Count(g, "Transpose"), 2) << "the input and the output only:" << transposes;
  EXPECT_EQ(Count(g, "BatchNormalization"), 0) << "a channels-last depthwise 1x1 conv";
  EXPECT_EQ(Count(g, "Relu"), 0) << "every Relu is a conv's activation, the BatchNormalization's too";
  EXPECT_EQ(Count(g, "Add"), 1) << "the bias Add after the ConvTranspose folds into it; the FPN's Add stays";
  EXPECT_EQ(Count(g, "ConvTranspose"), 2);
  EXPECT_EQ(Count(g, "Resize"), 2);
  for (const auto& n : g.nodes) {
    if (n.op_type == "ConvTranspose") {
      EXPECT_EQ(n.domain, "com.seqto") << n.name;
      EXPECT_EQ(n.attr_int("channels_last", 0).value(), 1) << n.name;
    }
    if (n.op_type == "Resize") {
      ASSERT_TRUE(g.initializers.count(n.inputs[2])) << n.name;
      EXPECT_EQ(g.initializers.at(n.inputs[2]).ToDoubles(), (std::vector<double>{1, 2, 2, 1})) << n.name;
    }
  }
  EXPECT_EQ(m.graph.initializers.at("up2").ToDoubles(), (std::vector<double>{1, 1, 2, 2}))
      << "the model's tensor is untouched (tensors share storage)";
  for (int64_t batch : {1, 2}) {
    const TensorMap feeds{{"x", RandomTensor({batch, 3, 8, 6}, rng)}};
    const TensorMap want = RunModel(m, Plain(), feeds);
    for (bool reference : {false, true}) {
      SessionOptions o;
      o.reference_only = reference;
      ExpectClose(want.at("y"), RunModel(m, o, feeds).at("y"), reference ? "y (reference)" : "y (fast)");
    }
  }
}

// A Resize given sizes joins the region when the graph declares its input's
// channels (the sizes must keep them), its sizes permuted; without the declaration it
// stays channels-first behind Transposes. Linear mode, so the twin's interpolation
// runs over the channels-last axes.
TEST(ChannelsLast, ResizeWithSizesKeepsTheChannels) {
  for (bool declared : {true, false}) {
    SCOPED_TRACE(declared ? "channels declared" : "no shape information");
    std::mt19937 rng(16);
    ir::Model m;
    m.opsets[""] = 13;
    auto& g = m.graph;
    g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{1}, {3}, {8}, {6}}});
    g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
    g.initializers["w1"] = RandomTensor({4, 3, 3, 3}, rng);
    g.initializers["w2"] = RandomTensor({2, 4, 1, 1}, rng);
    g.initializers["roi"] = Tensor(DType::kFloat32, {0});
    g.initializers["no_scales"] = Tensor(DType::kFloat32, {0});
    g.initializers["sizes"] = Tensor::FromVector<int64_t>({4}, {1, 4, 13, 9});
    ir::Node c1 = MakeNode("c1", "Conv", {"x", "w1"}, {"a"});
    c1.attributes["pads"] = Ints({1, 1, 1, 1});
    g.nodes.push_back(c1);
    ir::Node r = MakeNode("resize", "Resize", {"a", "roi", "no_scales", "sizes"}, {"up"});
    r.attributes["mode"] = testing::String("linear");
    g.nodes.push_back(r);
    g.nodes.push_back(MakeNode("c2", "Conv", {"up", "w2"}, {"y"}));
    if (declared) g.value_infos.push_back({"a", DType::kFloat32, std::vector<ir::Dim>{{1}, {4}, {8}, {6}}});
    ir::Graph opt = g;
    ASSERT_TRUE(rewrite::Optimize(opt, {}).ok());
    EXPECT_EQ(Count(opt, "Transpose"), declared ? 2 : 4);
    for (const auto& n : opt.nodes) {
      if (n.op_type == "Resize" && declared) {
        EXPECT_EQ(opt.initializers.at(n.inputs[3]).ToDoubles(), (std::vector<double>{1, 13, 9, 4}));
      }
    }
    const TensorMap feeds{{"x", RandomTensor({1, 3, 8, 6}, rng)}};
    const TensorMap want = RunModel(m, Plain(), feeds);
    for (bool reference : {false, true}) {
      SessionOptions o;
      o.reference_only = reference;
      ExpectClose(want.at("y"), RunModel(m, o, feeds).at("y"), reference ? "reference" : "fast");
    }
  }
}

// Quantized, the nearest Resize runs on the 8-bit data (DequantizeLinear -> Resize ->
// QuantizeLinear with one scale and zero point is the Resize of the integers, exactly),
// and the region still has Transposes only at its borders.
TEST(ChannelsLast, QuantizedDetectorHeadResizesIntegers) {
  std::mt19937 rng(14);
  const ir::Model m = testing::DetectorHeadModel(rng);
  const Tensor calib = RandomTensor({4, 3, 8, 6}, rng);
  auto q = testing::QuantizeForTest(m, calib);
  ASSERT_TRUE(q.ok()) << q.error().message;
  ir::Graph g = q->graph;
  ASSERT_TRUE(rewrite::Optimize(g, {}).ok());
  std::map<std::string, const ir::Node*> producers;
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) producers[o] = &n;
  int nearest = 0;
  for (const auto& n : g.nodes)
    if (n.op_type == "Resize" && n.attr_string("mode", "nearest").value() == "nearest") {
      ++nearest;
      const ir::Node* p = producers.count(n.inputs[0]) ? producers.at(n.inputs[0]) : nullptr;
      ASSERT_TRUE(p) << n.name;
      EXPECT_NE(p->op_type, "DequantizeLinear") << n.name << " reads float data";
    }
  EXPECT_EQ(nearest, 1);
  std::string transposes;
  for (const auto& n : g.nodes)
    if (n.op_type == "Transpose") transposes += " " + n.name;
  EXPECT_LE(Count(g, "Transpose"), 1) << "the output only (the input is quantized channels-last):" << transposes;
  const TensorMap feeds{{q->graph.inputs.at(0).name, RandomTensor({2, 3, 8, 6}, rng)}};
  SessionOptions unfused;
  unfused.optimize = false;
  unfused.reference_only = true;
  const auto want = RunModel(*q, unfused, feeds).begin()->second.ToDoubles();
  for (bool reference : {true, false}) {
    SessionOptions o;
    o.reference_only = reference;
    const auto got = RunModel(*q, o, feeds).begin()->second.ToDoubles();
    ASSERT_EQ(want.size(), got.size());
    const double quantum = testing::SmallestGap(want);
    double max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, std::fabs(want[i] - got[i]));
    // Integer convs requantize an exact sum, the unfused graph rounds a float one
    // (one quantum where a value is near a tie), and that can carry through a layer.
    EXPECT_LE(max_diff, 3 * quantum + 1e-6) << (reference ? "reference" : "fast") << ", quantum " << quantum;
  }
}

}  // namespace
}  // namespace seqto
