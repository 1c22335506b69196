// Reduce-family and normalization ops on what ONNX's backend tests cover poorly:
// odd shapes, every axis subset, negative axes, empty reductions, integer types,
// fast kernels against the reference kernels, and bad inputs that must give an
// error (not a crash). Kernels are built straight from the op registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::Float;
using testing::Int;
using testing::Ints;

constexpr double kInf = std::numeric_limits<double>::infinity();

// --- Harness -------------------------------------------------------------------

// A KernelContext over plain tensors. Outputs start filled with 0xff bytes (NaN for
// floats, -1 for integers) so that an element a kernel forgets to write shows.
class TestContext final : public ops::KernelContext {
 public:
  TestContext(const std::vector<const Tensor*>& inputs, const std::vector<bool>& wanted) {
    inputs_ = inputs;
    outputs_.resize(wanted.size());
    output_wanted_ = wanted;
  }
  Tensor& Allocate(int i, DType dtype, Shape shape) override {
    EXPECT_LT(i, num_outputs());
    EXPECT_TRUE(wants_output(i)) << "output " << i << " is not wanted";
    Tensor t(dtype, std::move(shape));
    if (t.nbytes() > 0) std::memset(t.raw(), 0xff, t.nbytes());
    outputs_[i] = std::move(t);
    return outputs_[i];
  }
  std::vector<Tensor>& outputs() { return outputs_; }
};

struct OpCall {
  std::string op;
  int64_t opset = 13;
  std::map<std::string, ir::Attribute> attrs;
  std::vector<Tensor> inputs;  // an undefined Tensor marks an omitted optional input
  std::vector<bool> outputs = {true};
  bool reference_only = false;
};

struct OpResult {
  Status status;
  std::vector<Tensor> outputs;
  bool ok() const { return status.ok(); }
  const Tensor& out(int i = 0) const { return outputs.at(i); }
  std::string message() const { return status.ok() ? "" : status.message(); }
};

OpResult RunOp(const OpCall& call) {
  ir::Node node;
  node.name = "n";
  node.op_type = call.op;
  node.attributes = call.attrs;
  for (size_t i = 0; i < call.inputs.size(); ++i)
    node.inputs.push_back(call.inputs[i].defined() ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < call.outputs.size(); ++i)
    node.outputs.push_back(call.outputs[i] ? "out" + std::to_string(i) : "");
  const ops::OpDef* def = ops::OpRegistry::Global().Find("", call.op, call.opset);
  if (!def) return {Status(UserError("op not registered")), {}};
  ops::KernelInit init{node, call.opset, std::vector<const Tensor*>(call.inputs.size(), nullptr), call.reference_only};
  auto kernel = def->create(init);
  if (!kernel) return {Status(kernel.error()), {}};
  std::vector<const Tensor*> ins;
  for (const Tensor& t : call.inputs) ins.push_back(t.defined() ? &t : nullptr);
  TestContext ctx(ins, call.outputs);
  Status st = (*kernel)->Run(ctx);
  if (!st.ok()) return {st, {}};
  for (size_t i = 0; i < call.outputs.size(); ++i)
    if (call.outputs[i]) {
      EXPECT_TRUE(ctx.outputs()[i].defined()) << call.op << ": output " << i << " not produced";
    }
  return {Status::Ok(), ctx.outputs()};
}

Tensor Random(Shape shape, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor Axes(std::vector<int64_t> axes) {
  const int64_t n = static_cast<int64_t>(axes.size());
  return Tensor::FromVector<int64_t>({n}, axes);
}

// Values equal within rtol/atol; NaN matches NaN, infinities match exactly.
void ExpectClose(const Tensor& expected, const Tensor& actual, double rtol = 1e-5, double atol = 1e-6,
                 const std::string& what = "") {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  const auto e = expected.ToDoubles(), a = actual.ToDoubles();
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

// --- Reduce* against a naive reference -------------------------------------------

const char* const kReduceOps[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
                                  "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

// Reduces x (as doubles) over mask, the obvious way.
Tensor NaiveReduce(const std::string& op, const Tensor& x, const std::vector<bool>& mask, bool keepdims) {
  const Shape& s = x.shape();
  Shape out_shape, kept_shape;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!mask[d]) {
      out_shape.push_back(s[d]);
      kept_shape.push_back(s[d]);
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  const int64_t out_n = NumElements(kept_shape);
  std::vector<std::vector<double>> groups(static_cast<size_t>(out_n));
  const auto v = x.ToDoubles();
  std::vector<int64_t> idx(s.size(), 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (!mask[d]) o = o * s[d] + idx[d];
    groups[o].push_back(v[i]);
    for (size_t d = s.size(); d-- > 0;) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<double> out(static_cast<size_t>(out_n));
  for (int64_t o = 0; o < out_n; ++o) {
    const auto& g = groups[o];
    double r = 0;
    if (op == "ReduceSum")
      for (double e : g) r += e;
    else if (op == "ReduceMean") {
      for (double e : g) r += e;
      r /= static_cast<double>(g.size());
    } else if (op == "ReduceMax") {
      r = -kInf;
      for (double e : g) r = std::max(r, e);
    } else if (op == "ReduceMin") {
      r = kInf;
      for (double e : g) r = std::min(r, e);
    } else if (op == "ReduceProd") {
      r = 1;
      for (double e : g) r *= e;
    } else if (op == "ReduceL1")
      for (double e : g) r += std::fabs(e);
    else if (op == "ReduceL2") {
      for (double e : g) r += e * e;
      r = std::sqrt(r);
    } else if (op == "ReduceLogSum") {
      for (double e : g) r += e;
      r = std::log(r);
    } else if (op == "ReduceLogSumExp") {
      for (double e : g) r += std::exp(e);
      r = std::log(r);
    } else if (op == "ReduceSumSquare")
      for (double e : g) r += e * e;
    out[o] = r;
  }
  Tensor t(DType::kFloat32, out_shape);
  for (int64_t o = 0; o < out_n; ++o) t.data<float>()[o] = static_cast<float>(out[o]);
  return t;
}

// Every op, every axis subset (given as negative axes half the time), both keepdims,
// through both the attribute (opset 11) and the input (opset 18) forms.
TEST(Reduce, AllAxisSubsetsOfOddShapesMatchNaive) {
  const std::vector<Shape> shapes = {{7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 5}, {4, 1, 1, 3}, {1, 1, 1}, {3, 2, 1, 2, 3}};
  uint32_t seed = 1;
  for (const Shape& shape : shapes) {
    const int64_t rank = static_cast<int64_t>(shape.size());
    for (const char* op : kReduceOps) {
      const std::string name = op;
      // Positive inputs keep LogSum and Prod well-conditioned.
      const bool positive = name == "ReduceLogSum" || name == "ReduceProd";
      const Tensor x = Random(shape, seed++, positive ? 0.5f : -3.f, positive ? 1.5f : 3.f);
      for (int64_t bits = 1; bits < (int64_t{1} << rank); ++bits) {
        std::vector<bool> mask(static_cast<size_t>(rank));
        std::vector<int64_t> axes;
        for (int64_t d = 0; d < rank; ++d) {
          mask[d] = (bits >> d) & 1;
          if (mask[d]) axes.push_back((bits + d) % 2 ? d - rank : d);
        }
        for (int keepdims = 0; keepdims < 2; ++keepdims) {
          const Tensor expected = NaiveReduce(name, x, mask, keepdims);
          const std::string what = name + " " + ShapeToString(shape) + " mask " + std::to_string(bits) + " keepdims " +
                                   std::to_string(keepdims);
          OpCall attr_form{name, 11, {{"axes", Ints(axes)}, {"keepdims", Int(keepdims)}}, {x}};
          OpResult r = RunOp(attr_form);
          ASSERT_TRUE(r.ok()) << what << ": " << r.message();
          ExpectClose(expected, r.out(), 1e-5, 1e-6, what);
          OpCall input_form{name, 18, {{"keepdims", Int(keepdims)}}, {x, Axes(axes)}};
          r = RunOp(input_form);
          ASSERT_TRUE(r.ok()) << what << ": " << r.message();
          ExpectClose(expected, r.out(), 1e-5, 1e-6, what + " (axes input)");
        }
      }
    }
  }
}

TEST(Reduce, NoAxesReducesEverything) {
  const Tensor x = Random({3, 4, 5}, 7);
  for (const char* op : kReduceOps) {
    const std::string name = op;
    if (name == "ReduceLogSum" || name == "ReduceProd") continue;
    const Tensor expected = NaiveReduce(name, x, {true, true, true}, true);
    OpResult r = RunOp({name, 11, {}, {x}});
    ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    ExpectClose(expected, r.out(), 1e-5, 1e-6, name);
    r = RunOp({name, 18, {{"keepdims", Int(0)}}, {x}});
    ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    EXPECT_EQ(r.out().shape(), Shape{}) << name;
    // An empty axes input also means all axes.
    r = RunOp({name, 18, {{"keepdims", Int(0)}}, {x, Axes({})}});
    ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    EXPECT_EQ(r.out().shape(), Shape{}) << name;
  }
}

TEST(Reduce, ScalarInput) {
  const Tensor x = Tensor::Scalar<float>(-2.5f);
  OpResult r = RunOp({"ReduceL1", 13, {}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().shape(), Shape{});
  EXPECT_EQ(r.out().data<float>()[0], 2.5f);
  EXPECT_FALSE(RunOp({"ReduceL1", 13, {{"axes", Ints({0})}}, {x}}).ok());
}

TEST(Reduce, NoopWithEmptyAxesIsElementwise) {
  const Tensor x = Tensor::FromVector<float>({2, 2}, {1, -2, 3, 0.5f});
  OpResult r = RunOp({"ReduceSum", 13, {{"noop_with_empty_axes", Int(1)}}, {x, Axes({})}});
  ASSERT_TRUE(r.ok()) << r.message();
  ExpectClose(x, r.out());
  r = RunOp({"ReduceSum", 13, {{"noop_with_empty_axes", Int(1)}}, {x}});  // axes omitted
  ASSERT_TRUE(r.ok()) << r.message();
  ExpectClose(x, r.out());
  r = RunOp({"ReduceSumSquare", 18, {{"noop_with_empty_axes", Int(1)}}, {x, Axes({})}});
  ASSERT_TRUE(r.ok()) << r.message();
  ExpectClose(Tensor::FromVector<float>({2, 2}, {1, 4, 9, 0.25f}), r.out());
  r = RunOp({"ReduceL1", 18, {{"noop_with_empty_axes", Int(1)}}, {x, Axes({})}});
  ASSERT_TRUE(r.ok()) << r.message();
  ExpectClose(Tensor::FromVector<float>({2, 2}, {1, 2, 3, 0.5f}), r.out());
  // Without noop an empty list reduces everything.
  r = RunOp({"ReduceSum", 13, {{"noop_with_empty_axes", Int(0)}}, {x, Axes({})}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().shape(), (Shape{1, 1}));
  EXPECT_FLOAT_EQ(r.out().data<float>()[0], 2.5f);
}

TEST(Reduce, EmptyReductionGivesIdentity) {
  const Tensor x(DType::kFloat32, {2, 0, 3});
  const std::map<std::string, double> identity = {
      {"ReduceSum", 0},           {"ReduceMean", NAN},   {"ReduceMax", -kInf}, {"ReduceMin", kInf},
      {"ReduceProd", 1},          {"ReduceL1", 0},       {"ReduceL2", 0},      {"ReduceLogSum", -kInf},
      {"ReduceLogSumExp", -kInf}, {"ReduceSumSquare", 0}};
  for (const auto& [op, value] : identity) {
    OpResult r = RunOp({op, 11, {{"axes", Ints({1})}}, {x}});
    ASSERT_TRUE(r.ok()) << op << ": " << r.message();
    ASSERT_EQ(r.out().shape(), (Shape{2, 1, 3})) << op;
    for (double v : r.out().ToDoubles()) {
      if (std::isnan(value))
        EXPECT_TRUE(std::isnan(v)) << op;
      else
        EXPECT_EQ(v, value) << op;
    }
    // Reducing a non-empty axis of an empty tensor gives an empty output.
    r = RunOp({op, 11, {{"axes", Ints({0})}, {"keepdims", Int(0)}}, {x}});
    ASSERT_TRUE(r.ok()) << op << ": " << r.message();
    EXPECT_EQ(r.out().shape(), (Shape{0, 3})) << op;
  }
  // Integers: max/min of nothing are the type's limits.
  const Tensor xi(DType::kInt32, {0, 2});
  OpResult r = RunOp({"ReduceMax", 13, {{"axes", Ints({0})}}, {xi}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().data<int32_t>()[1], std::numeric_limits<int32_t>::lowest());
  r = RunOp({"ReduceMean", 13, {{"axes", Ints({0})}}, {xi}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().data<int32_t>()[0], 0);
}

TEST(Reduce, SumOfManyFloatsIsAccurate) {
  // 2^21 copies of 0.1f: a float running sum would be off by percents.
  const int64_t n = int64_t{1} << 21;
  Tensor x(DType::kFloat32, {n});
  std::fill(x.data<float>(), x.data<float>() + n, 0.1f);
  const double exact = static_cast<double>(0.1f) * static_cast<double>(n);
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    OpResult r = RunOp({op, 11, {}, {x}});
    ASSERT_TRUE(r.ok()) << r.message();
    const double expected = std::string(op) == "ReduceSum" ? exact : exact / static_cast<double>(n);
    EXPECT_NEAR(r.out().data<float>()[0], expected, expected * 1e-7) << op;
  }
  // Down a long strided axis too ([n/8, 8], axis 0).
  OpResult r = RunOp({"ReduceSum", 11, {{"axes", Ints({0})}}, {x.Reshaped({n / 8, 8})}});
  ASSERT_TRUE(r.ok()) << r.message();
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(r.out().data<float>()[j], exact / 8, exact / 8 * 1e-7);
}

TEST(Reduce, LargeReduceAllUsesChunksCorrectly) {
  const Tensor x = Random({3, 70001}, 11);
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceL2"}) {
    const Tensor expected = NaiveReduce(op, x, {true, true}, false);
    OpResult r = RunOp({op, 11, {{"keepdims", Int(0)}}, {x}});
    ASSERT_TRUE(r.ok()) << r.message();
    ExpectClose(expected, r.out(), 1e-5, 1e-4, op);
  }
}

TEST(Reduce, NanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::FromVector<float>({3, 3}, {1, nan, 2, -inf, -inf, -inf, 1, inf, 3});
  OpResult r = RunOp({"ReduceMax", 13, {{"axes", Ints({1})}, {"keepdims", Int(0)}}, {x}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r.out().data<float>()[0]));
  EXPECT_EQ(r.out().data<float>()[1], -inf);
  EXPECT_EQ(r.out().data<float>()[2], inf);
  r = RunOp({"ReduceLogSumExp", 13, {{"axes", Ints({1})}, {"keepdims", Int(0)}}, {x}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isnan(r.out().data<float>()[0]));
  EXPECT_EQ(r.out().data<float>()[1], -inf);
  EXPECT_EQ(r.out().data<float>()[2], inf);
  // Large values don't overflow LogSumExp.
  r = RunOp({"ReduceLogSumExp", 13, {}, {Tensor::FromVector<float>({2}, {1000, 1000})}});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r.out().data<float>()[0], 1000 + std::log(2.0), 1e-3);
}

TEST(Reduce, IntegerTypes) {
  const Tensor x = Tensor::FromVector<int32_t>({2, 3}, {1, -2, 3, 4, 5, -7});
  OpResult r = RunOp({"ReduceSum", 11, {{"axes", Ints({1})}, {"keepdims", Int(0)}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().dtype(), DType::kInt32);
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{2, 2}));
  r = RunOp({"ReduceMean", 11, {{"axes", Ints({0})}, {"keepdims", Int(0)}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{2, 1, -2}));  // truncated, as numpy's astype
  r = RunOp({"ReduceProd", 11, {{"keepdims", Int(0)}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{840}));
  r = RunOp({"ReduceMin", 11, {{"axes", Ints({-1})}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{-2, -7}));
  r = RunOp({"ReduceSumSquare", 11, {{"axes", Ints({0, 1})}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{104}));
  const Tensor u = Tensor::FromVector<uint8_t>({4}, {200, 100, 7, 255});
  r = RunOp({"ReduceMax", 13, {}, {u}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{255}));
  r = RunOp({"ReduceSum", 13, {}, {u}});  // wraps like the 8-bit type
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().ToInt64s(), (std::vector<int64_t>{(200 + 100 + 7 + 255) % 256}));
  const Tensor big = Tensor::FromVector<int64_t>({2}, {std::numeric_limits<int64_t>::max(), 1});
  r = RunOp({"ReduceSum", 13, {}, {big}});  // wraps, no undefined behaviour
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().data<int64_t>()[0], std::numeric_limits<int64_t>::min());
}

TEST(Reduce, Float16) {
  Tensor x(DType::kFloat16, {2, 2});
  const float v[] = {1, 2, 3, 4.5f};
  for (int i = 0; i < 4; ++i) x.data<uint16_t>()[i] = FloatToHalf(v[i]);
  OpResult r = RunOp({"ReduceMean", 11, {{"axes", Ints({1})}}, {x}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().dtype(), DType::kFloat16);
  EXPECT_EQ(r.out().ToDoubles(), (std::vector<double>{1.5, 3.75}));
}

TEST(Reduce, BadInputsGiveErrors) {
  const Tensor x = Random({2, 3}, 3);
  auto fails = [](const OpCall& c, const std::string& needle) {
    OpResult r = RunOp(c);
    ASSERT_FALSE(r.ok()) << c.op << " should fail with '" << needle << "'";
    EXPECT_NE(r.message().find(needle), std::string::npos) << r.message();
  };
  fails({"ReduceMean", 11, {{"axes", Ints({2})}}, {x}}, "out of range");
  fails({"ReduceMean", 11, {{"axes", Ints({-3})}}, {x}}, "out of range");
  fails({"ReduceMean", 11, {{"axes", Ints({1, -1})}}, {x}}, "repeated");
  fails({"ReduceSum", 13, {}, {x, Axes({5})}}, "out of range");
  fails({"ReduceSum", 13, {{"axes", Ints({0})}}, {x}}, "axes");                    // attribute replaced by input
  fails({"ReduceMax", 13, {}, {x, Axes({0})}}, "one input");                       // input form needs opset 18
  fails({"ReduceSum", 13, {}, {x, Tensor::FromVector<float>({1}, {0})}}, "type");  // float axes
  fails({"ReduceSum", 13, {}, {x, Tensor::FromVector<int64_t>({1, 1}, {0})}}, "1-D");
  fails({"ReduceSum", 11, {{"keepdims", Float(1)}}, {x}}, "keepdims");  // wrong attribute type
  Tensor s(DType::kString, {1});
  EXPECT_FALSE(RunOp({"ReduceSum", 11, {}, {s}}).ok());
}

// --- ArgMax / ArgMin ------------------------------------------------------------

TEST(ArgMinMax, MatchesNaiveOnOddShapesWithTies) {
  const std::vector<Shape> shapes = {{5}, {3, 4}, {2, 3, 5}, {1, 7, 1}, {4, 1, 3, 2}, {2, 2050}};
  uint32_t seed = 100;
  for (const Shape& shape : shapes) {
    // Few distinct values, so ties are common.
    Tensor x = Random(shape, seed++, 0.f, 3.f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::floor(x.data<float>()[i]);
    const int64_t rank = static_cast<int64_t>(shape.size());
    for (int64_t axis = -rank; axis < rank; ++axis)
      for (const char* op : {"ArgMax", "ArgMin"})
        for (int last = 0; last < 2; ++last)
          for (int keepdims = 0; keepdims < 2; ++keepdims) {
            OpResult r = RunOp(
                {op, 13, {{"axis", Int(axis)}, {"keepdims", Int(keepdims)}, {"select_last_index", Int(last)}}, {x}});
            ASSERT_TRUE(r.ok()) << r.message();
            const int64_t a = axis < 0 ? axis + rank : axis;
            int64_t outer = 1, n = shape[a], inner = 1;
            for (int64_t d = 0; d < a; ++d) outer *= shape[d];
            for (int64_t d = a + 1; d < rank; ++d) inner *= shape[d];
            Shape expect_shape = shape;
            if (keepdims)
              expect_shape[a] = 1;
            else
              expect_shape.erase(expect_shape.begin() + a);
            ASSERT_EQ(r.out().shape(), expect_shape);
            const bool is_max = std::string(op) == "ArgMax";
            const float* p = x.data<float>();
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t i = 0; i < inner; ++i) {
                int64_t best = 0;
                for (int64_t k = 1; k < n; ++k) {
                  const float v = p[(o * n + k) * inner + i], b = p[(o * n + best) * inner + i];
                  if (is_max ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = k;
                }
                ASSERT_EQ(r.out().data<int64_t>()[o * inner + i], best)
                    << op << " " << ShapeToString(shape) << " axis " << axis << " last " << last;
              }
          }
  }
}

TEST(ArgMinMax, NanWinsAndErrors) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::FromVector<float>({5}, {1, nan, 7, nan, -3});
  OpResult r = RunOp({"ArgMax", 13, {}, {x}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.out().data<int64_t>()[0], 1);
  r = RunOp({"ArgMin", 13, {{"select_last_index", Int(1)}}, {x}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.out().data<int64_t>()[0], 3);
  r = RunOp({"ArgMax", 13, {{"keepdims", Int(0)}}, {Tensor::FromVector<int8_t>({3}, {-5, 100, 100})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.out().shape(), Shape{});
  EXPECT_EQ(r.out().data<int64_t>()[0], 1);
  EXPECT_FALSE(RunOp({"ArgMax", 13, {{"axis", Int(1)}}, {x}}).ok());
  EXPECT_FALSE(RunOp({"ArgMax", 13, {}, {Tensor(DType::kFloat32, {0, 3})}}).ok());   // empty axis
  r = RunOp({"ArgMax", 13, {{"axis", Int(1)}}, {Tensor(DType::kFloat32, {0, 3})}});  // empty output: fine
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out().shape(), (Shape{0, 1}));
  EXPECT_FALSE(RunOp({"ArgMin", 13, {}, {Tensor::Scalar<float>(1)}}).ok());
}

// --- TopK ---------------------------------------------------------------------

TEST(TopK, TiesKeepLowerIndexFirst) {
  const Tensor x = Tensor::FromVector<float>({8}, {3, 1, 3, 2, 1, 3, 2, 0});
  OpResult r = RunOp({"TopK", 11, {}, {x, Tensor::FromVector<int64_t>({1}, {4})}, {true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(0).ToDoubles(), (std::vector<double>{3, 3, 3, 2}));
  EXPECT_EQ(r.out(1).ToInt64s(), (std::vector<int64_t>{0, 2, 5, 3}));
  r = RunOp({"TopK", 11, {{"largest", Int(0)}}, {x, Tensor::FromVector<int64_t>({1}, {4})}, {true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(0).ToDoubles(), (std::vector<double>{0, 1, 1, 2}));
  EXPECT_EQ(r.out(1).ToInt64s(), (std::vector<int64_t>{7, 1, 4, 3}));
}

TEST(TopK, MiddleAxisAndOldOpsets) {
  const Tensor x = Random({3, 6, 5}, 21);
  for (int64_t opset : {1, 10, 11}) {
    OpCall c{"TopK", opset, {{"axis", Int(opset >= 11 ? -2 : 1)}}, {x}, {true, true}};
    if (opset < 10)
      c.attrs["k"] = Int(4);
    else
      c.inputs.push_back(Tensor::FromVector<int64_t>({1}, {4}));
    OpResult r = RunOp(c);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(r.out(0).shape(), (Shape{3, 4, 5}));
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t i = 0; i < 5; ++i) {
        std::vector<std::pair<float, int64_t>> col;
        for (int64_t a = 0; a < 6; ++a) col.push_back({x.data<float>()[(o * 6 + a) * 5 + i], a});
        std::stable_sort(col.begin(), col.end(), [](auto& l, auto& rr) { return l.first > rr.first; });
        for (int64_t a = 0; a < 4; ++a) {
          EXPECT_EQ(r.out(0).data<float>()[(o * 4 + a) * 5 + i], col[a].first);
          EXPECT_EQ(r.out(1).data<int64_t>()[(o * 4 + a) * 5 + i], col[a].second);
        }
      }
  }
}

TEST(TopK, EdgeCasesAndErrors) {
  const Tensor x = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto k = [](int64_t v) { return Tensor::FromVector<int64_t>({1}, {v}); };
  OpResult r = RunOp({"TopK", 11, {}, {x, k(0)}, {true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(0).shape(), (Shape{2, 0}));
  r = RunOp({"TopK", 11, {}, {x, k(3)}, {true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(1).ToInt64s(), (std::vector<int64_t>{2, 1, 0, 2, 1, 0}));
  r = RunOp({"TopK", 11, {}, {x, k(2)}, {true, false}});  // indices not wanted
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(0).ToDoubles(), (std::vector<double>{3, 2, 6, 5}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r = RunOp({"TopK", 11, {}, {Tensor::FromVector<float>({3}, {1, nan, 2}), k(2)}, {true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.out(1).ToInt64s(), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(RunOp({"TopK", 11, {}, {x, k(4)}, {true, true}}).ok());
  EXPECT_FALSE(RunOp({"TopK", 11, {}, {x, k(-1)}, {true, true}}).ok());
  EXPECT_FALSE(RunOp({"TopK", 11, {{"axis", Int(2)}}, {x, k(1)}, {true, true}}).ok());
  EXPECT_FALSE(RunOp({"TopK", 11, {}, {x, Tensor::FromVector<int64_t>({2}, {1, 2})}, {true, true}}).ok());
  EXPECT_FALSE(RunOp({"TopK", 11, {}, {x}, {true, true}}).ok());  // K input missing
  EXPECT_FALSE(RunOp({"TopK", 1, {}, {x}, {true, true}}).ok());   // k attribute missing
  EXPECT_FALSE(RunOp({"TopK", 11, {}, {Tensor::Scalar<float>(1), k(1)}, {true, true}}).ok());
}

// --- Softmax / LogSoftmax / Hardmax ---------------------------------------------

TEST(Softmax, FastMatchesReferenceOnOddShapes) {
  const std::vector<Shape> shapes = {{1}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 5}, {3, 1000}, {2, 600, 3}, {5, 3, 1, 1}};
  uint32_t seed = 200;
  for (const Shape& shape : shapes) {
    const Tensor x = Random(shape, seed++, -20.f, 20.f);
    const int64_t rank = static_cast<int64_t>(shape.size());
    for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
      for (int64_t opset : {11, 13})
        for (int64_t axis = -rank; axis < rank; ++axis) {
          OpCall c{op, opset, {{"axis", Int(axis)}}, {x}};
          OpResult fast = RunOp(c);
          c.reference_only = true;
          OpResult ref = RunOp(c);
          ASSERT_TRUE(fast.ok() && ref.ok()) << fast.message() << ref.message();
          const std::string what = std::string(op) + " " + ShapeToString(shape) + " opset " + std::to_string(opset) +
                                   " axis " + std::to_string(axis);
          ExpectClose(ref.out(), fast.out(), 1e-5, 1e-7, what);
        }
  }
}

TEST(Softmax, OpsetsDifferInHowTheyGroup) {
  // [2, 2, 2], axis 1: opset 11 normalizes each row of 4, opset 13 each pair along axis 1.
  const Tensor x = Tensor::FromVector<float>({2, 2, 2}, {0, 0, 0, 0, 1, 2, 3, 4});
  OpResult r11 = RunOp({"Softmax", 11, {{"axis", Int(1)}}, {x}});
  OpResult r13 = RunOp({"Softmax", 13, {{"axis", Int(1)}}, {x}});
  ASSERT_TRUE(r11.ok() && r13.ok());
  EXPECT_NEAR(r11.out().data<float>()[0], 0.25, 1e-6);
  EXPECT_NEAR(r13.out().data<float>()[0], 0.5, 1e-6);
  // Default axes: 1 before 13, -1 from 13.
  r11 = RunOp({"Hardmax", 11, {}, {x}});
  r13 = RunOp({"Hardmax", 13, {}, {x}});
  ASSERT_TRUE(r11.ok() && r13.ok());
  EXPECT_EQ(r11.out().ToDoubles(), (std::vector<double>{1, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(r13.out().ToDoubles(), (std::vector<double>{1, 0, 1, 0, 0, 1, 0, 1}));
}

TEST(Softmax, ExtremeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::FromVector<float>({2, 3}, {1e30f, 1e30f, -1e30f, -inf, 0, -inf});
  OpResult r = RunOp({"Softmax", 13, {}, {x}});
  ASSERT_TRUE(r.ok());
  ExpectClose(Tensor::FromVector<float>({2, 3}, {0.5f, 0.5f, 0, 0, 1, 0}), r.out(), 1e-6, 1e-7);
  r = RunOp({"LogSoftmax", 13, {}, {Tensor::FromVector<float>({3}, {1000, 1000, 1000})}});
  ASSERT_TRUE(r.ok());
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(r.out().data<float>()[i], -std::log(3.0), 1e-6);
  // Exactness of the fast exp over the range softmax uses.
  Tensor ramp(DType::kFloat32, {1, 2001});
  for (int i = 0; i < 2001; ++i) ramp.data<float>()[i] = -80.f + 0.04f * static_cast<float>(i);
  OpCall c{"Softmax", 13, {}, {ramp}};
  OpResult fast = RunOp(c);
  c.reference_only = true;
  OpResult ref = RunOp(c);
  ASSERT_TRUE(fast.ok() && ref.ok());
  ExpectClose(ref.out(), fast.out(), 2e-6, 1e-30, "ramp");
}

TEST(Softmax, OtherTypesAndErrors) {
  Tensor xd(DType::kFloat64, {2, 3});
  for (int i = 0; i < 6; ++i) xd.data<double>()[i] = i;
  OpResult r = RunOp({"Softmax", 13, {}, {xd}});
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r.out().data<double>()[2], std::exp(2.0) / (1 + std::exp(1.0) + std::exp(2.0)), 1e-12);
  Tensor xh(DType::kFloat16, {2});
  xh.data<uint16_t>()[0] = FloatToHalf(0);
  xh.data<uint16_t>()[1] = FloatToHalf(0);
  r = RunOp({"Softmax", 13, {}, {xh}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.out().dtype(), DType::kFloat16);
  EXPECT_EQ(r.out().ToDoubles(), (std::vector<double>{0.5, 0.5}));
  EXPECT_FALSE(RunOp({"Softmax", 13, {{"axis", Int(2)}}, {xd}}).ok());
  EXPECT_FALSE(RunOp({"Softmax", 13, {}, {Tensor::FromVector<int32_t>({2}, {1, 2})}}).ok());
  EXPECT_FALSE(RunOp({"LogSoftmax", 13, {}, {Tensor::Scalar<float>(1)}}).ok());
  r = RunOp({"Softmax", 13, {}, {Tensor(DType::kFloat32, {0, 4})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.out().shape(), (Shape{0, 4}));
}

// --- Normalization ----------------------------------------------------------------

Tensor Positive(Shape shape, uint32_t seed) { return Random(std::move(shape), seed, 0.1f, 2.f); }

TEST(BatchNorm, FastMatchesReferenceAndFormula) {
  for (const Shape& shape : std::vector<Shape>{{2, 3}, {1, 5, 7}, {3, 4, 5, 6}, {2, 3, 1, 2, 3}}) {
    const int64_t c = shape[1];
    const Tensor x = Random(shape, 300), scale = Random({c}, 301), bias = Random({c}, 302), mean = Random({c}, 303),
                 var = Positive({c}, 304);
    for (int64_t opset : {7, 9, 15}) {
      OpCall call{"BatchNormalization", opset, {{"epsilon", Float(1e-3f)}}, {x, scale, bias, mean, var}};
      OpResult fast = RunOp(call);
      call.reference_only = true;
      OpResult ref = RunOp(call);
      ASSERT_TRUE(fast.ok() && ref.ok()) << fast.message() << ref.message();
      ExpectClose(ref.out(), fast.out(), 1e-5, 1e-6, ShapeToString(shape));
      const int64_t hw = x.numel() / (shape[0] * c);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t ch = (i / hw) % c;
        const double e = (x.data<float>()[i] - mean.data<float>()[ch]) / std::sqrt(var.data<float>()[ch] + 1e-3) *
                             scale.data<float>()[ch] +
                         bias.data<float>()[ch];
        ASSERT_NEAR(ref.out().data<float>()[i], e, 1e-5 + 1e-5 * std::fabs(e));
      }
    }
  }
}

TEST(BatchNorm, LargeMeanStaysAccurate) {
  // x close to a large running mean: y is small and must not drown in rounding.
  Tensor x(DType::kFloat32, {1, 1, 4});
  const float xs[] = {1000.01f, 999.99f, 1000.f, 1000.5f};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = xs[i];
  const Tensor one = Tensor::FromVector<float>({1}, {1}), zero = Tensor::FromVector<float>({1}, {0});
  const Tensor mean = Tensor::FromVector<float>({1}, {1000}), var = Tensor::FromVector<float>({1}, {1e-4f});
  OpResult r = RunOp({"BatchNormalization", 15, {{"epsilon", Float(0)}}, {x, one, zero, mean, var}});
  ASSERT_TRUE(r.ok()) << r.message();
  for (int i = 0; i < 4; ++i) {
    const double e = (static_cast<double>(xs[i]) - 1000.0) / std::sqrt(static_cast<double>(1e-4f));
    EXPECT_NEAR(r.out().data<float>()[i], e, 1e-4 * std::fabs(e) + 1e-6) << i;
  }
}

TEST(BatchNorm, NonSpatialLegacyForm) {
  // Opset 7, spatial = 0: one parameter per element of a sample (C x H).
  const Tensor x = Random({2, 2, 3}, 310);
  const Tensor scale = Random({2, 3}, 311), bias = Random({2, 3}, 312), mean = Random({2, 3}, 313),
               var = Positive({2, 3}, 314);
  for (bool reference : {false, true}) {
    OpCall call{"BatchNormalization", 7, {{"spatial", Int(0)}}, {x, scale, bias, mean, var}};
    call.reference_only = reference;
    OpResult r = RunOp(call);
    ASSERT_TRUE(r.ok()) << r.message();
    for (int64_t i = 0; i < 12; ++i) {
      const int64_t k = i % 6;
      const double e = (x.data<float>()[i] - mean.data<float>()[k]) / std::sqrt(var.data<float>()[k] + 1e-5) *
                           scale.data<float>()[k] +
                       bias.data<float>()[k];
      EXPECT_NEAR(r.out().data<float>()[i], e, 1e-5);
    }
  }
  // With spatial = 1 the same parameters have the wrong size.
  EXPECT_FALSE(RunOp({"BatchNormalization", 7, {}, {x, scale, bias, mean, var}}).ok());
}

TEST(BatchNorm, TrainingModeAndErrors) {
  const Tensor x = Random({4, 2, 3}, 320);
  const Tensor scale = Tensor::FromVector<float>({2}, {1, 1}), bias = Tensor::FromVector<float>({2}, {0, 0});
  const Tensor mean = Tensor::FromVector<float>({2}, {0, 0}), var = Tensor::FromVector<float>({2}, {1, 1});
  OpResult r = RunOp({"BatchNormalization",
                      15,
                      {{"training_mode", Int(1)}, {"momentum", Float(0.5f)}},
                      {x, scale, bias, mean, var},
                      {true, true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  for (int64_t ch = 0; ch < 2; ++ch) {  // y has zero mean per channel; running stats moved halfway
    double s = 0, bm = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t j = 0; j < 3; ++j) {
        s += r.out(0).data<float>()[(n * 2 + ch) * 3 + j];
        bm += x.data<float>()[(n * 2 + ch) * 3 + j];
      }
    EXPECT_NEAR(s, 0, 1e-5);
    EXPECT_NEAR(r.out(1).data<float>()[ch], 0.5 * bm / 12, 1e-6);
  }
  const OpCall ok{"BatchNormalization", 9, {}, {x, scale, bias, mean, var}};
  EXPECT_TRUE(RunOp(ok).ok());
  OpCall c = ok;
  c.outputs = {true, true, true, false, false};
  EXPECT_NE(RunOp(c).message().find("training outputs"), std::string::npos);
  c = ok;
  c.opset = 15;
  c.outputs = {true, true, true};
  EXPECT_NE(RunOp(c).message().find("training_mode"), std::string::npos);
  c = ok;
  c.inputs[3] = Tensor::FromVector<float>({3}, {0, 0, 0});
  EXPECT_NE(RunOp(c).message().find("input 3"), std::string::npos);
  c = ok;
  c.inputs.pop_back();
  EXPECT_FALSE(RunOp(c).ok());
  c = ok;
  c.inputs[0] = Random({5}, 1);
  EXPECT_FALSE(RunOp(c).ok());
  c = ok;
  c.inputs[1] = Tensor::FromVector<double>({2}, {1, 1});
  EXPECT_FALSE(RunOp(c).ok());  // mixed types need opset 15
  c.opset = 15;
  EXPECT_TRUE(RunOp(c).ok());
}

TEST(InstanceNorm, MatchesFormula) {
  const Tensor x = Random({2, 3, 5, 1}, 330), scale = Random({3}, 331), bias = Random({3}, 332);
  OpResult r = RunOp({"InstanceNormalization", 6, {{"epsilon", Float(1e-4f)}}, {x, scale, bias}});
  ASSERT_TRUE(r.ok()) << r.message();
  for (int64_t blk = 0; blk < 6; ++blk) {
    const float* p = x.data<float>() + blk * 5;
    double m = 0, v = 0;
    for (int j = 0; j < 5; ++j) m += p[j] / 5.0;
    for (int j = 0; j < 5; ++j) v += (p[j] - m) * (p[j] - m) / 5.0;
    for (int j = 0; j < 5; ++j) {
      const double e = (p[j] - m) / std::sqrt(v + 1e-4) * scale.data<float>()[blk % 3] + bias.data<float>()[blk % 3];
      EXPECT_NEAR(r.out().data<float>()[blk * 5 + j], e, 1e-5);
    }
  }
  EXPECT_FALSE(RunOp({"InstanceNormalization", 6, {}, {x, Random({2}, 1), bias}}).ok());
  EXPECT_FALSE(RunOp({"InstanceNormalization", 6, {}, {Random({2, 3}, 1), scale, bias}}).ok());
  EXPECT_FALSE(RunOp({"InstanceNormalization", 6, {}, {x, scale}}).ok());
}

TEST(LayerNorm, BroadcastScaleAndStatistics) {
  const Tensor x = Random({2, 3, 4}, 340);
  const Tensor scale = Random({4}, 341);  // broadcast over the [3, 4] row of axis 1
  const Tensor bias = Random({3, 1}, 342);
  OpResult r = RunOp({"LayerNormalization", 17, {{"axis", Int(-2)}}, {x, scale, bias}, {true, true, true}});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r.out(1).shape(), (Shape{2, 1, 1}));
  ASSERT_EQ(r.out(2).dtype(), DType::kFloat32);
  for (int64_t row = 0; row < 2; ++row) {
    const float* p = x.data<float>() + row * 12;
    double m = 0, v = 0;
    for (int j = 0; j < 12; ++j) m += p[j] / 12.0;
    for (int j = 0; j < 12; ++j) v += (p[j] - m) * (p[j] - m) / 12.0;
    const double inv = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(r.out(1).data<float>()[row], m, 1e-6);
    EXPECT_NEAR(r.out(2).data<float>()[row], inv, 1e-5 * inv);
    for (int j = 0; j < 12; ++j) {
      const double e = (p[j] - m) * inv * scale.data<float>()[j % 4] + bias.data<float>()[j / 4];
      EXPECT_NEAR(r.out(0).data<float>()[row * 12 + j], e, 1e-5);
    }
  }
  // No B, default axis, only Y wanted.
  r = RunOp({"LayerNormalization", 17, {}, {x, Tensor::FromVector<float>({4}, {1, 1, 1, 1})}});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_FALSE(RunOp({"LayerNormalization", 17, {{"axis", Int(3)}}, {x, scale}}).ok());
  EXPECT_FALSE(RunOp({"LayerNormalization", 17, {}, {x, Random({3}, 1)}}).ok());  // does not broadcast
  EXPECT_FALSE(RunOp({"LayerNormalization", 17, {}, {x}}).ok());
}

TEST(Lrn, MatchesFormula) {
  const Tensor x = Random({2, 5, 3}, 350);
  for (int64_t size : {1, 2, 3, 4, 7}) {
    OpResult r = RunOp(
        {"LRN", 13, {{"size", Int(size)}, {"alpha", Float(0.01f)}, {"beta", Float(0.6f)}, {"bias", Float(2.f)}}, {x}});
    ASSERT_TRUE(r.ok()) << r.message();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 5; ++c)
        for (int64_t j = 0; j < 3; ++j) {
          double s = 0;
          for (int64_t k = std::max<int64_t>(0, c - (size - 1) / 2); k <= std::min<int64_t>(4, c + size / 2); ++k) {
            const double v = x.data<float>()[(n * 5 + k) * 3 + j];
            s += v * v;
          }
          const double xv = x.data<float>()[(n * 5 + c) * 3 + j];
          EXPECT_NEAR(r.out().data<float>()[(n * 5 + c) * 3 + j], xv / std::pow(2.0 + 0.01 / size * s, 0.6), 1e-5);
        }
  }
  EXPECT_FALSE(RunOp({"LRN", 13, {}, {x}}).ok());  // size is required
  EXPECT_FALSE(RunOp({"LRN", 13, {{"size", Int(0)}}, {x}}).ok());
  EXPECT_FALSE(RunOp({"LRN", 13, {{"size", Int(3)}}, {Random({4}, 1)}}).ok());
}

}  // namespace
}  // namespace seqto
