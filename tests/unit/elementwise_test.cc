// Elementwise ops (ops/elementwise, ops/math) on what ONNX's backend tests cover
// poorly: broadcasting of odd shapes against a naive index computation (one and two
// threads), three-way Where, pre-opset-7 broadcasting, rounding half to even, the
// fast float32 approximations against the std:: reference kernels, integer
// semantics (wrap-around, division by zero), Cast's conversions, and bad inputs that
// must give an error (not a crash). Kernels are built straight from the op registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/registry.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::Float;
using testing::Int;
using testing::String;

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNanF = std::numeric_limits<float>::quiet_NaN();

// --- Harness -------------------------------------------------------------------

// A KernelContext over plain tensors. Outputs start filled with 0xff bytes so that an
// element a kernel forgets to write shows.
class TestContext final : public ops::KernelContext {
 public:
  TestContext(const std::vector<const Tensor*>& inputs, size_t outputs) {
    inputs_ = inputs;
    outputs_.resize(outputs);
    output_wanted_.assign(outputs, true);
  }
  Tensor& Allocate(int i, DType dtype, Shape shape) override {
    Tensor t(dtype, std::move(shape));
    if (t.nbytes() > 0) std::memset(t.raw(), 0xff, t.nbytes());
    outputs_[i] = std::move(t);
    return outputs_[i];
  }
  std::vector<Tensor>& outputs() { return outputs_; }
};

struct OpCall {
  std::string op;
  std::vector<Tensor> inputs;  // an undefined Tensor marks an omitted optional input
  std::map<std::string, ir::Attribute> attrs = {};
  int64_t opset = 17;
  bool reference_only = false;
};

// The op's output, or the error of building or running its kernel.
Expected<Tensor> TryRun(const OpCall& call) {
  ir::Node node;
  node.name = "n";
  node.op_type = call.op;
  node.attributes = call.attrs;
  for (size_t i = 0; i < call.inputs.size(); ++i)
    node.inputs.push_back(call.inputs[i].defined() ? "in" + std::to_string(i) : "");
  node.outputs = {"out"};
  const ops::OpDef* def = ops::OpRegistry::Global().Find("", call.op, call.opset);
  if (!def) return UserError(call.op + " is not registered at opset " + std::to_string(call.opset));
  ops::KernelInit init{node, call.opset, std::vector<const Tensor*>(call.inputs.size(), nullptr), call.reference_only};
  SEQTO_ASSIGN_OR_RETURN(auto kernel, def->create(init));
  std::vector<const Tensor*> ins;
  for (const Tensor& t : call.inputs) ins.push_back(t.defined() ? &t : nullptr);
  TestContext ctx(ins, 1);
  SEQTO_RETURN_IF_ERROR(kernel->Run(ctx));
  if (!ctx.outputs()[0].defined()) return InternalError("no output");
  return ctx.outputs()[0];
}

Tensor MustRun(const OpCall& call) {
  auto r = TryRun(call);
  EXPECT_TRUE(r.ok()) << call.op << ": " << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : Tensor();
}

Tensor Random(Shape shape, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

template <typename T>
Tensor Make(Shape shape, std::vector<T> values) {
  return Tensor::FromVector<T>(std::move(shape), values);
}

// Values equal within rtol/atol; NaN matches NaN, infinities match exactly.
void ExpectClose(const std::vector<double>& e, const Tensor& actual, double rtol, double atol,
                 const std::string& what) {
  const auto a = actual.ToDoubles();
  ASSERT_EQ(e.size(), a.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < e.size() && bad < 5; ++i) {
    bool ok;
    if (std::isnan(e[i]))
      ok = std::isnan(a[i]);
    else if (std::isinf(e[i]))
      ok = a[i] == e[i];
    else
      ok = std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i]);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": got " << a[i] << ", expected " << e[i];
    }
  }
}
void ExpectClose(const Tensor& expected, const Tensor& actual, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  ExpectClose(expected.ToDoubles(), actual, rtol, atol, what);
}
void ExpectExact(const std::vector<double>& expected, const Tensor& actual, const std::string& what) {
  ExpectClose(expected, actual, 0, 0, what);
}

// Numpy broadcasting, the obvious way: for every output index, the operand indices.
Shape BroadcastNaive(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] != 1) o = o == 1 ? s[i] : o;
    }
  return out;
}
int64_t SourceIndex(const Shape& s, const Shape& out, int64_t flat) {
  std::vector<int64_t> idx(out.size());
  for (size_t d = out.size(); d-- > 0;) {
    idx[d] = flat % out[d];
    flat /= out[d];
  }
  int64_t src = 0;
  for (size_t i = 0; i < s.size(); ++i) src = src * s[i] + (s[i] == 1 ? 0 : idx[out.size() - s.size() + i]);
  return src;
}

// Sets the thread count for one test and restores it after.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads) : saved_(NumThreads()) { SetNumThreads(threads); }
  ~ThreadsGuard() { SetNumThreads(saved_); }

 private:
  int saved_;
};

// --- Broadcasting --------------------------------------------------------------

struct ShapePair {
  Shape a, b;
};
const std::vector<ShapePair> kBroadcastCases = {
    {{2, 3, 4, 5}, {3, 1, 5}},
    {{1, 4, 1}, {3, 1, 2}},
    {{7}, {}},
    {{}, {2, 3}},
    {{5}, {2, 1, 5}},
    {{3, 1}, {1, 4}},
    {{2, 1, 3, 1}, {1, 5, 1, 7}},
    {{1, 1}, {1}},
    {{6, 1, 1, 4}, {6, 5, 1, 4}},
    {{0, 3}, {3}},
    {{2, 0}, {1, 1}},
    {{4, 3}, {4, 3}},
    {{1, 9, 1}, {9, 9}},
    // A per-channel row of a channels-last tensor, either side (tiled into blocks).
    {{2, 6, 7, 24}, {1, 1, 1, 24}},
    {{1, 1, 1, 24}, {2, 6, 7, 24}},
};

TEST(ElementwiseBroadcast, BinaryOpsOfOddShapesMatchNaive) {
  uint32_t seed = 1;
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    for (const auto& [sa, sb] : kBroadcastCases) {
      const Tensor a = Random(sa, seed++), b = Random(sb, seed++, 0.5f, 3.f);
      const Shape out = BroadcastNaive({sa, sb});
      const auto va = a.ToDoubles(), vb = b.ToDoubles();
      for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Less"}) {
        const Tensor y = MustRun({op, {a, b}});
        const std::string what = std::string(op) + " " + ShapeToString(sa) + " with " + ShapeToString(sb) +
                                 ", threads " + std::to_string(threads);
        ASSERT_EQ(y.shape(), out) << what;
        std::vector<double> expected(static_cast<size_t>(NumElements(out)));
        for (int64_t i = 0; i < NumElements(out); ++i) {
          const float x = static_cast<float>(va[SourceIndex(sa, out, i)]);
          const float z = static_cast<float>(vb[SourceIndex(sb, out, i)]);
          const std::string o = op;
          expected[i] = o == "Add"   ? x + z
                        : o == "Sub" ? x - z
                        : o == "Mul" ? x * z
                        : o == "Div" ? x / z
                        : o == "Max" ? std::max(x, z)
                        : o == "Min" ? std::min(x, z)
                                     : double(x < z);
        }
        ExpectExact(expected, y, what);
      }
    }
  }
}

// Big enough that ParallelFor splits rows, so chunks start in the middle of the
// outer dimensions (the odometer's starting position).
TEST(ElementwiseBroadcast, LargeTensorsSplitAcrossThreadsMatchNaive) {
  ThreadsGuard guard(2);
  const std::vector<ShapePair> cases = {
      {{64, 33, 129}, {33, 1}}, {{3, 1, 70000}, {1, 5, 1}}, {{200001}, {}}, {{8, 16, 24, 24}, {1, 16, 1, 1}},
      {{1, 50, 50, 24}, {24}},  // a channels-last per-channel row: several blocks, the last one partial
      {{7, 1000, 35}, {35}}};   // a row length that does not divide the block
  uint32_t seed = 100;
  for (const auto& [sa, sb] : cases) {
    const Tensor a = Random(sa, seed++), b = Random(sb, seed++);
    const Shape out = BroadcastNaive({sa, sb});
    const Tensor y = MustRun({"Add", {a, b}});
    ASSERT_EQ(y.shape(), out);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    std::vector<double> expected(static_cast<size_t>(NumElements(out)));
    for (int64_t i = 0; i < NumElements(out); ++i)
      expected[i] = pa[SourceIndex(sa, out, i)] + pb[SourceIndex(sb, out, i)];
    ExpectExact(expected, y, "Add " + ShapeToString(sa) + " with " + ShapeToString(sb));
  }
}

TEST(ElementwiseBroadcast, IncompatibleShapesAreAnError) {
  auto r = TryRun({"Add", {Random({2, 3}, 1), Random({4}, 2)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("2x3"), std::string::npos) << r.error().message;
  EXPECT_FALSE(TryRun({"Add", {Random({2, 3}, 1), Make<int32_t>({3}, {1, 2, 3})}}).ok());  // mixed types
  EXPECT_FALSE(TryRun({"Sum", {Random({2}, 1), Random({3}, 2)}}).ok());
}

TEST(ElementwiseBroadcast, WhereBroadcastsAllThreeInputs) {
  const Shape sc = {3, 1, 4}, sx = {1, 5, 1}, sy = {4};
  Tensor c(DType::kBool, sc);
  for (int64_t i = 0; i < c.numel(); ++i) c.data<bool>()[i] = (i * 7) % 3 == 0;
  const Tensor x = Random(sx, 1), y = Random(sy, 2);
  const Shape out = BroadcastNaive({sc, sx, sy});
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    const Tensor z = MustRun({"Where", {c, x, y}});
    ASSERT_EQ(z.shape(), out);
    std::vector<double> expected(static_cast<size_t>(NumElements(out)));
    for (int64_t i = 0; i < NumElements(out); ++i)
      expected[i] = c.data<bool>()[SourceIndex(sc, out, i)] ? x.data<float>()[SourceIndex(sx, out, i)]
                                                            : y.data<float>()[SourceIndex(sy, out, i)];
    ExpectExact(expected, z, "Where");
  }
  // Every element size, same shapes.
  Tensor c2 = Make<bool>({4}, {true, false, false, true});
  ExpectExact({1, -2, -3, 4},
              MustRun({"Where", {c2, Make<int8_t>({4}, {1, 2, 3, 4}), Make<int8_t>({4}, {-1, -2, -3, -4})}}), "int8");
  ExpectExact({1, -2, -3, 4},
              MustRun({"Where", {c2, Make<int64_t>({4}, {1, 2, 3, 4}), Make<int64_t>({4}, {-1, -2, -3, -4})}}),
              "int64");
  EXPECT_FALSE(TryRun({"Where", {Random({4}, 1), Random({4}, 2), Random({4}, 3)}}).ok());  // condition not bool
}

TEST(ElementwiseBroadcast, VariadicOpsFoldThreeShapes) {
  const Tensor a = Random({3, 1}, 1), b = Random({4}, 2), c = Random({2, 1, 1}, 3);
  const Shape out = BroadcastNaive({{3, 1}, {4}, {2, 1, 1}});
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    const Tensor y = MustRun({op, {a, b, c}});
    ASSERT_EQ(y.shape(), out) << op;
    std::vector<double> expected(static_cast<size_t>(NumElements(out)));
    for (int64_t i = 0; i < NumElements(out); ++i) {
      const float x0 = a.data<float>()[SourceIndex(a.shape(), out, i)];
      const float x1 = b.data<float>()[SourceIndex(b.shape(), out, i)];
      const float x2 = c.data<float>()[SourceIndex(c.shape(), out, i)];
      const std::string o = op;
      expected[i] = o == "Sum"    ? (x0 + x1) + x2
                    : o == "Mean" ? ((x0 + x1) + x2) / 3.0f
                    : o == "Max"  ? std::max({x0, x1, x2})
                                  : std::min({x0, x1, x2});
    }
    ExpectClose(expected, y, 1e-6, 0, op);
  }
  // NaN propagates through Min and Max (numpy), whichever side it is on.
  const Tensor n1 = Make<float>({3}, {kNanF, 1, 2}), n2 = Make<float>({3}, {0, kNanF, 5});
  ExpectExact({kNanF, kNanF, 5}, MustRun({"Max", {n1, n2}}), "Max NaN");
  ExpectExact({kNanF, kNanF, 2}, MustRun({"Min", {n1, n2}}), "Min NaN");
}

// --- Pre-opset-7 broadcasting --------------------------------------------------

TEST(ElementwiseLegacy, BroadcastAlongAxis) {
  const Tensor a = Random({2, 3, 4, 5}, 1);
  // B [3, 4] at axis 1 means B[c, h] for every n and w.
  const Tensor b = Random({3, 4}, 2);
  const Tensor y = MustRun({"Add", {a, b}, {{"broadcast", Int(1)}, {"axis", Int(1)}}, 6});
  ASSERT_EQ(y.shape(), a.shape());
  std::vector<double> expected(static_cast<size_t>(a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t h = (i / 5) % 4, c = (i / 20) % 3;
    expected[i] = a.data<float>()[i] + b.data<float>()[c * 4 + h];
  }
  ExpectExact(expected, y, "axis 1");

  // Without axis: B's dimensions match A's trailing ones; a scalar B also works.
  const Tensor b2 = Random({4, 5}, 3);
  const Tensor y2 = MustRun({"Mul", {a, b2}, {{"broadcast", Int(1)}}, 6});
  for (int64_t i = 0; i < a.numel(); ++i) expected[i] = a.data<float>()[i] * b2.data<float>()[i % 20];
  ExpectExact(expected, y2, "suffix");
  const Tensor y3 = MustRun({"Sub", {a, Make<float>({}, {1.5f})}, {{"broadcast", Int(1)}}, 6});
  for (int64_t i = 0; i < a.numel(); ++i) expected[i] = a.data<float>()[i] - 1.5f;
  ExpectExact(expected, y3, "scalar");

  // Axis 0 with a size-1 trailing dimension (PyTorch's export of x + y[:, None]).
  const Tensor y4 = MustRun({"Add",
                             {Make<double>({2, 3}, {1, 2, 3, 4, 5, 6}), Make<double>({2, 1}, {10, 20})},
                             {{"broadcast", Int(1)}, {"axis", Int(0)}},
                             6});
  ExpectExact({11, 12, 13, 24, 25, 26}, y4, "axis 0");

  // The same B means something else with numpy rules: at opset 7 the legacy
  // attributes are ignored and [3] aligns with the last dimension.
  const Tensor x = Make<float>({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0}), v = Make<float>({3}, {1, 2, 3});
  ExpectExact({1, 1, 1, 2, 2, 2, 3, 3, 3}, MustRun({"Add", {x, v}, {{"broadcast", Int(1)}, {"axis", Int(0)}}, 6}),
              "opset 6");
  ExpectExact({1, 2, 3, 1, 2, 3, 1, 2, 3}, MustRun({"Add", {x, v}, {}, 7}), "opset 7");

  // Mismatches are errors, not crashes.
  EXPECT_FALSE(TryRun({"Add", {a, Random({4}, 4)}, {{"broadcast", Int(1)}, {"axis", Int(1)}}, 6}).ok());
  EXPECT_FALSE(TryRun({"Add", {a, Random({3, 4}, 4)}, {{"broadcast", Int(1)}, {"axis", Int(3)}}, 6}).ok());
  EXPECT_FALSE(TryRun({"Add", {Random({3}, 1), Random({2, 3}, 4)}, {{"broadcast", Int(1)}}, 6}).ok());
  EXPECT_FALSE(TryRun({"Add", {a, b}, {{"broadcast", Int(2)}}, 6}).ok());
}

TEST(ElementwiseLegacy, PReluSlopePerChannelBeforeOpset7) {
  const Tensor x = Random({2, 3, 4}, 1);
  const Tensor slope = Make<float>({3}, {0.5f, -1.f, 2.f});
  std::vector<double> expected(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    expected[i] = v < 0 ? v * slope.data<float>()[(i / 4) % 3] : v;
  }
  ExpectExact(expected, MustRun({"PRelu", {x, slope}, {}, 6}), "opset 6");
  // From opset 7 numpy rules: a slope of the last dimension's length.
  const Tensor slope4 = Make<float>({4}, {0.5f, -1.f, 2.f, 3.f});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    expected[i] = v < 0 ? v * slope4.data<float>()[i % 4] : v;
  }
  ExpectExact(expected, MustRun({"PRelu", {x, slope4}, {}, 9}), "opset 9");
  EXPECT_FALSE(TryRun({"PRelu", {x, slope}, {}, 9}).ok());                    // [3] does not broadcast to 2x3x4
  EXPECT_FALSE(TryRun({"PRelu", {x, Random({5, 2, 3, 4}, 2)}, {}, 9}).ok());  // would grow the output
}

// --- Rounding ------------------------------------------------------------------

TEST(ElementwiseRounding, RoundHalfToEvenFloorCeil) {
  const std::vector<float> v = {-2.5f, -1.5f,  -0.5f,      0.5f,      1.5f,       2.5f,        3.5f,   2.4999998f,
                                -0.3f, 0.3f,   8388607.5f, 8388609.f, -8388609.f, 1e30f,       -1e30f, -0.f,
                                0.f,   1e-40f, kInfF,      -kInfF,    kNanF,      0.49999997f, -7.5f,  1234.5f};
  const Tensor x = Make<float>({static_cast<int64_t>(v.size())}, v);
  for (bool reference : {false, true}) {
    std::vector<double> round, floor, ceil;
    for (float f : v) {
      round.push_back(std::nearbyint(f));
      floor.push_back(std::floor(f));
      ceil.push_back(std::ceil(f));
    }
    const std::string mode = reference ? " (reference)" : " (fast)";
    const Tensor r = MustRun({"Round", {x}, {}, 17, reference});
    ExpectExact(round, r, "Round" + mode);
    ExpectExact(floor, MustRun({"Floor", {x}, {}, 17, reference}), "Floor" + mode);
    ExpectExact(ceil, MustRun({"Ceil", {x}, {}, 17, reference}), "Ceil" + mode);
    // The sign of zero follows the input, as std::nearbyint: -0.3 rounds to -0.
    EXPECT_TRUE(std::signbit(r.data<float>()[8])) << mode;
    EXPECT_FALSE(std::signbit(r.data<float>()[9])) << mode;
  }
  ExpectExact({-2, 2, 0, -0.0, 4}, MustRun({"Round", {Make<double>({5}, {-2.5, 2.5, 0.5, -0.5, 3.5})}}),
              "Round float64");
}

// --- Fast float32 kernels against the reference ----------------------------------

// Odd sizes, values over the interesting range, and the special values.
Tensor ActivationInputs(uint32_t seed) {
  std::vector<float> v = {0.f,   -0.f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 0.25f,  -0.25f, 88.f,
                          88.7f, 89.f, 100.f,  -87.f,   -88.f, -100.f, -104.f, -200.f, 7.9f,
                          -7.9f, 9.f,  4.f,    -4.f,    3.9f,  kInfF,  -kInfF, kNanF};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> wide(-30.f, 30.f), narrow(-1.f, 1.f);
  for (int i = 0; i < 4001; ++i) v.push_back(i % 2 ? wide(rng) : narrow(rng));
  return Make<float>({static_cast<int64_t>(v.size())}, v);
}

TEST(ElementwiseFast, ApproximationsMatchReference) {
  const Tensor x = ActivationInputs(7);
  struct Case {
    const char* op;
    std::map<std::string, ir::Attribute> attrs;
  };
  const std::vector<Case> cases = {{"Sigmoid", {}},
                                   {"Tanh", {}},
                                   {"Erf", {}},
                                   {"Exp", {}},
                                   {"Elu", {{"alpha", Float(0.7f)}}},
                                   {"Selu", {}},
                                   {"Celu", {{"alpha", Float(1.5f)}}},
                                   {"HardSigmoid", {}},
                                   {"HardSwish", {}},
                                   {"LeakyRelu", {}},
                                   {"ThresholdedRelu", {{"alpha", Float(0.5f)}}},
                                   {"Softplus", {}},
                                   {"Softsign", {}},
                                   {"Relu", {}},
                                   {"Shrink", {{"bias", Float(0.5f)}, {"lambd", Float(1.f)}}},
                                   {"Mish", {}}};
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    for (const Case& c : cases) {
      const Tensor ref = MustRun({c.op, {x}, c.attrs, 18, true});
      const Tensor fast = MustRun({c.op, {x}, c.attrs, 18, false});
      // A few float ulp; absolute slack where results cross zero (erf, tanh of tiny x).
      ExpectClose(ref, fast, 2e-6, 1e-7, c.op);
    }
  }
}

TEST(ElementwiseFast, ExpRangeLimits) {
  const Tensor x = Make<float>({8}, {-104.f, -103.f, -90.f, 88.72f, 88.73f, 1000.f, -kInfF, kNanF});
  const Tensor y = MustRun({"Exp", {x}});
  const float* p = y.data<float>();
  EXPECT_EQ(p[0], 0.f);
  EXPECT_GT(p[1], 0.f);  // a denormal, not flushed
  EXPECT_NEAR(p[2], std::exp(-90.f), std::exp(-90.f) * 1e-3);
  EXPECT_NEAR(p[3], std::exp(88.72f), std::exp(88.72f) * 1e-6);
  EXPECT_EQ(p[4], kInfF);
  EXPECT_EQ(p[5], kInfF);
  EXPECT_EQ(p[6], 0.f);
  EXPECT_TRUE(std::isnan(p[7]));
}

TEST(ElementwiseFast, HalfPrecisionComputesInFloat) {
  const Tensor x = Random({37}, 3);
  auto half = [](const Tensor& t) {
    Tensor h(DType::kFloat16, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) h.data<uint16_t>()[i] = FloatToHalf(t.data<float>()[i]);
    return h;
  };
  for (const char* op : {"Sigmoid", "Tanh", "Neg", "Abs", "Sqrt"}) {
    const Tensor y = MustRun({op, {half(x)}});
    ASSERT_EQ(y.dtype(), DType::kFloat16) << op;
    const Tensor expected = MustRun({op, {Tensor(MustRun({"Cast", {half(x)}, {{"to", Int(1)}}}))}});
    ExpectClose(expected, MustRun({"Cast", {y}, {{"to", Int(1)}}}), 1e-3, 1e-4, op);
  }
  const Tensor sum = MustRun({"Add", {half(x), half(x)}});
  ASSERT_EQ(sum.dtype(), DType::kFloat16);
  ExpectClose(MustRun({"Add", {x, x}}), MustRun({"Cast", {sum}, {{"to", Int(1)}}}), 1e-3, 1e-3, "Add float16");
}

// --- Integer semantics -----------------------------------------------------------

TEST(ElementwiseIntegers, WrapTruncateAndDivideByZero) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  const Tensor a = Make<int32_t>({6}, {-7, 7, -7, kMin, 5, kMax});
  const Tensor b = Make<int32_t>({6}, {2, -2, -2, -1, 0, 1});
  ExpectExact({-3, -3, 3, double(kMin), 0, double(kMax)}, MustRun({"Div", {a, b}}), "Div truncates");
  ExpectExact({-5, 5, -9, double(kMax), 5, double(kMin)}, MustRun({"Add", {a, b}}), "Add wraps");
  ExpectExact({-14, -14, 14, double(kMin), 0, double(kMax)}, MustRun({"Mul", {a, b}}), "Mul wraps");
  ExpectExact({1, -1, -1, 0, 0, 0}, MustRun({"Mod", {a, b}}), "Mod (sign of divisor)");
  ExpectExact({-1, 1, -1, 0, 0, 0}, MustRun({"Mod", {a, b}, {{"fmod", Int(1)}}}), "Mod fmod=1");
  ExpectExact({255, 1}, MustRun({"Sub", {Make<uint8_t>({2}, {0, 3}), Make<uint8_t>({2}, {1, 2})}}), "uint8 wraps");
  ExpectExact({7, 7, 0, 0}, MustRun({"Abs", {Make<int8_t>({4}, {-7, 7, 0, 0})}}), "Abs int8");
  ExpectExact({-128, 127}, MustRun({"Neg", {Make<int8_t>({2}, {-128, -127})}}), "Neg wraps");
  ExpectExact({-1, 0, 1}, MustRun({"Sign", {Make<int64_t>({3}, {-5, 0, 9})}}), "Sign int64");
  // Shifting by the width or more gives 0.
  const Tensor bits = Make<uint8_t>({4}, {1, 1, 128, 128}), by = Make<uint8_t>({4}, {3, 8, 7, 1});
  ExpectExact({8, 0, 0, 0}, MustRun({"BitShift", {bits, by}, {{"direction", String("LEFT")}}}), "BitShift LEFT");
  ExpectExact({0, 0, 1, 64}, MustRun({"BitShift", {bits, by}, {{"direction", String("RIGHT")}}}), "BitShift RIGHT");
  EXPECT_FALSE(
      TryRun({"BitShift", {Make<uint8_t>({1}, {1}), Make<uint8_t>({1}, {1})}, {{"direction", String("UP")}}}).ok());
}

TEST(ElementwiseIntegers, PowIsExactForIntegers) {
  ExpectExact({3486784401.0, 4611686018427387904.0, 1, 0, -1, 1},
              MustRun({"Pow", {Make<int64_t>({6}, {3, 2, 1, 2, -1, -1}), Make<int64_t>({6}, {20, 62, -3, -1, 3, -2})}}),
              "int64 ^ int64");
  ExpectExact({1, 32, 729}, MustRun({"Pow", {Make<int32_t>({3}, {1, 2, 3}), Make<float>({3}, {4, 5, 6})}}),
              "int32 ^ float");
  // float32 base: the scalar-exponent fast paths agree with powf.
  const Tensor x = Make<float>({7}, {-2.f, -0.f, 0.f, 0.3f, 4.f, kInfF, -kInfF});
  for (float e : {1.f, 2.f, 3.f, -1.f, 0.5f, 1.7f}) {
    std::vector<double> expected;
    for (int64_t k = 0; k < x.numel(); ++k) expected.push_back(std::pow(x.data<float>()[k], e));
    ExpectClose(expected, MustRun({"Pow", {x, Make<float>({}, {e})}}), 1e-6, 0, "Pow x^" + std::to_string(e));
  }
}

// --- Clip ------------------------------------------------------------------------

TEST(ElementwiseClip, BoundsFromInputsOrAttributes) {
  const Tensor x = Make<float>({6}, {-5.f, -1.f, 0.f, 1.f, 5.f, kNanF});
  ExpectExact({-1, -1, 0, 1, 2, kNanF}, MustRun({"Clip", {x, Make<float>({}, {-1.f}), Make<float>({}, {2.f})}}),
              "both");
  ExpectExact({-5, -1, 0, 1, 2, kNanF}, MustRun({"Clip", {x, Tensor(), Make<float>({}, {2.f})}}), "max only");
  ExpectExact({2, 2, 2, 2, 2, kNanF}, MustRun({"Clip", {x, Make<float>({}, {3.f}), Make<float>({}, {2.f})}}),
              "min > max");
  ExpectExact({-5, -1, 0, 1, 5, kNanF}, MustRun({"Clip", {x}}), "no bounds");
  const Tensor inf = Make<float>({2}, {kInfF, -kInfF});
  ExpectExact({kInfF, -kInfF}, MustRun({"Clip", {inf}}), "no bounds keeps infinities");
  ExpectExact({-0.5, -0.5, 0, 0.5, 0.5, kNanF},
              MustRun({"Clip", {x}, {{"min", Float(-0.5f)}, {"max", Float(0.5f)}}, 6}), "opset 6");
  ExpectExact({-5, -1, 0, 1, 1.5, kNanF}, MustRun({"Clip", {x}, {{"max", Float(1.5f)}}, 6}), "opset 6 max only");
  ExpectExact({-128, 0, 3},
              MustRun({"Clip", {Make<int8_t>({3}, {-128, 0, 100}), Tensor(), Make<int8_t>({}, {3})}, {}, 12}), "int8");
  EXPECT_FALSE(TryRun({"Clip", {x, Make<float>({2}, {0.f, 1.f})}}).ok());  // min not a scalar
  EXPECT_FALSE(TryRun({"Clip", {x, Make<double>({}, {0.0})}}).ok());       // min of another type
}

// --- Cast ------------------------------------------------------------------------

TEST(ElementwiseCast, Conversions) {
  auto cast = [](const Tensor& t, DType to) { return MustRun({"Cast", {t}, {{"to", Int(static_cast<int64_t>(to))}}}); };
  const Tensor f = Make<float>({8}, {300.7f, -1.5f, -1.f, 0.f, kNanF, 1e20f, -1e20f, 127.9f});
  const Tensor i8 = cast(f, DType::kInt8);
  ASSERT_EQ(i8.dtype(), DType::kInt8);
  // Truncation toward zero; out-of-range values saturate to int32 then wrap (x86 ORT
  // and numpy agree for the in-int32-range ones); NaN gives 0.
  ExpectExact({44, -1, -1, 0, 0, -1, 0, 127}, i8, "float -> int8");
  ExpectExact({44, 255, 255, 0, 0, 255, 0, 127}, cast(f, DType::kUInt8), "float -> uint8");
  ExpectExact({300, -1, -1, 0, 0, 9223372036854775807.0, -9223372036854775808.0, 127}, cast(f, DType::kInt64),
              "float -> int64");
  ExpectExact({1, 1, 1, 0, 1, 1, 1, 1}, cast(f, DType::kBool), "float -> bool");
  const Tensor u64 = cast(Make<double>({3}, {1.8e19, 3.0, 2e19}), DType::kUInt64);
  EXPECT_EQ(u64.data<uint64_t>()[0], 18000000000000000000ull);
  EXPECT_EQ(u64.data<uint64_t>()[1], 3u);
  EXPECT_EQ(u64.data<uint64_t>()[2], std::numeric_limits<uint64_t>::max());
  ExpectExact({1, 0}, cast(Make<bool>({2}, {true, false}), DType::kFloat32), "bool -> float");
  ExpectExact({-1, 255}, cast(Make<int32_t>({2}, {-1, 255}), DType::kFloat64), "int32 -> double");

  // double -> float16 rounds once: 1 + 2^-11 + 2^-40 is just above the midpoint
  // between 1 and the next half, so it rounds up (via float it would tie to 1).
  const Tensor h =
      cast(Make<double>({2}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -11)}),
           DType::kFloat16);
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c01);
  EXPECT_EQ(h.data<uint16_t>()[1], 0x3c00);  // an exact tie goes to even
  // float -> bfloat16 rounds to nearest even.
  const Tensor bf =
      cast(Make<float>({2}, {std::bit_cast<float>(0x3EF5EEB0u), std::bit_cast<float>(0x3F808000u)}), DType::kBFloat16);
  EXPECT_EQ(bf.data<uint16_t>()[0], 0x3EF6);
  EXPECT_EQ(bf.data<uint16_t>()[1], 0x3F80);

  // CastLike takes the type of its second input; same type aliases.
  EXPECT_EQ(MustRun({"CastLike", {f, Make<int16_t>({1}, {0})}}).dtype(), DType::kInt16);
  // Strings are not supported: a clear error when the kernel is built.
  auto s = TryRun({"Cast", {f}, {{"to", Int(8)}}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("string"), std::string::npos);
  EXPECT_FALSE(TryRun({"Cast", {f}, {{"to", Int(99)}}}).ok());
  EXPECT_FALSE(TryRun({"Cast", {f}}).ok());  // no 'to'
  // Cast-1 names the type.
  EXPECT_EQ(MustRun({"Cast", {f}, {{"to", String("DOUBLE")}}, 1}).dtype(), DType::kFloat64);
}

}  // namespace
}  // namespace seqto
