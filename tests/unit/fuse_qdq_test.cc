// QDQ fusion (rewrite/fuse_qdq.cc): QDQ models built here, on odd shapes, with
// quantization parameters calibrated on the float values they quantize (as a
// quantizer would), run three ways:
//   reference: SessionOptions::optimize = false, the unfused graph in float
//              (DequantizeLinear -> float op -> QuantizeLinear)
//   fused:     the default session (the pass replaces the chain by an int8 op)
//   fused, reference kernels: the same fused graph with reference_only kernels
// and the integer outputs of both fused runs compared with the reference:
//   - activations (clamp), QLinearAdd, QLookup and the data-movement ops reproduce
//     the float arithmetic exactly: equal;
//   - Conv / MatMul / Gemm / GlobalAveragePool requantize an exact integer sum,
//     where the float path rounds a float sum (with its own rounding error) before
//     dividing by the output scale. Where the real value lies within that rounding
//     error of a .5 tie, the two round to neighbouring integers: at most one quantum
//     apart, on a small fraction of elements (rounding errors of ~1e-6 relative
//     against a tie band of width 1 give about 1e-4 of the elements). The tests
//     assert |diff| <= 1 on fewer than 1% of the elements.
//   - com.seqto.QLinearConv's native (oneDNN) path and its exact path: equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "core/npy.h"
#include "onnxio/model_io.h"
#include "ops/quant/quant_util.h"
#include "quant/quantize.h"
#include "quantized_examples.h"
#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::Float;
using testing::Int;
using testing::Ints;
using testing::RandomTensor;

using runtime::Session;
using runtime::SessionOptions;
using runtime::TensorMap;

// --- quantization parameters -----------------------------------------------------

struct QP {
  float scale = 1.f;
  int32_t zp = 0;
  DType type = DType::kUInt8;
};

int32_t QMin(DType t) { return t == DType::kUInt8 ? 0 : -128; }
int32_t QMax(DType t) { return t == DType::kUInt8 ? 255 : 127; }

// ONNX Runtime's asymmetric parameters for the real range [lo, hi] (docs/design.md, Scale and zero point).
QP Asymmetric(double lo, double hi, DType type) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  QP p;
  p.type = type;
  p.scale = static_cast<float>((hi - lo) / (QMax(type) - QMin(type)));
  if (p.scale < std::numeric_limits<float>::min()) return {1.f, 0, type};
  p.zp = static_cast<int32_t>(std::clamp<double>(std::nearbyint(QMin(type) - lo / p.scale), QMin(type), QMax(type)));
  return p;
}

Tensor ZeroPoint(const QP& p) {
  Tensor t(p.type, {});
  if (p.type == DType::kUInt8)
    t.data<uint8_t>()[0] = static_cast<uint8_t>(p.zp);
  else
    t.data<int8_t>()[0] = static_cast<int8_t>(p.zp);
  return t;
}

// --- a QDQ model builder -----------------------------------------------------------

// Builds a float graph step by step and quantizes it the way ORT's quantizer does:
// Q -> DQ per activation (calibrated on the float value, here by running the graph
// built so far on the test input), int8 weights with a DQ, int32 bias with a DQ.
class QdqBuilder {
 public:
  explicit QdqBuilder(uint32_t seed) : rng_(seed) { model_.opsets[""] = 13; }

  std::string Input(const std::string& name, Shape shape) {
    ir::ValueInfo v;
    v.name = name;
    v.dtype = DType::kFloat32;
    v.shape.emplace();
    for (int64_t d : shape) v.shape->push_back(ir::Dim{d, ""});
    g().inputs.push_back(v);
    inputs_[name] = RandomTensor(shape, rng_, -1.f, 1.5f);
    return name;
  }

  std::string Node(const std::string& op, std::vector<std::string> in, std::map<std::string, ir::Attribute> attrs = {},
                   const std::string& domain = "") {
    ir::Node n;
    n.name = op + "_" + std::to_string(g().nodes.size());
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = {n.name + "_out"};
    n.attributes = std::move(attrs);
    g().nodes.push_back(n);
    return n.outputs[0];
  }

  std::string Const(const std::string& name, Tensor t) {
    g().initializers[name] = std::move(t);
    return name;
  }

  // The value's range on the test input, from a float run of the graph so far.
  std::pair<float, float> Range(const std::string& value) {
    ir::Model m = model_;
    m.graph.outputs = {{value, DType::kUndefined, std::nullopt}};
    SessionOptions o;
    o.optimize = false;
    auto s = Session::Create(m, o);
    EXPECT_TRUE(s.ok()) << s.error().message;
    auto out = (*s)->Run(inputs_);
    EXPECT_TRUE(out.ok()) << out.error().message;
    const auto v = out->at(value).ToDoubles();
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return {static_cast<float>(*lo), static_cast<float>(*hi)};
  }
  QP Calibrate(const std::string& value, DType type) {
    auto [lo, hi] = Range(value);
    return Asymmetric(lo, hi, type);
  }

  // QuantizeLinear with parameters p; returns the integer value.
  std::string Q(const std::string& x, const QP& p) {
    const std::string s = Const(x + "_scale", Tensor::Scalar<float>(p.scale));
    const std::string z = Const(x + "_zp", ZeroPoint(p));
    return Node("QuantizeLinear", {x, s, z});
  }
  std::string DQ(const std::string& q, const QP& p) {
    const std::string s = Const(q + "_dq_scale", Tensor::Scalar<float>(p.scale));
    const std::string z = Const(q + "_dq_zp", ZeroPoint(p));
    return Node("DequantizeLinear", {q, s, z});
  }
  // Q -> DQ calibrated on x; returns the DQ output, its parameters in *params.
  std::string QDQ(const std::string& x, DType type, QP* params = nullptr) {
    const QP p = Calibrate(x, type);
    if (params) *params = p;
    return DQ(Q(x, p), p);
  }

  // A random weight quantized to `type` per tensor (axis -1) or along `axis`
  // (symmetric int8, or uint8 with zero point 128), with its DequantizeLinear.
  std::string Weight(Shape shape, int64_t axis, DType type, std::vector<float>* scales_out = nullptr) {
    const Tensor w = RandomTensor(shape, rng_, -0.5f, 0.5f);
    const int64_t channels = axis < 0 ? 1 : shape[axis];
    int64_t inner = 1;
    if (axis >= 0)
      for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
    std::vector<float> max_abs(channels, 0.f);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const int64_t c = axis < 0 ? 0 : (i / inner) % channels;
      max_abs[c] = std::max(max_abs[c], std::fabs(w.data<float>()[i]));
    }
    std::vector<float> scales(channels);
    for (int64_t c = 0; c < channels; ++c) scales[c] = max_abs[c] / 127.f;
    const int32_t zp = type == DType::kUInt8 ? 128 : 0;
    Tensor q(type, shape);
    for (int64_t i = 0; i < w.numel(); ++i) {
      const int64_t c = axis < 0 ? 0 : (i / inner) % channels;
      const int32_t v = static_cast<int32_t>(std::nearbyint(w.data<float>()[i] / scales[c])) + zp;
      if (type == DType::kUInt8)
        q.data<uint8_t>()[i] = static_cast<uint8_t>(v);
      else
        q.data<int8_t>()[i] = static_cast<int8_t>(v);
    }
    const std::string name = "w" + std::to_string(g().initializers.size());
    Const(name, q);
    Shape param_shape = axis < 0 ? Shape{} : Shape{channels};
    Tensor s = Tensor::FromVector<float>(param_shape, scales);
    Tensor z(type, param_shape);
    for (int64_t c = 0; c < channels; ++c) {
      if (type == DType::kUInt8) z.data<uint8_t>()[c] = 128;
    }
    const std::string dq = Node(
        "DequantizeLinear", {name, Const(name + "_scale", s), Const(name + "_zp", z)},
        axis < 0 ? std::map<std::string, ir::Attribute>{} : std::map<std::string, ir::Attribute>{{"axis", Int(axis)}});
    if (scales_out) *scales_out = scales;
    return dq;
  }

  // A bias of `count` values: int32 at scale x_scale * w_scale[j] with its DQ
  // (`scale_factor` != 1 makes the bias scale differ from that), or float.
  std::string Bias(int64_t count, float x_scale, const std::vector<float>& w_scales, bool quantized,
                   float scale_factor = 1.f) {
    const Tensor real = RandomTensor({count}, rng_, -0.3f, 0.3f);
    const std::string name = "b" + std::to_string(g().initializers.size());
    if (!quantized) return Const(name, real);
    std::vector<float> scales(count);
    Tensor q(DType::kInt32, {count});
    for (int64_t j = 0; j < count; ++j) {
      scales[j] = x_scale * w_scales[w_scales.size() == 1 ? 0 : j] * scale_factor;
      q.data<int32_t>()[j] = static_cast<int32_t>(std::nearbyint(real.data<float>()[j] / scales[j]));
    }
    Const(name, q);
    const bool per_channel = w_scales.size() > 1;
    Tensor s = per_channel ? Tensor::FromVector<float>({count}, scales) : Tensor::Scalar<float>(scales[0]);
    Tensor z(DType::kInt32, per_channel ? Shape{count} : Shape{});
    return Node(
        "DequantizeLinear", {name, Const(name + "_scale", s), Const(name + "_zp", z)},
        per_channel ? std::map<std::string, ir::Attribute>{{"axis", Int(0)}} : std::map<std::string, ir::Attribute>{});
  }

  // Ends the graph: Q calibrated on `calibrate_on` (default: x itself) with the
  // integer result as the graph output.
  std::string OutputQ(const std::string& x, DType type, const std::string& calibrate_on = "") {
    const QP p = Calibrate(calibrate_on.empty() ? x : calibrate_on, type);
    const std::string q = Q(x, p);
    g().outputs.push_back({q, type, std::nullopt});
    return q;
  }

  ir::Graph& g() { return model_.graph; }
  ir::Model& model() { return model_; }
  const TensorMap& inputs() const { return inputs_; }
  std::mt19937& rng() { return rng_; }

 private:
  ir::Model model_;
  TensorMap inputs_;
  std::mt19937 rng_;
};

// --- running and comparing ---------------------------------------------------------

// The op types of the optimized graph ("domain:op" for non-ONNX domains), with counts,
// without the layout pass (its Transposes are counted in channels_last_test.cc).
std::map<std::string, int> FusedOps(const ir::Model& m, rewrite::OptimizeOptions options = {}) {
  options.channels_last = false;
  // What QDQ fusion leaves stays visible: the weights' DequantizeLinears are not
  // folded (which would let fuse-conv turn the float Conv into a FusedConv).
  options.fold_constant_weights = false;
  ir::Graph g = m.graph;
  g.NameNodes();
  Status s = rewrite::Optimize(g, options);
  EXPECT_TRUE(s.ok()) << s.message();
  std::map<std::string, int> ops;
  for (const auto& n : g.nodes) ++ops[n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type];
  return ops;
}

std::vector<int64_t> RunInts(const ir::Model& m, const TensorMap& inputs, const SessionOptions& o) {
  auto s = Session::Create(m, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  if (!s.ok()) return {};
  auto out = (*s)->Run(inputs);
  EXPECT_TRUE(out.ok()) << out.error().message;
  if (!out.ok()) return {};
  const Tensor& y = out->at(m.graph.outputs.at(0).name);
  EXPECT_TRUE(y.dtype() == DType::kUInt8 || y.dtype() == DType::kInt8) << y.Describe();
  return y.ToInt64s();
}

struct Comparison {
  int64_t n = 0, diffs = 0, max_diff = 0;
};
Comparison Compare(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  Comparison c;
  c.n = static_cast<int64_t>(a.size());
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return c;
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t d = std::llabs(a[i] - b[i]);
    c.diffs += d != 0;
    c.max_diff = std::max(c.max_diff, d);
  }
  return c;
}

// The fused graph with its fast kernels and with its reference kernels, each
// against the unfused float reference.
struct FusedComparison {
  Comparison fast, reference_kernels;
};
FusedComparison CompareFused(const ir::Model& m, const TensorMap& inputs) {
  SessionOptions unfused;
  unfused.optimize = false;
  SessionOptions fused_ref;
  fused_ref.reference_only = true;
  const auto ref = RunInts(m, inputs, unfused);
  return {Compare(RunInts(m, inputs, {}), ref), Compare(RunInts(m, inputs, fused_ref), ref)};
}

void ExpectExact(const FusedComparison& fc) {
  for (const Comparison& c : {fc.fast, fc.reference_kernels}) {
    EXPECT_GT(c.n, 0);
    EXPECT_EQ(c.diffs, 0) << "of " << c.n << " elements (max diff " << c.max_diff << ")";
  }
}
// At most one quantum, on fewer than `percent`% of the elements (see the file
// comment; the cases have at least 200 output elements, so one tie may flip).
void ExpectWithinOneQuantum(const FusedComparison& fc, int percent = 1) {
  for (const Comparison& c : {fc.fast, fc.reference_kernels}) {
    EXPECT_GT(c.n, 0);
    EXPECT_LE(c.max_diff, 1);
    EXPECT_LT(c.diffs * 100, c.n * percent) << c.diffs << " of " << c.n << " elements differ";
  }
}

int Count(const std::map<std::string, int>& ops, const std::string& op) {
  auto it = ops.find(op);
  return it == ops.end() ? 0 : it->second;
}

// --- Conv --------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  Shape x;  // N, C, H, W
  int64_t m = 4, kh = 3, kw = 3, group = 1;
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  int64_t weight_axis = -1;  // -1 per tensor, 0 per output channel
  DType x_type = DType::kUInt8, w_type = DType::kInt8, y_type = DType::kUInt8;
  std::string bias = "";             // "", "int32", "float", "int32-other-scale"
  std::string act = "";              // "", "Relu", "Clip"
  bool calibrate_after_act = false;  // else on the conv output: the clamp then bites
};

std::vector<ConvCase> ConvCases() {
  std::vector<ConvCase> cases;
  auto add = [&](ConvCase c) { cases.push_back(std::move(c)); };
  add({.name = "plain", .x = {2, 3, 7, 9}, .m = 5});
  add({.name = "bias_relu", .x = {2, 3, 7, 9}, .m = 5, .bias = "int32", .act = "Relu"});
  add({.name = "stride_pad_perchannel",
       .x = {1, 5, 11, 8},
       .m = 7,
       .strides = {2, 2},
       .pads = {1, 0, 2, 1},
       .weight_axis = 0,
       .bias = "int32",
       .act = "Relu"});
  add({.name = "int8_activations_clip",
       .x = {2, 4, 9, 9},
       .m = 6,
       .pads = {1, 1, 1, 1},
       .weight_axis = 0,
       .x_type = DType::kInt8,
       .y_type = DType::kInt8,
       .bias = "int32",
       .act = "Clip"});
  add({.name = "groups",
       .x = {1, 6, 8, 7},
       .m = 9,
       .group = 3,
       .pads = {1, 1, 1, 1},
       .weight_axis = 0,
       .bias = "int32",
       .act = "Relu"});
  add({.name = "depthwise",
       .x = {2, 5, 9, 11},
       .m = 5,
       .group = 5,
       .strides = {2, 1},
       .pads = {1, 1, 1, 1},
       .weight_axis = 0,
       .bias = "int32",
       .act = "Clip"});
  add({.name = "pointwise_dilated",
       .x = {1, 7, 9, 9},
       .m = 3,
       .kh = 3,
       .kw = 3,
       .pads = {2, 2, 2, 2},
       .dilations = {2, 2},
       .bias = "int32"});
  add({.name = "one_by_one", .x = {3, 8, 5, 5}, .m = 11, .kh = 1, .kw = 1, .weight_axis = 0, .bias = "int32"});
  add({.name = "uint8_weights", .x = {1, 3, 8, 8}, .m = 4, .w_type = DType::kUInt8, .bias = "int32", .act = "Relu"});
  add({.name = "float_bias", .x = {1, 3, 9, 7}, .m = 6, .weight_axis = 0, .bias = "float", .act = "Relu"});
  add({.name = "bias_other_scale", .x = {1, 3, 9, 7}, .m = 6, .bias = "int32-other-scale"});
  add({.name = "relu_calibrated_after",
       .x = {2, 3, 7, 7},
       .m = 5,
       .bias = "int32",
       .act = "Relu",
       .calibrate_after_act = true});
  add({.name = "mixed_types",
       .x = {1, 4, 6, 10},
       .m = 5,
       .weight_axis = 0,
       .x_type = DType::kInt8,
       .y_type = DType::kUInt8,
       .bias = "int32",
       .act = "Clip"});
  return cases;
}

// x -> Q -> DQ -> Conv(DQ(w), DQ(b)) -> [act] -> Q -> y (integer graph output).
ir::Model ConvModel(const ConvCase& c, QdqBuilder& b) {
  const std::string x = b.Input("x", c.x);
  QP xq;
  const std::string xd = b.QDQ(x, c.x_type, &xq);
  std::vector<float> w_scales;
  const std::string w = b.Weight({c.m, c.x[1] / c.group, c.kh, c.kw}, c.weight_axis, c.w_type, &w_scales);
  std::vector<std::string> in = {xd, w};
  if (c.bias == "int32") in.push_back(b.Bias(c.m, xq.scale, w_scales, true));
  if (c.bias == "int32-other-scale") in.push_back(b.Bias(c.m, xq.scale, w_scales, true, 0.37f));
  if (c.bias == "float") in.push_back(b.Bias(c.m, xq.scale, w_scales, false));
  std::map<std::string, ir::Attribute> attrs = {{"strides", Ints(c.strides)},
                                                {"pads", Ints(c.pads)},
                                                {"dilations", Ints(c.dilations)},
                                                {"group", Int(c.group)},
                                                {"kernel_shape", Ints({c.kh, c.kw})}};
  const std::string conv = b.Node("Conv", in, attrs);
  std::string out = conv;
  if (c.act == "Relu") out = b.Node("Relu", {conv});
  if (c.act == "Clip") {
    auto [lo, hi] = b.Range(conv);
    // Bounds inside the conv's range so that both clamp.
    const std::string mn = b.Const("clip_min", Tensor::Scalar<float>(lo * 0.5f));
    const std::string mx = b.Const("clip_max", Tensor::Scalar<float>(hi * 0.6f));
    out = b.Node("Clip", {conv, mn, mx});
  }
  b.OutputQ(out, c.y_type, c.calibrate_after_act ? "" : conv);
  return b.model();
}

TEST(FuseQdq, ConvFusesAndMatchesTheFloatReference) {
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(c.name);
    QdqBuilder b(11);
    const ir::Model m = ConvModel(c, b);
    const auto ops = FusedOps(m);
    // The input's Q stays (float input); everything else is one integer conv.
    EXPECT_EQ(Count(ops, "QuantizeLinear"), 1);
    EXPECT_EQ(Count(ops, "DequantizeLinear"), 0);
    EXPECT_EQ(Count(ops, "Conv") + Count(ops, "Relu") + Count(ops, "Clip"), 0);
    EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 1);
    EXPECT_EQ(ops.size(), 2u);
    ExpectWithinOneQuantum(CompareFused(m, b.inputs()));
  }
}

// com.seqto.QLinearConv's native oneDNN path (requantizing inside the convolution)
// against its exact path (reference_only) on a larger conv: the same integers.
TEST(FuseQdq, NativeConvPathAgreesWithTheExactOne) {
  for (DType x_type : {DType::kUInt8, DType::kInt8}) {
    for (int64_t group : {1, 32}) {
      SCOPED_TRACE(DTypeName(x_type) + " group " + std::to_string(group));
      ConvCase c{.name = "large",
                 .x = {2, 32, 21, 19},
                 .m = 32,
                 .group = group,
                 .pads = {1, 1, 1, 1},
                 .weight_axis = 0,
                 .x_type = x_type,
                 .y_type = x_type,
                 .bias = "int32",
                 .act = "Relu"};
      QdqBuilder b(31);
      const ir::Model m = ConvModel(c, b);
      SessionOptions exact;
      exact.reference_only = true;
      const Comparison d = Compare(RunInts(m, b.inputs(), {}), RunInts(m, b.inputs(), exact));
      EXPECT_GT(d.n, 20000);
      EXPECT_EQ(d.diffs, 0) << "of " << d.n << " (max diff " << d.max_diff << ")";
    }
  }
}

// The native path adds y_zp after rounding, as the exact path and ONNX Runtime do:
// with power-of-two scales and x_scale * w_scale / y_scale = 1/16, one accumulator
// in 16 lands exactly on a .5 tie, and with an odd y_zp, adding y_zp before rounding
// half to even (oneDNN's destination zero point) moves every such tie by one. All
// values here are exact in float32, so the unfused float graph rounds the same ties
// the same way: the three runs must agree bit for bit.
TEST(FuseQdq, NativeConvPathRoundsTiesBeforeAddingTheZeroPoint) {
  for (DType y_type : {DType::kUInt8, DType::kInt8}) {
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(DTypeName(y_type) + (channels_last ? " channels last" : " channels first"));
      QdqBuilder b(41);
      const Shape xs{2, 8, 13, 11};
      const QP xq{1.f / 64, 64, DType::kUInt8};
      const std::string xd = b.DQ(b.Q(b.Input("x", xs), xq), xq);
      Tensor w(DType::kInt8, {16, 8, 1, 1});
      std::uniform_int_distribution<int> weight(-3, 3);
      for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(weight(b.rng()));
      const std::string wd =
          b.Node("DequantizeLinear", {b.Const("w", w), b.Const("w_scale", Tensor::Scalar<float>(1.f / 128)),
                                      b.Const("w_zp", Tensor::Scalar<int8_t>(0))});
      const std::string conv = b.Node("Conv", {xd, wd}, {{"kernel_shape", Ints({1, 1})}});
      const QP yq{1.f / 512, y_type == DType::kUInt8 ? 101 : -27, y_type};
      const std::string y = b.Q(conv, yq);
      b.g().outputs.push_back({y, y_type, std::nullopt});

      SessionOptions fast, exact, unfused;
      fast.channels_last = channels_last;
      exact.reference_only = true;
      unfused.optimize = false;
      const int64_t fast_runs = ops::quant::FastRuns();
      const auto got = RunInts(b.model(), b.inputs(), fast);
      if (ops::quant::ExactInt8Isa()) {
        EXPECT_GT(ops::quant::FastRuns(), fast_runs) << "the native path did not run";
      }
      const auto want = RunInts(b.model(), b.inputs(), unfused);
      const Comparison native = Compare(got, want);
      const Comparison reference = Compare(RunInts(b.model(), b.inputs(), exact), want);
      EXPECT_EQ(native.n, xs[0] * 16 * xs[2] * xs[3]);
      EXPECT_EQ(native.diffs, 0) << "of " << native.n << " (max diff " << native.max_diff << ")";
      EXPECT_EQ(reference.diffs, 0) << "of " << reference.n << " (max diff " << reference.max_diff << ")";
    }
  }
}

TEST(FuseQdq, FuseQdqOffKeepsTheGraph) {
  QdqBuilder b(3);
  const ir::Model m = ConvModel(ConvCases()[1], b);
  rewrite::OptimizeOptions off;
  off.fuse_qdq = false;
  const auto ops = FusedOps(m, off);
  EXPECT_EQ(Count(ops, "Conv"), 1);
  EXPECT_EQ(Count(ops, "DequantizeLinear"), 3);
  EXPECT_EQ(Count(ops, "QuantizeLinear"), 2);
}

// --- what blocks fusion ------------------------------------------------------------

TEST(FuseQdq, KeptValuesBlockFusion) {
  QdqBuilder b(5);
  const ir::Model m = ConvModel(ConvCases()[1], b);  // x -> Q -> DQ -> Conv(+b) -> Relu -> Q
  const ir::Graph& g = m.graph;
  auto output_of = [&](const std::string& op, int nth = 0) {
    for (const auto& n : g.nodes)
      if (n.op_type == op && nth-- == 0) return n.outputs[0];
    return std::string();
  };
  for (const std::string& kept :
       {output_of("Conv"), output_of("Relu"), output_of("DequantizeLinear", 0), output_of("DequantizeLinear", 1)}) {
    SCOPED_TRACE(kept);
    rewrite::OptimizeOptions options;
    options.keep_values = {kept};
    const auto ops = FusedOps(m, options);
    EXPECT_EQ(Count(ops, "Conv"), 1);
    EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 0);
    // The session honours keep_values the same way, and the kept value is observable.
    SessionOptions so;
    so.keep_values = {kept};
    auto s = Session::Create(m, so);
    ASSERT_TRUE(s.ok()) << s.error().message;
    bool seen = false;
    runtime::RunHooks hooks;
    hooks.observe = [&](const std::string& name, const Tensor&) { seen |= name == kept; };
    auto out = (*s)->Run(b.inputs(), &hooks);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_TRUE(seen);
  }
  // Keeping the Q's output (which the fused op produces) does not block.
  rewrite::OptimizeOptions options;
  options.keep_values = {g.outputs[0].name};
  EXPECT_EQ(Count(FusedOps(m, options), "com.seqto:QLinearConv"), 1);
}

TEST(FuseQdq, NonConstantScaleBlocksFusion) {
  QdqBuilder b(5);
  ir::Model m = ConvModel(ConvCases()[0], b);
  // The output Q's scale becomes a graph input.
  for (auto& n : m.graph.nodes) {
    if (n.op_type != "QuantizeLinear" || n.outputs[0] != m.graph.outputs[0].name) continue;
    m.graph.initializers.erase(n.inputs[1]);
    m.graph.inputs.push_back({n.inputs[1], DType::kFloat32, std::vector<ir::Dim>{}});
  }
  const auto ops = FusedOps(m);
  EXPECT_EQ(Count(ops, "Conv"), 1);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 0);
}

TEST(FuseQdq, ConvWithSeveralReadersIsNotFused) {
  QdqBuilder b(5);
  ir::Model m = ConvModel(ConvCases()[0], b);
  std::string conv_out;
  for (const auto& n : m.graph.nodes)
    if (n.op_type == "Conv") conv_out = n.outputs[0];
  // A second reader of the conv's float output.
  ir::Node extra;
  extra.name = "extra";
  extra.op_type = "Sigmoid";
  extra.inputs = {conv_out};
  extra.outputs = {"extra_out"};
  m.graph.nodes.push_back(extra);
  m.graph.outputs.push_back({"extra_out", DType::kFloat32, std::nullopt});
  const auto ops = FusedOps(m);
  EXPECT_EQ(Count(ops, "Conv"), 1);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 0);
}

TEST(FuseQdq, LeakyReluAfterConvIsNotFused) {
  // Q(leaky_relu(v)) is no clamp of Q(v): the chain must stay in float.
  QdqBuilder b(5);
  const std::string x = b.Input("x", {1, 3, 6, 6});
  QP xq;
  const std::string xd = b.QDQ(x, DType::kUInt8, &xq);
  const std::string conv = b.Node("Conv", {xd, b.Weight({4, 3, 3, 3}, -1, DType::kInt8)});
  b.OutputQ(b.Node("LeakyRelu", {conv}, {{"alpha", Float(0.1f)}}), DType::kUInt8);
  const auto ops = FusedOps(b.model());
  EXPECT_EQ(Count(ops, "Conv"), 1);
  EXPECT_EQ(Count(ops, "LeakyRelu"), 1);
}

// --- networks: shared Q/DQ, chains, fallbacks -----------------------------------------

// x -> Q/DQ -> conv1 -> Relu -> Q -> DQ -> conv2 -> Q/DQ -+-> Add -> Relu -> Q
//                                   \-> DQ -> conv3 -> Q/DQ -/
// Q outputs read by two DQs (as ORT's quantizer writes one DQ per consumer) and a
// DQ read by two convs, then a float fallback (Sigmoid) on one branch.
TEST(FuseQdq, SharedQuantizersAndChains) {
  for (bool dq_per_consumer : {false, true}) {
    SCOPED_TRACE(dq_per_consumer ? "one DQ per consumer" : "one shared DQ");
    QdqBuilder b(21);
    const std::string x = b.Input("x", {2, 3, 9, 9});
    QP xq;
    const std::string xd = b.QDQ(x, DType::kUInt8, &xq);
    std::vector<float> ws;
    const std::string w1 = b.Weight({6, 3, 3, 3}, 0, DType::kInt8, &ws);
    const std::string c1 = b.Node("Conv", {xd, w1, b.Bias(6, xq.scale, ws, true)}, {{"pads", Ints({1, 1, 1, 1})}});
    const std::string r1 = b.Node("Relu", {c1});
    const QP p1 = b.Calibrate(r1, DType::kUInt8);
    const std::string q1 = b.Q(r1, p1);
    const std::string d1a = b.DQ(q1, p1);
    const std::string d1b = dq_per_consumer ? b.DQ(q1, p1) : d1a;
    const std::string c2 =
        b.Node("Conv", {d1a, b.Weight({5, 6, 3, 3}, 0, DType::kInt8)}, {{"pads", Ints({1, 1, 1, 1})}});
    const std::string c3 = b.Node("Conv", {d1b, b.Weight({5, 6, 1, 1}, -1, DType::kInt8)});
    const std::string d2 = b.QDQ(c2, DType::kUInt8);
    const std::string d3 = b.QDQ(c3, DType::kUInt8);
    const std::string sum = b.Node("Add", {d2, d3});
    const std::string r2 = b.Node("Relu", {sum});
    // A float op on a DQ that something fused also reads: the DQ must stay.
    const std::string sig = b.Node("Sigmoid", {d3});
    b.g().outputs.push_back({sig, DType::kFloat32, std::nullopt});
    b.OutputQ(r2, DType::kUInt8, sum);
    // Move the integer output first (CompareFused reads outputs[0]).
    std::swap(b.g().outputs[0], b.g().outputs[1]);

    const auto ops = FusedOps(b.model());
    EXPECT_EQ(Count(ops, "Conv"), 0);
    EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 3);
    EXPECT_EQ(Count(ops, "com.seqto:QLinearAdd"), 1);
    EXPECT_EQ(Count(ops, "Sigmoid"), 1);
    EXPECT_EQ(Count(ops, "DequantizeLinear"), 1) << "only the Sigmoid's DQ stays";
    ExpectWithinOneQuantum(CompareFused(b.model(), b.inputs()));
  }
}

// --- MatMul and Gemm ---------------------------------------------------------------

TEST(FuseQdq, MatMulBecomesQLinearMatMul) {
  struct Case {
    std::string name;
    Shape a, b;
    bool b_const;
    int64_t axis;
    DType a_type;
  };
  for (const Case& c : std::vector<Case>{{"2d_per_tensor", {29, 7}, {7, 11}, true, -1, DType::kUInt8},
                                         {"batched_per_column", {2, 7, 9}, {9, 15}, true, 1, DType::kInt8},
                                         {"activations", {2, 9, 8}, {2, 8, 13}, false, -1, DType::kUInt8}}) {
    SCOPED_TRACE(c.name);
    QdqBuilder b(8);
    const std::string a = b.QDQ(b.Input("a", c.a), c.a_type);
    std::string bv;
    if (c.b_const)
      bv = b.Weight(c.b, c.axis, DType::kInt8);
    else
      bv = b.QDQ(b.Input("b", c.b), DType::kUInt8);
    b.OutputQ(b.Node("MatMul", {a, bv}), DType::kUInt8);
    const auto ops = FusedOps(b.model());
    EXPECT_EQ(Count(ops, "QLinearMatMul"), 1);
    EXPECT_EQ(Count(ops, "MatMul") + Count(ops, "DequantizeLinear"), 0);
    ExpectWithinOneQuantum(CompareFused(b.model(), b.inputs()));
  }
}

TEST(FuseQdq, GemmBecomesQGemm) {
  struct Case {
    std::string name;
    int64_t m, k, n;
    bool trans_b;
    int64_t axis;  // of the stored B; per output column = trans_b ? 0 : 1
    std::string bias, act;
    float beta;
    DType a_type;
  };
  for (const Case& c : std::vector<Case>{{"plain", 19, 17, 11, false, -1, "", "", 1.f, DType::kUInt8},
                                         {"linear_relu", 21, 33, 10, true, 0, "int32", "Relu", 1.f, DType::kUInt8},
                                         {"per_column_clip", 31, 20, 7, false, 1, "int32", "Clip", 1.f, DType::kInt8},
                                         {"float_bias_beta", 17, 9, 13, true, -1, "float", "", 0.5f, DType::kUInt8}}) {
    SCOPED_TRACE(c.name);
    QdqBuilder b(9);
    QP aq;
    const std::string a = b.QDQ(b.Input("a", {c.m, c.k}), c.a_type, &aq);
    std::vector<float> ws;
    const std::string w = b.Weight(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.axis, DType::kInt8, &ws);
    std::vector<std::string> in = {a, w};
    if (!c.bias.empty()) in.push_back(b.Bias(c.n, aq.scale, ws, c.bias == "int32"));
    const std::string gemm = b.Node("Gemm", in, {{"transB", Int(c.trans_b)}, {"beta", Float(c.beta)}});
    std::string out = gemm;
    if (c.act == "Relu") out = b.Node("Relu", {gemm});
    if (c.act == "Clip") {
      auto [lo, hi] = b.Range(gemm);
      out = b.Node("Clip", {gemm, b.Const("lo", Tensor::Scalar<float>(lo * 0.5f)),
                            b.Const("hi", Tensor::Scalar<float>(hi * 0.5f))});
    }
    b.OutputQ(out, DType::kUInt8, gemm);
    const auto ops = FusedOps(b.model());
    EXPECT_EQ(Count(ops, "com.seqto:QGemm"), 1);
    EXPECT_EQ(ops.size(), 2u) << "the input's Q and the QGemm";
    ExpectWithinOneQuantum(CompareFused(b.model(), b.inputs()));
  }
}

// --- exact fusions: Add, lookups, data movement -------------------------------------

// Add and Mul (QLinearAdd, QLinearMul): the same float operations as the unfused
// DQ -> op -> Q, so the integers are identical.
TEST(FuseQdq, AddAndMulAreExact) {
  struct Case {
    std::string name;
    Shape a, b;
    DType ta, tb, ty;
    std::string act;
  };
  for (const std::string op : {"Add", "Mul"})
    for (const Case& c : std::vector<Case>{
             {"same_shape", {2, 5, 7, 3}, {2, 5, 7, 3}, DType::kUInt8, DType::kUInt8, DType::kUInt8, ""},
             {"broadcast_relu", {2, 5, 7, 3}, {5, 1, 3}, DType::kInt8, DType::kUInt8, DType::kInt8, "Relu"},
             {"clip", {3, 1, 9}, {3, 4, 1}, DType::kUInt8, DType::kInt8, DType::kUInt8, "Clip"}}) {
      SCOPED_TRACE(op + " " + c.name);
      QdqBuilder b(13);
      const std::string a = b.QDQ(b.Input("a", c.a), c.ta);
      const std::string bb = b.QDQ(b.Input("b", c.b), c.tb);
      const std::string sum = b.Node(op, {a, bb});
      std::string out = sum;
      if (c.act == "Relu") out = b.Node("Relu", {sum});
      if (c.act == "Clip")
        out = b.Node("Clip",
                     {sum, b.Const("lo", Tensor::Scalar<float>(-0.2f)), b.Const("hi", Tensor::Scalar<float>(1.1f))});
      b.OutputQ(out, c.ty, sum);
      const auto ops = FusedOps(b.model());
      EXPECT_EQ(Count(ops, "com.seqto:QLinear" + op), 1);
      EXPECT_EQ(Count(ops, "QuantizeLinear"), 2) << "the inputs'";
      EXPECT_EQ(ops.size(), 2u);
      ExpectExact(CompareFused(b.model(), b.inputs()));
    }
}

TEST(FuseQdq, GlobalAveragePoolOnIntegers) {
  for (DType tx : {DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(tx));
    QdqBuilder b(29);
    const std::string x = b.QDQ(b.Input("x", {4, 67, 7, 5}), tx);
    b.OutputQ(b.Node("GlobalAveragePool", {x}), tx == DType::kUInt8 ? DType::kInt8 : DType::kUInt8);
    const auto ops = FusedOps(b.model());
    EXPECT_EQ(Count(ops, "com.seqto:QLinearGlobalAveragePool"), 1);
    EXPECT_EQ(ops.size(), 2u);
    ExpectWithinOneQuantum(CompareFused(b.model(), b.inputs()));
  }
}

TEST(FuseQdq, ActivationsBetweenQdqBecomeLookups) {
  for (const std::string act : {"Relu", "Clip", "LeakyRelu"}) {
    for (DType tx : {DType::kUInt8, DType::kInt8}) {
      SCOPED_TRACE(act + " " + DTypeName(tx));
      QdqBuilder b(17);
      const std::string x = b.QDQ(b.Input("x", {3, 7, 5}), tx);
      std::map<std::string, ir::Attribute> attrs;
      std::vector<std::string> in = {x};
      if (act == "LeakyRelu") attrs["alpha"] = Float(0.13f);
      if (act == "Clip")
        in = {x, b.Const("lo", Tensor::Scalar<float>(-0.4f)), b.Const("hi", Tensor::Scalar<float>(0.9f))};
      b.OutputQ(b.Node(act, in, attrs), tx == DType::kUInt8 ? DType::kInt8 : DType::kUInt8);
      const auto ops = FusedOps(b.model());
      EXPECT_EQ(Count(ops, "com.seqto:QLookup"), 1);
      EXPECT_EQ(ops.size(), 2u);
      ExpectExact(CompareFused(b.model(), b.inputs()));
    }
  }
}

TEST(FuseQdq, ReluWithTheSameParametersAtZeroPointMinimumIsIdentity) {
  // uint8 with zero point 0: Q(relu(DQ(q))) = q, so no lookup is needed.
  QdqBuilder b(2);
  const std::string x = b.Input("x", {4, 6});
  const QP p = Asymmetric(0.0, 2.0, DType::kUInt8);
  const std::string q = b.Q(b.Node("Relu", {x}), p);
  const std::string y = b.Q(b.Node("Relu", {b.DQ(q, p)}), p);
  b.g().outputs.push_back({y, DType::kUInt8, std::nullopt});
  const auto ops = FusedOps(b.model());
  EXPECT_EQ(Count(ops, "Identity"), 1);
  EXPECT_EQ(Count(ops, "DequantizeLinear"), 0);
  ExpectExact(CompareFused(b.model(), b.inputs()));
}

TEST(FuseQdq, DataMovementRunsOnIntegers) {
  struct Case {
    std::string op;
    Shape x;
    std::vector<std::string> extra;  // names of constant inputs made below
    std::map<std::string, ir::Attribute> attrs;
  };
  for (DType type : {DType::kUInt8, DType::kInt8}) {
    for (const Case& c : std::vector<Case>{
             {"Reshape", {2, 3, 5}, {"shape"}, {}},
             {"Transpose", {2, 3, 5, 4}, {}, {{"perm", Ints({0, 2, 3, 1})}}},
             {"Flatten", {2, 3, 5}, {}, {{"axis", Int(1)}}},
             {"Squeeze", {2, 1, 5}, {"axes1"}, {}},
             {"Unsqueeze", {2, 5}, {"axes1"}, {}},
             {"MaxPool",
              {2, 3, 7, 9},
              {},
              {{"kernel_shape", Ints({3, 2})}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 0, 1, 1})}}},
             {"Slice", {4, 9}, {"starts", "ends"}, {}},
             {"Gather", {5, 3}, {"indices"}, {{"axis", Int(0)}}},
             {"DepthToSpace", {1, 8, 3, 5}, {}, {{"blocksize", Int(2)}}},
             {"Concat", {2, 3, 5}, {}, {{"axis", Int(1)}}},
             {"Expand", {3, 1}, {"expand_shape"}, {}},
             {"Tile", {2, 3}, {"repeats"}, {}},
             {"SpaceToDepth", {1, 2, 4, 6}, {}, {{"blocksize", Int(2)}}},
             {"Identity", {3, 4}, {}, {}},
         }) {
      SCOPED_TRACE(c.op + " " + DTypeName(type));
      QdqBuilder b(19);
      QP p;
      const std::string x = b.QDQ(b.Input("x", c.x), type, &p);
      std::vector<std::string> in = {x};
      if (c.op == "Concat") in.push_back(x);
      for (const auto& e : c.extra) {
        if (e == "shape") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({2}, {5, 6})));
        if (e == "axes1") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({1}, {1})));
        if (e == "starts") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({2}, {1, 2})));
        if (e == "ends") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({2}, {3, 8})));
        if (e == "indices") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({4}, {4, 0, 2, 2})));
        if (e == "expand_shape") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({3}, {2, 3, 4})));
        if (e == "repeats") in.push_back(b.Const(e, Tensor::FromVector<int64_t>({2}, {2, 3})));
      }
      const std::string y = b.Node(c.op, in, c.attrs);
      // The same parameters on both sides (what a quantizer does for these ops).
      const std::string q = b.Q(y, p);
      b.g().outputs.push_back({q, type, std::nullopt});
      const auto ops = FusedOps(b.model());
      EXPECT_EQ(Count(ops, c.op), 1);
      EXPECT_EQ(Count(ops, "DequantizeLinear"), 0);
      EXPECT_EQ(Count(ops, "QuantizeLinear"), 1) << "only the input's";
      ExpectExact(CompareFused(b.model(), b.inputs()));
    }
  }
}

// Concat of inputs quantized each with its own parameters (a fire module's two
// expand convs): the inputs whose parameters differ from the output's are
// requantized by lookup tables, and the result equals the float path exactly.
TEST(FuseQdq, ConcatOfDifferentlyQuantizedInputsRequantizesByLookup) {
  for (DType type : {DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(type));
    QdqBuilder b(29);
    QP pa;
    const std::string a = b.QDQ(b.Input("a", {2, 3, 4, 5}), type, &pa);
    const std::string c = b.QDQ(b.Input("c", {2, 2, 4, 5}), type);  // its own range
    const std::string cat = b.Node("Concat", {a, c, a}, {{"axis", Int(1)}});
    b.OutputQ(cat, type);  // calibrated on the concatenation: other parameters again
    const auto ops = FusedOps(b.model());
    EXPECT_EQ(Count(ops, "Concat"), 1);
    // One lookup per input whose parameters differ from the output's (the output's
    // range covers both inputs, so at most one of them can share its parameters).
    EXPECT_GE(Count(ops, "com.seqto:QLookup"), 1);
    EXPECT_EQ(Count(ops, "DequantizeLinear"), 0);
    EXPECT_EQ(Count(ops, "QuantizeLinear"), 2) << "only the inputs'";
    ExpectExact(CompareFused(b.model(), b.inputs()));
  }
}

// MaxPool on uint8/int8 (the fast path ops/nn/pool.cc has for what this pass
// leaves) against the reference kernel: 1-3 spatial dims, strides, pads,
// dilations, ceil_mode, windows hanging over the edge.
TEST(FuseQdq, Int8MaxPoolFastPathMatchesReference) {
  struct Case {
    Shape x;
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil_mode;
  };
  for (DType type : {DType::kUInt8, DType::kInt8}) {
    for (const Case& c : std::vector<Case>{{{2, 3, 11, 13}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0},
                                           {{1, 5, 9, 8}, {2, 3}, {2, 1}, {0, 1, 1, 0}, {2, 1}, 1},
                                           {{2, 4, 17}, {4}, {3}, {2, 1}, {1}, 1},
                                           {{1, 2, 5, 6, 7}, {2, 3, 2}, {1, 2, 2}, {0, 1, 1, 1, 0, 1}, {1, 1, 2}, 0},
                                           {{1, 3, 7, 7}, {7, 7}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 0}}) {
      SCOPED_TRACE(DTypeName(type) + " " + ShapeToString(c.x));
      ir::Model m;
      m.opsets[""] = 13;
      m.graph.inputs.push_back({"x", type, std::nullopt});
      m.graph.outputs.push_back({"y", type, std::nullopt});
      ir::Node n;
      n.name = "pool";
      n.op_type = "MaxPool";
      n.inputs = {"x"};
      n.outputs = {"y"};
      n.attributes = {{"kernel_shape", Ints(c.kernel)},
                      {"strides", Ints(c.strides)},
                      {"pads", Ints(c.pads)},
                      {"dilations", Ints(c.dilations)},
                      {"ceil_mode", Int(c.ceil_mode)}};
      m.graph.nodes.push_back(n);
      Tensor x(type, c.x);
      std::mt19937 rng(static_cast<uint32_t>(c.x.size()));
      for (int64_t i = 0; i < x.numel(); ++i) static_cast<uint8_t*>(x.raw())[i] = static_cast<uint8_t>(rng());
      SessionOptions reference;
      reference.reference_only = true;
      const auto fast = RunInts(m, {{"x", x}}, {});
      const auto slow = RunInts(m, {{"x", x}}, reference);
      EXPECT_FALSE(fast.empty());
      EXPECT_EQ(fast, slow);
    }
  }
}

TEST(FuseQdq, DataMovementWithOtherParametersStaysFloat) {
  QdqBuilder b(19);
  const std::string x = b.QDQ(b.Input("x", {2, 3, 5}), DType::kUInt8);
  const std::string y = b.Node("Transpose", {x}, {{"perm", Ints({2, 1, 0})}});
  b.OutputQ(y, DType::kUInt8, "");  // recalibrated: same range, but force other params
  for (auto& n : b.g().nodes)
    if (n.op_type == "QuantizeLinear" && n.inputs[0] == y)
      b.g().initializers[n.inputs[1]] = Tensor::Scalar<float>(b.g().initializers[n.inputs[1]].data<float>()[0] * 1.5f);
  const auto ops = FusedOps(b.model());
  EXPECT_EQ(Count(ops, "DequantizeLinear"), 1);
  EXPECT_EQ(Count(ops, "QuantizeLinear"), 2);
}

// A small CNN quantized end to end: Conv-Relu, MaxPool, Conv, residual Add-Relu,
// GlobalAveragePool, Flatten, Gemm; the integer logits compared. A one-quantum tie flip in a conv
// moves one input of the next layer by one quantum, which rarely moves its outputs
// by one: the bound is one quantum on fewer than 5% of the logits.
TEST(FuseQdq, SmallNetworkMatchesTheFloatReference) {
  QdqBuilder b(23);
  QP xq;
  const std::string x = b.QDQ(b.Input("x", {8, 3, 16, 16}), DType::kUInt8, &xq);
  std::vector<float> ws;
  const std::string w1 = b.Weight({8, 3, 3, 3}, 0, DType::kInt8, &ws);
  const std::string c1 = b.Node("Conv", {x, w1, b.Bias(8, xq.scale, ws, true)}, {{"pads", Ints({1, 1, 1, 1})}});
  QP p1;
  const std::string r1 = b.QDQ(b.Node("Relu", {c1}), DType::kUInt8, &p1);
  const std::string mp =
      b.DQ(b.Q(b.Node("MaxPool", {r1}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}), p1), p1);
  QP p2 = p1;
  const std::string w2 = b.Weight({8, 8, 3, 3}, 0, DType::kInt8, &ws);
  const std::string c2 =
      b.QDQ(b.Node("Conv", {mp, w2, b.Bias(8, p2.scale, ws, true)}, {{"pads", Ints({1, 1, 1, 1})}}), DType::kUInt8);
  const std::string sum = b.Node("Add", {c2, mp});
  QP p3;
  const std::string r2 = b.QDQ(b.Node("Relu", {sum}), DType::kUInt8, &p3);
  const std::string gap = b.QDQ(b.Node("GlobalAveragePool", {r2}), DType::kUInt8);
  QP p4;
  const std::string flat = b.Node("Flatten", {gap});
  const std::string flat_dq = b.QDQ(flat, DType::kUInt8, &p4);
  const std::string w3 = b.Weight({10, 8}, 0, DType::kInt8, &ws);
  const std::string gemm = b.Node("Gemm", {flat_dq, w3, b.Bias(10, p4.scale, ws, true)}, {{"transB", Int(1)}});
  b.OutputQ(gemm, DType::kUInt8);
  const auto ops = FusedOps(b.model());
  EXPECT_EQ(Count(ops, "com.seqto:QGemm"), 1);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 2);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearAdd"), 1);
  EXPECT_EQ(Count(ops, "MaxPool"), 1);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearGlobalAveragePool"), 1);
  EXPECT_EQ(Count(ops, "Flatten"), 1);
  EXPECT_EQ(Count(ops, "DequantizeLinear") + Count(ops, "GlobalAveragePool"), 0);
  EXPECT_EQ(Count(ops, "Conv") + Count(ops, "Gemm") + Count(ops, "Add"), 0);
  ExpectWithinOneQuantum(CompareFused(b.model(), b.inputs()), 5);
}

// The bundled Fashion-MNIST ResNet, quantized by quant/ (static, per-channel, MinMax
// on the 8 sample images): every Conv, Add and the Gemm fuse, and the fused model's
// logits match the unfused float path's to within a few quanta, with the same class
// for every sample.
TEST(FuseQdq, QuantizedResNetFusesCompletely) {
  auto x = testing::ExampleSampleInput();
  ASSERT_TRUE(x.ok()) << x.error().message;
  auto qdq = testing::QuantizedExample("resnet", *x);
  ASSERT_TRUE(qdq.ok()) << qdq.error().message;
  const std::string input = qdq->graph.inputs.at(0).name;

  const auto ops = FusedOps(*qdq);
  EXPECT_EQ(Count(ops, "Conv") + Count(ops, "Add") + Count(ops, "Gemm"), 0);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearConv"), 11);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearAdd"), 4);
  EXPECT_EQ(Count(ops, "com.seqto:QGemm"), 1);
  EXPECT_EQ(Count(ops, "com.seqto:QLinearGlobalAveragePool"), 1);
  EXPECT_EQ(Count(ops, "QuantizeLinear"), 1) << "the input's";
  EXPECT_EQ(Count(ops, "DequantizeLinear"), 1) << "the logits'";

  SessionOptions unfused;
  unfused.optimize = false;
  auto ref = Session::Create(*qdq, unfused);
  auto fused = Session::Create(*qdq, {});
  ASSERT_TRUE(ref.ok() && fused.ok());
  auto a = (*ref)->Run({{input, *x}});
  auto b = (*fused)->Run({{input, *x}});
  ASSERT_TRUE(a.ok() && b.ok());
  const Tensor& la = a->begin()->second;
  const Tensor& lb = b->begin()->second;
  ASSERT_EQ(la.shape(), lb.shape());
  ASSERT_EQ(la.rank(), 2);
  // The logits' quantum: the smallest non-zero gap between two logits values.
  const auto va = la.ToDoubles(), vb = lb.ToDoubles();
  const double quantum = testing::SmallestGap(va);
  double max_diff = 0;
  for (size_t i = 0; i < va.size(); ++i) max_diff = std::max(max_diff, std::fabs(va[i] - vb[i]));
  EXPECT_LE(max_diff, 3 * quantum + 1e-6) << "quantum " << quantum;
  const int64_t classes = la.dim(1);
  for (int64_t n = 0; n < la.dim(0); ++n) {
    auto row_a = va.begin() + n * classes, row_b = vb.begin() + n * classes;
    EXPECT_EQ(std::max_element(row_a, row_a + classes) - row_a, std::max_element(row_b, row_b + classes) - row_b)
        << "sample " << n;
  }
}

// The internal ops check what the pass guarantees, so a hand-written model using them
// gets an error naming the node, not a crash.
TEST(FuseQdq, InternalOpsRejectBadAttributes) {
  ir::Model m;
  m.opsets[""] = 13;
  m.opsets["com.seqto"] = 1;
  m.graph.inputs.push_back({"x", DType::kUInt8, std::vector<ir::Dim>{{4}}});
  m.graph.outputs.push_back({"y", DType::kUInt8, std::nullopt});
  ir::Node n;
  n.name = "lut";
  n.op_type = "QLookup";
  n.domain = "com.seqto";
  n.inputs = {"x"};
  n.outputs = {"y"};
  n.attributes["table"] = Ints({1, 2, 3});
  n.attributes["x_type"] = Int(2);
  n.attributes["y_type"] = Int(2);
  m.graph.nodes.push_back(n);
  auto s = Session::Create(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("'lut'"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("'table' has 3 entries, expected 256"), std::string::npos) << s.error().message;

  // A valid table, then an int8 input where the table is for uint8.
  std::vector<int64_t> table(256);
  for (int k = 0; k < 256; ++k) table[k] = 255 - k;
  m.graph.nodes[0].attributes["table"] = Ints(table);
  auto ok = Session::Create(m);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  auto y = (*ok)->Run({{"x", Tensor::FromVector<uint8_t>({4}, {0, 1, 200, 255})}});
  ASSERT_TRUE(y.ok()) << y.error().message;
  EXPECT_EQ(y->at("y").ToInt64s(), (std::vector<int64_t>{255, 254, 55, 0}));
  m.graph.inputs[0].dtype = DType::kInt8;
  auto wrong = Session::Create(m);
  ASSERT_TRUE(wrong.ok());
  auto err = (*wrong)->Run({{"x", Tensor::FromVector<int8_t>({4}, {0, 1, 2, 3})}});
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message.find("uint8"), std::string::npos) << err.error().message;
}

}  // namespace
}  // namespace seqto
