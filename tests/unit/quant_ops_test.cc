// The quantization ops of ops/quant. QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear against hand-computed values (saturation, round half to
// even, negative zero points, per-axis parameters). MatMulInteger, QLinearMatMul,
// ConvInteger and QLinearConv: the fast (oneDNN) kernel against the reference on
// odd shapes; being integer results they must agree exactly. With AVX-512 VNNI (or
// newer) the tests also check that the fast kernel did run (and did not fall back).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>

#include "core/parallel.h"
#include "ops/quant/quant_util.h"
#include "ops/registry.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::Int;
using testing::Ints;
using testing::String;

// A kernel context over test tensors; outputs start as 0xff bytes.
class QTestContext final : public ops::KernelContext {
 public:
  QTestContext(const std::vector<Tensor>& inputs, int num_outputs) {
    for (const Tensor& t : inputs) inputs_.push_back(t.defined() ? &t : nullptr);
    outputs_.resize(num_outputs);
    output_wanted_.assign(num_outputs, true);
  }
  Tensor& Allocate(int i, DType dtype, Shape shape) override {
    outputs_[i] = Tensor(dtype, std::move(shape));
    std::memset(outputs_[i].raw(), 0xff, outputs_[i].nbytes());
    return outputs_[i];
  }
  std::vector<Tensor>& outputs() { return outputs_; }
};

ir::Node MakeNode(const std::string& op, int num_inputs, int num_outputs = 1) {
  ir::Node node;
  node.name = "n";
  node.op_type = op;
  for (int i = 0; i < num_inputs; ++i) node.inputs.push_back("i" + std::to_string(i));
  for (int i = 0; i < num_outputs; ++i) node.outputs.push_back("o" + std::to_string(i));
  return node;
}

// Builds the kernel and runs it (twice for the fast kernel, to use its cached plan).
Expected<std::vector<Tensor>> RunNode(const ir::Node& node, int64_t opset, const std::vector<Tensor>& inputs,
                                      const std::vector<bool>& constant, bool reference_only, int num_outputs = 1) {
  const ops::OpDef* def = ops::OpRegistry::Global().Find(node.domain, node.op_type, opset);
  if (!def) return InternalError("no kernel for " + node.op_type);
  ops::KernelInit init{node, opset, {}, reference_only};
  for (size_t i = 0; i < inputs.size(); ++i)
    init.constant_inputs.push_back(i < constant.size() && constant[i] && inputs[i].defined() ? &inputs[i] : nullptr);
  SEQTO_ASSIGN_OR_RETURN(auto kernel, def->create(init));
  std::vector<Tensor> outputs;
  for (int run = 0; run < (reference_only ? 1 : 2); ++run) {
    QTestContext ctx(inputs, num_outputs);
    SEQTO_RETURN_IF_ERROR(kernel->Run(ctx));
    outputs = ctx.outputs();
  }
  return outputs;
}

// Runs a node expected to work and returns its output `index`.
Tensor RunOk(const ir::Node& node, int64_t opset, const std::vector<Tensor>& inputs, int num_outputs = 1,
             int index = 0) {
  auto out = RunNode(node, opset, inputs, {}, true, num_outputs);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? (*out)[index] : Tensor();
}

std::vector<int64_t> Ints(const Tensor& t) { return t.ToInt64s(); }

// Uniform random integers in [lo, hi] as a tensor of `dtype`.
Tensor RandomInts(DType dtype, Shape shape, uint32_t seed, int32_t lo, int32_t hi) {
  Tensor t(dtype, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int32_t v = dist(rng);
    switch (dtype) {
      case DType::kUInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
      case DType::kInt8:
        t.data<int8_t>()[i] = static_cast<int8_t>(v);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = v;
        break;
      default:
        ADD_FAILURE() << "RandomInts: unsupported type";
        break;
    }
  }
  return t;
}
Tensor RandomFull(DType dtype, Shape shape, uint32_t seed) {
  const auto r = ops::quant::RangeOf(dtype);
  return RandomInts(dtype, std::move(shape), seed, r.lo, r.hi);
}
Tensor Float(float v) { return Tensor::Scalar<float>(v); }
Tensor Floats(std::vector<float> v) { return Tensor::FromVector<float>({static_cast<int64_t>(v.size())}, v); }
Tensor Zp(DType t, int32_t v) {
  Tensor z(t, {});
  if (t == DType::kUInt8)
    z.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else
    z.data<int8_t>()[0] = static_cast<int8_t>(v);
  return z;
}
std::string Name(DType t) { return DTypeName(t); }

// True where oneDNN has an int8 implementation for every configuration tested here
// (AVX-512 VNNI and newer). With AVX2 VNNI only, oneDNN 2.6 offers nothing but its
// reference loops for some grouped convolutions, and the kernels use their own.
bool FastPathExpected() {
  auto bits = [](dnnl::cpu_isa i) { return static_cast<unsigned>(i); };
  const unsigned vnni512 = bits(dnnl::cpu_isa::avx512_core_vnni);
  return ops::quant::ExactInt8Isa() && (bits(dnnl::get_effective_cpu_isa()) & vnni512) == vnni512;
}

// Runs reference and fast kernels; their first outputs must be identical.
void ExpectFastEqualsReference(const ir::Node& node, const std::vector<Tensor>& inputs,
                               const std::vector<bool>& constant, const std::string& what) {
  SCOPED_TRACE(what);
  auto ref = RunNode(node, 13, inputs, constant, true);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  const int64_t runs_before = ops::quant::FastRuns();
  auto fast = RunNode(node, 13, inputs, constant, false);
  ASSERT_TRUE(fast.ok()) << fast.error().message;
  if (FastPathExpected()) {
    EXPECT_EQ(ops::quant::FastRuns() - runs_before, 2) << "the fast kernel did not run";
  }
  const Tensor& r = (*ref)[0];
  const Tensor& f = (*fast)[0];
  ASSERT_EQ(r.dtype(), f.dtype());
  ASSERT_EQ(r.shape(), f.shape());
  ASSERT_GT(r.numel(), 0);
  const auto rv = Ints(r), fv = Ints(f);
  int64_t mismatches = 0, first = -1, distinct = 0;
  for (size_t i = 0; i < rv.size(); ++i) {
    if (rv[i] != fv[i] && mismatches++ == 0) first = static_cast<int64_t>(i);
    if (i > 0 && rv[i] != rv[0]) ++distinct;
  }
  EXPECT_EQ(mismatches, 0) << "of " << rv.size() << "; first at " << first << ": ref " << rv[first] << ", fast "
                           << fv[first];
  if (rv.size() > 1) {
    EXPECT_GT(distinct, 0) << "degenerate test: the output is constant";
  }
}

// Output scale and zero point for a QLinear* test: maps the range of acc * scale
// (acc the reference integer result, `scale` per output element's channel) onto a
// little more than the output type's range, so that outputs spread over it and a
// few saturate at each end.
struct OutputQuant {
  float scale;
  int32_t zero_point;
};
OutputQuant CalibrateOutput(const std::vector<int64_t>& acc, const std::function<float(size_t)>& scale, DType y_type) {
  float lo = 0.f, hi = 0.f;
  for (size_t i = 0; i < acc.size(); ++i) {
    const float v = static_cast<float>(acc[i]) * scale(i);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const auto r = ops::quant::RangeOf(y_type);
  const float y_scale = hi > lo ? (hi - lo) / 270.f : 1.f;
  const int32_t zp = std::clamp(r.lo - 7 + static_cast<int32_t>(std::lround(-lo / y_scale)), r.lo, r.hi);
  return {y_scale, zp};
}

class QuantOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { SetNumThreads(2); }
};

// ---------------------------------------------------------------------------
// QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear

TEST_F(QuantOpsTest, QuantizeUint8HalfToEvenAndSaturation) {
  const ir::Node node = MakeNode("QuantizeLinear", 3);
  // scale 0.5: x / scale = -1, 0.5, 1.5, 2.5, -0.5, 300, -3.5, 253, 254.5
  const Tensor x = Tensor::FromVector<float>({9}, {-0.5f, 0.25f, 0.75f, 1.25f, -0.25f, 150.f, -1.75f, 126.5f, 127.25f});
  const Tensor y = RunOk(node, 10, {x, Float(0.5f), Zp(DType::kUInt8, 2)});
  ASSERT_EQ(y.dtype(), DType::kUInt8);
  // round half to even, + 2, clamped to [0, 255]: 1, 0+2, 2+2, 2+2, -0+2, 302 -> 255,
  // -4+2 -> 0, 253+2, 254+2 -> 255
  EXPECT_EQ(Ints(y), (std::vector<int64_t>{1, 2, 4, 4, 2, 255, 0, 255, 255}));
  // No zero point: uint8 with 0.
  const Tensor y0 = RunOk(MakeNode("QuantizeLinear", 2), 10, {x, Float(0.5f)});
  ASSERT_EQ(y0.dtype(), DType::kUInt8);
  EXPECT_EQ(Ints(y0), (std::vector<int64_t>{0, 0, 2, 2, 0, 255, 0, 253, 254}));
}

TEST_F(QuantOpsTest, QuantizeInt8NegativeZeroPoint) {
  const ir::Node node = MakeNode("QuantizeLinear", 3);
  const float nan = std::nanf("");
  const float inf = INFINITY;
  // scale 0.5, zp -3: x / scale = -200, -2.5, 2.5, 140, -126, NaN, +inf, -inf, 3.5
  const Tensor x = Tensor::FromVector<float>({9}, {-100.f, -1.25f, 1.25f, 70.f, -63.f, nan, inf, -inf, 1.75f});
  const Tensor y = RunOk(node, 13, {x, Float(0.5f), Zp(DType::kInt8, -3)});
  ASSERT_EQ(y.dtype(), DType::kInt8);
  // -203 -> -128; -2 - 3 = -5; 2 - 3 = -1; 137 -> 127; -129 -> -128; NaN -> zp; inf -> 127; -inf -> -128; 4 - 3 = 1
  EXPECT_EQ(Ints(y), (std::vector<int64_t>{-128, -5, -1, 127, -128, -3, 127, -128, 1}));
}

TEST_F(QuantOpsTest, Quantize16BitAndInt32Input) {
  ir::Node node = MakeNode("QuantizeLinear", 3);
  const Tensor x = Tensor::FromVector<float>({4}, {-40000.f, 1.5f, 2.5f, 40000.f});
  Tensor zp16(DType::kInt16, {});
  zp16.data<int16_t>()[0] = -1;
  EXPECT_EQ(Ints(RunOk(node, 13, {x, Float(1.f), zp16})), (std::vector<int64_t>{-32768, 1, 1, 32767}));
  Tensor zpu16(DType::kUInt16, {});
  zpu16.data<uint16_t>()[0] = 30000;
  EXPECT_EQ(Ints(RunOk(node, 13, {x, Float(1.f), zpu16})), (std::vector<int64_t>{0, 30002, 30002, 65535}));
  // int32 input (opset 10's T1): 7 / 2 = 3.5 -> 4, 5 / 2 = 2.5 -> 2, -3 / 2 = -1.5 -> -2
  const Tensor xi = Tensor::FromVector<int32_t>({3}, {7, 5, -3});
  EXPECT_EQ(Ints(RunOk(node, 10, {xi, Float(2.f), Zp(DType::kInt8, 0)})), (std::vector<int64_t>{4, 2, -2}));
  // float16 input
  Tensor xh(DType::kFloat16, {2});
  xh.data<Float16>()[0].bits = FloatToHalf(2.5f);
  xh.data<Float16>()[1].bits = FloatToHalf(-7.f);
  EXPECT_EQ(Ints(RunOk(node, 13, {xh, Float(1.f), Zp(DType::kUInt8, 10)})), (std::vector<int64_t>{12, 3}));
  // Without a zero point, opset 21's output_dtype picks the type (int8 here).
  ir::Node typed = MakeNode("QuantizeLinear", 2);
  typed.attributes["output_dtype"] = Int(3);
  const Tensor yt = RunOk(typed, 21, {x, Float(1.f)});
  EXPECT_EQ(yt.dtype(), DType::kInt8);
  EXPECT_EQ(Ints(yt), (std::vector<int64_t>{-128, 2, 2, 127}));
  // The contrib op (com.microsoft) quantizes the same way.
  node.domain = "com.microsoft";
  EXPECT_EQ(Ints(RunOk(node, 1, {x, Float(1.f), zp16})), (std::vector<int64_t>{-32768, 1, 1, 32767}));
}

TEST_F(QuantOpsTest, QuantizePerAxis) {
  ir::Node node = MakeNode("QuantizeLinear", 3);
  // x: 2 x 3 x 2; axis 1 (default): scales 1, 2, 4 with zero points 0, 10, 20.
  const Tensor x = Tensor::FromVector<float>({2, 3, 2}, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});
  const Tensor scales = Floats({1.f, 2.f, 4.f});
  const Tensor zps = Tensor::FromVector<uint8_t>({3}, {0, 10, 20});
  EXPECT_EQ(Ints(RunOk(node, 13, {x, scales, zps})), (std::vector<int64_t>{1, 2, 12, 12, 21, 22, 0, 0, 8, 8, 19, 18}));
  // axis 0 (and -3): scales 1, 0.5
  node.attributes["axis"] = Int(-3);
  EXPECT_EQ(Ints(RunOk(node, 13, {x, Floats({1.f, 0.5f}), Tensor::FromVector<int8_t>({2}, {0, -1})})),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6, -3, -5, -7, -9, -11, -13}));
  // Per-axis needs opset 13; a scale of the wrong size is a user error.
  auto old = RunNode(MakeNode("QuantizeLinear", 3), 10, {x, scales, zps}, {}, true);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().kind, ErrorKind::kUser);
  auto wrong = RunNode(MakeNode("QuantizeLinear", 3), 13,
                       {x, Floats({1.f, 2.f}), Tensor::FromVector<uint8_t>({2}, {0, 0})}, {}, true);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("scale"), std::string::npos) << wrong.error().message;
}

TEST_F(QuantOpsTest, Dequantize) {
  const ir::Node node = MakeNode("DequantizeLinear", 3);
  const Tensor xu = Tensor::FromVector<uint8_t>({4}, {0, 3, 128, 255});
  EXPECT_EQ(RunOk(node, 10, {xu, Float(0.5f), Zp(DType::kUInt8, 128)}).ToDoubles(),
            (std::vector<double>{-64, -62.5, 0, 63.5}));
  const Tensor xs = Tensor::FromVector<int8_t>({4}, {-128, -5, 0, 127});
  EXPECT_EQ(RunOk(node, 10, {xs, Float(2.f), Zp(DType::kInt8, -5)}).ToDoubles(),
            (std::vector<double>{-246, 0, 10, 264}));
  // No zero point; int32 (bias-like values), int16 and uint16.
  const Tensor xi = Tensor::FromVector<int32_t>({3}, {-100000, 0, 7});
  EXPECT_EQ(RunOk(MakeNode("DequantizeLinear", 2), 10, {xi, Float(0.25f)}).ToDoubles(),
            (std::vector<double>{-25000, 0, 1.75}));
  const Tensor x16 = Tensor::FromVector<int16_t>({2}, {-32768, 32767});
  Tensor z16(DType::kInt16, {});
  z16.data<int16_t>()[0] = 100;
  EXPECT_EQ(RunOk(node, 13, {x16, Float(1.f), z16}).ToDoubles(), (std::vector<double>{-32868, 32667}));
  const Tensor xu16 = Tensor::FromVector<uint16_t>({2}, {0, 65535});
  EXPECT_EQ(RunOk(MakeNode("DequantizeLinear", 2), 13, {xu16, Float(0.5f)}).ToDoubles(),
            (std::vector<double>{0, 32767.5}));
  // Per axis (axis 1 of 2 x 2).
  const Tensor x2 = Tensor::FromVector<uint8_t>({2, 2}, {10, 20, 30, 40});
  EXPECT_EQ(RunOk(node, 13, {x2, Floats({1.f, 0.5f}), Tensor::FromVector<uint8_t>({2}, {10, 0})}).ToDoubles(),
            (std::vector<double>{0, 10, 20, 20}));
  // A float16 scale gives a float16 output.
  Tensor sh(DType::kFloat16, {});
  sh.data<Float16>()[0].bits = FloatToHalf(0.5f);
  const Tensor yh = RunOk(node, 19, {xu, sh, Zp(DType::kUInt8, 128)});
  ASSERT_EQ(yh.dtype(), DType::kFloat16);
  EXPECT_EQ(yh.ToDoubles(), (std::vector<double>{-64, -62.5, 0, 63.5}));
  // The zero point must have x's type.
  auto bad = RunNode(node, 13, {xu, Float(1.f), Zp(DType::kInt8, 0)}, {}, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("zero point"), std::string::npos) << bad.error().message;
}

TEST_F(QuantOpsTest, DynamicQuantizeLinear) {
  const ir::Node node = MakeNode("DynamicQuantizeLinear", 1, 3);
  auto run = [&](const Tensor& x) {
    auto out = RunNode(node, 11, {x}, {}, true, 3);
    EXPECT_TRUE(out.ok()) << out.error().message;
    return *out;
  };
  {  // min -0.5, max 3: scale 3.5 / 255, zp round(0.5 / scale) = round(36.43) = 36
    const auto out = run(Tensor::FromVector<float>({4}, {1.f, 2.5f, -0.5f, 3.f}));
    EXPECT_FLOAT_EQ(out[1].data<float>()[0], 3.5f / 255.f);
    EXPECT_EQ(Ints(out[2]), (std::vector<int64_t>{36}));
    // x / scale = 72.86, 182.14, -36.43, 218.57
    EXPECT_EQ(Ints(out[0]), (std::vector<int64_t>{109, 218, 0, 255}));
  }
  {  // all positive: the range is widened to include 0, so zp = 0
    const auto out = run(Tensor::FromVector<float>({3}, {2.f, 4.f, 5.1f}));
    EXPECT_FLOAT_EQ(out[1].data<float>()[0], 5.1f / 255.f);
    EXPECT_EQ(Ints(out[2]), (std::vector<int64_t>{0}));
    EXPECT_EQ(Ints(out[0]), (std::vector<int64_t>{100, 200, 255}));
  }
  {  // all negative: zp = 255
    const auto out = run(Tensor::FromVector<float>({2}, {-2.55f, -1.f}));
    EXPECT_EQ(Ints(out[2]), (std::vector<int64_t>{255}));
    EXPECT_EQ(Ints(out[0]), (std::vector<int64_t>{0, 155}));
  }
  {  // all zero: scale 1, zp 0 (ONNX Runtime's choice; ONNX's formula divides by 0)
    const auto out = run(Tensor::FromVector<float>({2}, {0.f, 0.f}));
    EXPECT_EQ(out[1].data<float>()[0], 1.f);
    EXPECT_EQ(Ints(out[2]), (std::vector<int64_t>{0}));
    EXPECT_EQ(Ints(out[0]), (std::vector<int64_t>{0, 0}));
  }
  {  // half to even for the zero point: min -1.5, max 253.5: scale 1, initial zp 1.5 -> 2
    const auto out = run(Tensor::FromVector<float>({3}, {-1.5f, 253.5f, 0.5f}));
    EXPECT_EQ(out[1].data<float>()[0], 1.f);
    EXPECT_EQ(Ints(out[2]), (std::vector<int64_t>{2}));
    EXPECT_EQ(Ints(out[0]), (std::vector<int64_t>{0, 255, 2}));  // -2+2, 254+2 -> 255, 0+2
  }
}

// ---------------------------------------------------------------------------
// MatMulInteger / QLinearMatMul

TEST_F(QuantOpsTest, MatMulIntegerHandComputed) {
  // (A - a_zp) x (B - b_zp) with a_zp per row, b_zp per column.
  const Tensor a = Tensor::FromVector<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = Tensor::FromVector<int8_t>({3, 2}, {1, -1, 2, 0, -3, 5});
  const Tensor az = Tensor::FromVector<uint8_t>({2}, {1, 4});
  const Tensor bz = Tensor::FromVector<int8_t>({2}, {0, -1});
  // A - az = [[0,1,2],[0,1,2]]; B - bz = [[1,0],[2,1],[-3,6]] -> [[-4, 13], [-4, 13]]
  for (bool ref : {true, false}) {
    auto out = RunNode(MakeNode("MatMulInteger", 4), 10, {a, b, az, bz}, {}, ref);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ((*out)[0].dtype(), DType::kInt32);
    EXPECT_EQ(Ints((*out)[0]), (std::vector<int64_t>{-4, 13, -4, 13}));
  }
}

struct QMatMulCase {
  Shape a, b;
  DType a_type = DType::kUInt8, b_type = DType::kInt8;
  enum Zp { kNone, kTensor, kRowCol } zp = kTensor;
  bool per_column_scale = false;
  DType y_type = DType::kUInt8;
};

void TestQMatMul(const QMatMulCase& c, bool qlinear) {
  const int64_t m = c.a.size() == 1 ? 1 : c.a[c.a.size() - 2];
  const int64_t n = c.b.size() == 1 ? 1 : c.b.back();
  const Tensor a = RandomFull(c.a_type, c.a, 1), b = RandomFull(c.b_type, c.b, 2);
  const auto ar = ops::quant::RangeOf(c.a_type), br = ops::quant::RangeOf(c.b_type);
  Tensor az, bz;
  if (c.zp == QMatMulCase::kTensor) {
    az = RandomInts(c.a_type, {}, 3, ar.lo, ar.hi);
    bz = RandomInts(c.b_type, {}, 4, br.lo, br.hi);
  } else if (c.zp == QMatMulCase::kRowCol) {
    az = RandomInts(c.a_type, {m}, 3, ar.lo, ar.hi);
    bz = RandomInts(c.b_type, {n}, 4, br.lo, br.hi);
  }
  std::string what = (qlinear ? "QLinearMatMul " : "MatMulInteger ") + ShapeToString(c.a) + " " + Name(c.a_type) +
                     " x " + ShapeToString(c.b) + " " + Name(c.b_type) + " zp=" + std::to_string(c.zp);
  if (!qlinear) {
    ir::Node node = MakeNode("MatMulInteger", c.zp == QMatMulCase::kNone ? 2 : 4);
    std::vector<Tensor> inputs{a, b};
    if (c.zp != QMatMulCase::kNone) inputs.insert(inputs.end(), {az, bz});
    ExpectFastEqualsReference(node, inputs, {false, true, false, true}, what + " (constant B)");
    ExpectFastEqualsReference(node, inputs, {}, what + " (B as input)");
    return;
  }
  if (c.zp == QMatMulCase::kNone) {
    az = Zp(c.a_type, 0);
    bz = Zp(c.b_type, 0);
  }
  const float sa = 0.02f;
  std::vector<float> sbv(c.per_column_scale ? static_cast<size_t>(n) : 1, 0.01f);
  for (size_t j = 0; j < sbv.size(); ++j) sbv[j] = 0.005f + 0.01f * static_cast<float>(j % 7) / 7.f;
  const Tensor sb = c.per_column_scale ? Floats(sbv) : Float(sbv[0]);
  // The output quantization from the exact result (MatMulInteger's reference).
  auto acc = RunNode(MakeNode("MatMulInteger", 4), 10, {a, b, az, bz}, {}, true);
  ASSERT_TRUE(acc.ok()) << acc.error().message;
  const auto yq = CalibrateOutput(
      Ints((*acc)[0]), [&](size_t i) { return sa * sbv[c.per_column_scale ? i % n : 0]; }, c.y_type);
  ir::Node node = MakeNode("QLinearMatMul", 8);
  const std::vector<Tensor> inputs{a, Float(sa), az, b, sb, bz, Float(yq.scale), Zp(c.y_type, yq.zero_point)};
  what += std::string(" per-column scale=") + (c.per_column_scale ? "1" : "0") + " y=" + Name(c.y_type);
  ExpectFastEqualsReference(node, inputs, {false, true, true, true, true, true, true, true}, what + " (constant B)");
  ExpectFastEqualsReference(node, inputs, {}, what + " (B as input)");
}

std::vector<QMatMulCase> QMatMulCases() {
  using C = QMatMulCase;
  std::vector<C> cases;
  for (DType at : {DType::kUInt8, DType::kInt8})
    for (DType bt : {DType::kUInt8, DType::kInt8})
      for (C::Zp zp : {C::kNone, C::kTensor, C::kRowCol}) {
        C c;
        c.a = {7, 13};
        c.b = {13, 5};
        c.a_type = at;
        c.b_type = bt;
        c.zp = zp;
        c.per_column_scale = zp == C::kRowCol;
        c.y_type = at;
        cases.push_back(c);
      }
  C c;
  c.zp = C::kRowCol;
  for (auto [a, b] : std::vector<std::pair<Shape, Shape>>{{{1, 1}, {1, 1}},
                                                          {{33, 65}, {65, 17}},
                                                          {{3, 5, 17}, {17, 9}},      // batch folded into rows
                                                          {{3, 5, 17}, {3, 17, 9}},   // batched B
                                                          {{2, 1, 4, 7}, {3, 7, 5}},  // broadcast batches
                                                          {{9}, {9, 4}},              // 1-D A
                                                          {{2, 3, 9}, {9}},           // 1-D B
                                                          {{64, 256}, {256, 96}}}) {
    c.a = a;
    c.b = b;
    c.zp = a.size() == 1 || b.size() == 1 ? C::kTensor : C::kRowCol;
    cases.push_back(c);
  }
  return cases;
}

TEST_F(QuantOpsTest, MatMulIntegerFastMatchesReference) {
  for (const auto& c : QMatMulCases()) TestQMatMul(c, false);
}

TEST_F(QuantOpsTest, QLinearMatMulFastMatchesReference) {
  for (auto c : QMatMulCases()) {
    TestQMatMul(c, true);
    c.y_type = c.y_type == DType::kUInt8 ? DType::kInt8 : DType::kUInt8;
    c.per_column_scale = !c.per_column_scale;
    TestQMatMul(c, true);
  }
}

TEST_F(QuantOpsTest, QLinearMatMulHandComputed) {
  // A - 1 = [[2, 0], [-1, 1]], B = [[1, 2], [1, 7]]: acc = [[2, 4], [0, 5]].
  // Multiplier 0.5 * 1 / 1: acc * 0.5 = 1, 2, 0, 2.5 -> 1, 2, 0, 2 (half to even)
  // -> + y_zp 1 = 2, 3, 1, 3 (rounding after adding the zero point would give 4 last).
  const Tensor a = Tensor::FromVector<uint8_t>({2, 2}, {3, 1, 0, 2});
  const Tensor b = Tensor::FromVector<int8_t>({2, 2}, {1, 2, 1, 7});
  const std::vector<Tensor> inputs{a,          Float(0.5f),         Zp(DType::kUInt8, 1), b,
                                   Float(1.f), Zp(DType::kInt8, 0), Float(1.f),           Zp(DType::kUInt8, 1)};
  for (bool ref : {true, false}) {
    auto out = RunNode(MakeNode("QLinearMatMul", 8), 10, inputs, {}, ref);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(Ints((*out)[0]), (std::vector<int64_t>{2, 3, 1, 3})) << (ref ? "reference" : "fast");
  }
}

// ---------------------------------------------------------------------------
// ConvInteger / QLinearConv

struct QConvCase {
  int64_t batch = 1, cin = 3, cout = 5, groups = 1;  // channels per group
  std::vector<int64_t> size{7, 9}, kernel{3, 3}, strides, dilations, pads;
  std::string auto_pad;
  DType x_type = DType::kUInt8, w_type = DType::kInt8;
  bool x_zp = true;
  enum WZp { kNone, kZero, kFits, kTensor, kChannel } w_zp = kZero;
  bool per_channel_scale = false, bias = true;
  DType y_type = DType::kUInt8;

  std::string Describe(bool qlinear) const {
    auto j = [](const std::vector<int64_t>& v) {
      std::string s;
      for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
      return "[" + s + "]";
    };
    std::string d = std::string(qlinear ? "QLinearConv" : "ConvInteger") + " N=" + std::to_string(batch) +
                    " cin/g=" + std::to_string(cin) + " cout/g=" + std::to_string(cout) +
                    " g=" + std::to_string(groups) + " in=" + j(size) + " k=" + j(kernel) + " s=" + j(strides) +
                    " d=" + j(dilations) + " p=" + j(pads) + " " + auto_pad + " x=" + Name(x_type) +
                    (x_zp ? "(zp)" : "") + " w=" + Name(w_type) + " w_zp=" + std::to_string(w_zp);
    if (qlinear)
      d += " per-channel=" + std::to_string(per_channel_scale) + " bias=" + std::to_string(bias) + " y=" + Name(y_type);
    return d;
  }
};

void TestQConv(const QConvCase& c, bool qlinear) {
  ir::Node node = MakeNode(qlinear ? "QLinearConv" : "ConvInteger", 0);
  if (!c.strides.empty()) node.attributes["strides"] = Ints(c.strides);
  if (!c.dilations.empty()) node.attributes["dilations"] = Ints(c.dilations);
  if (!c.pads.empty()) node.attributes["pads"] = Ints(c.pads);
  if (!c.auto_pad.empty()) node.attributes["auto_pad"] = String(c.auto_pad);
  if (c.groups != 1) node.attributes["group"] = Int(c.groups);
  const int64_t m = c.cout * c.groups;
  Shape xs{c.batch, c.cin * c.groups};
  xs.insert(xs.end(), c.size.begin(), c.size.end());
  Shape ws{m, c.cin};
  ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
  const Tensor x = RandomFull(c.x_type, xs, 11);
  const auto xr = ops::quant::RangeOf(c.x_type), wr = ops::quant::RangeOf(c.w_type);
  const Tensor xz = c.x_zp ? RandomInts(c.x_type, {}, 12, xr.lo, xr.hi) : Zp(c.x_type, 0);
  Tensor w = RandomFull(c.w_type, ws, 13);
  Tensor wz;
  switch (c.w_zp) {
    case QConvCase::kNone:
      break;
    case QConvCase::kZero:
      wz = Zp(c.w_type, 0);
      break;
    case QConvCase::kFits: {  // W - w_zp fits in int8: weights around the zero point
      const int32_t center = c.w_type == DType::kUInt8 ? 128 : 0;
      w = RandomInts(c.w_type, ws, 13, center - 100, center + 100);
      wz = RandomInts(c.w_type, {m}, 14, center - 20, center + 20);
      break;
    }
    case QConvCase::kTensor:
      wz = RandomInts(c.w_type, {}, 14, wr.lo, wr.hi);
      break;
    case QConvCase::kChannel:
      wz = RandomInts(c.w_type, {m}, 14, wr.lo, wr.hi);
      break;
  }
  const std::string what = c.Describe(qlinear);
  if (!qlinear) {
    std::vector<Tensor> inputs{x, w};
    if (c.x_zp || wz.defined()) inputs.push_back(xz);
    if (wz.defined()) inputs.push_back(wz);
    node.inputs.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) node.inputs[i] = "i" + std::to_string(i);
    ExpectFastEqualsReference(node, inputs, {false, true, true, true}, what + " (constant W)");
    ExpectFastEqualsReference(node, inputs, {}, what + " (W as input)");
    return;
  }
  if (!wz.defined()) wz = Zp(c.w_type, 0);
  const float sx = 0.02f;
  std::vector<float> swv(c.per_channel_scale ? static_cast<size_t>(m) : 1);
  for (size_t i = 0; i < swv.size(); ++i) swv[i] = 0.01f * (0.5f + static_cast<float>(i % 5) / 4.f);
  const Tensor w_scale = c.per_channel_scale ? Floats(swv) : Float(swv[0]);
  const Tensor bias = RandomInts(DType::kInt32, {m}, 15, -20000, 20000);
  // The output quantization from the exact result (ConvInteger's reference, plus B).
  ir::Node conv_integer = node;
  conv_integer.op_type = "ConvInteger";
  conv_integer.inputs = {"x", "w", "xz", "wz"};
  auto acc = RunNode(conv_integer, 10, {x, w, xz, wz}, {}, true);
  ASSERT_TRUE(acc.ok()) << acc.error().message;
  std::vector<int64_t> accv = Ints((*acc)[0]);
  const int64_t positions = static_cast<int64_t>(accv.size()) / (c.batch * m);
  auto channel = [&](size_t i) { return static_cast<int64_t>(i) / positions % m; };
  if (c.bias)
    for (size_t i = 0; i < accv.size(); ++i) accv[i] += bias.data<int32_t>()[channel(i)];
  const auto yq = CalibrateOutput(
      accv, [&](size_t i) { return sx * swv[c.per_channel_scale ? channel(i) : 0]; }, c.y_type);
  std::vector<Tensor> inputs{x, Float(sx), xz, w, w_scale, wz, Float(yq.scale), Zp(c.y_type, yq.zero_point)};
  if (c.bias) inputs.push_back(bias);
  node.inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs[i] = "i" + std::to_string(i);
  ExpectFastEqualsReference(node, inputs, std::vector<bool>(inputs.size(), true), what + " (constant W)");
  ExpectFastEqualsReference(node, inputs, {}, what + " (W as input)");
}

// Shapes: odd channels, groups, depthwise, stride 2, pads, dilations, batch 1 and 3,
// 1-D and 3-D, wide channels.
std::vector<QConvCase> QConvShapes() {
  std::vector<QConvCase> cases;
  QConvCase c;
  cases.push_back(c);  // 3 -> 5, 3x3 on 7x9
  c.pads = {1, 1, 1, 1};
  cases.push_back(c);
  c.strides = {2, 2};
  c.pads = {1, 0, 2, 1};
  c.batch = 3;
  cases.push_back(c);
  c = QConvCase{};
  c.groups = 2;
  c.cin = 3;
  c.cout = 7;
  c.pads = {1, 1, 1, 1};
  c.strides = {2, 1};
  cases.push_back(c);
  c = QConvCase{};  // depthwise, odd channel count
  c.groups = 13;
  c.cin = 1;
  c.cout = 1;
  c.pads = {1, 1, 1, 1};
  c.batch = 3;
  cases.push_back(c);
  c.groups = 32;  // depthwise, stride 2
  c.strides = {2, 2};
  c.size = {11, 10};
  cases.push_back(c);
  c = QConvCase{};
  c.dilations = {2, 1};
  c.auto_pad = "SAME_UPPER";
  cases.push_back(c);
  c = QConvCase{};  // 1-D
  c.size = {17};
  c.kernel = {3};
  c.strides = {2};
  c.pads = {1, 1};
  cases.push_back(c);
  c = QConvCase{};  // 3-D
  c.size = {5, 6, 7};
  c.kernel = {3, 1, 3};
  c.pads = {1, 0, 1, 1, 0, 1};
  cases.push_back(c);
  c = QConvCase{};  // pointwise, wide
  c.cin = 48;
  c.cout = 33;
  c.kernel = {1, 1};
  c.size = {9, 9};
  cases.push_back(c);
  c = QConvCase{};  // wide 3x3
  c.cin = 64;
  c.cout = 64;
  c.size = {14, 14};
  c.pads = {1, 1, 1, 1};
  cases.push_back(c);
  return cases;
}

TEST_F(QuantOpsTest, ConvIntegerFastMatchesReference) {
  for (QConvCase c : QConvShapes()) TestQConv(c, false);
  // Types and zero points on one shape with pads and groups.
  QConvCase c;
  c.groups = 2;
  c.pads = {1, 2, 0, 1};
  c.batch = 3;
  for (DType xt : {DType::kUInt8, DType::kInt8})
    for (DType wt : {DType::kUInt8, DType::kInt8})
      for (auto wz : {QConvCase::kNone, QConvCase::kZero, QConvCase::kFits, QConvCase::kTensor, QConvCase::kChannel})
        for (bool xz : {false, true}) {
          c.x_type = xt;
          c.w_type = wt;
          c.w_zp = wz;
          c.x_zp = xz;
          TestQConv(c, false);
        }
}

TEST_F(QuantOpsTest, QLinearConvFastMatchesReference) {
  for (QConvCase c : QConvShapes()) {
    TestQConv(c, true);
    c.per_channel_scale = true;  // with uint8 weights far from int8 (the extra-channel path)
    c.w_type = DType::kUInt8;
    c.w_zp = QConvCase::kChannel;
    c.x_type = DType::kInt8;
    c.y_type = DType::kInt8;
    TestQConv(c, true);
  }
  QConvCase c;
  c.batch = 3;
  c.pads = {0, 1, 1, 0};
  c.strides = {2, 2};
  for (DType xt : {DType::kUInt8, DType::kInt8})
    for (DType wt : {DType::kUInt8, DType::kInt8})
      for (auto wz : {QConvCase::kZero, QConvCase::kFits, QConvCase::kTensor, QConvCase::kChannel})
        for (bool per_channel : {false, true})
          for (bool bias : {false, true}) {
            c.x_type = xt;
            c.w_type = wt;
            c.w_zp = wz;
            c.per_channel_scale = per_channel;
            c.bias = bias;
            c.y_type = bias ? xt : (xt == DType::kUInt8 ? DType::kInt8 : DType::kUInt8);
            TestQConv(c, true);
          }
}

TEST_F(QuantOpsTest, QLinearConvRequantizesHalfToEven) {
  // A 1x1 conv of one channel: acc = (x - 3) * 1; multiplier 0.5 * 1 / 1.
  // acc * 0.5 for x - 3 = -3..5: -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5
  // round half to even: -2, -1, -0, 0, 0, 1, 2, 2, 2; + y_zp 3 (rounding after adding
  // the zero point would give 2, 2, 2, 3, 4, 4, 4, 5, 6: different at every half).
  ir::Node node = MakeNode("QLinearConv", 8);
  const Tensor x = Tensor::FromVector<uint8_t>({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor w = Tensor::FromVector<int8_t>({1, 1, 1, 1}, {1});
  const std::vector<Tensor> inputs{x,          Float(0.5f),         Zp(DType::kUInt8, 3),
                                   w,          Floats({1.f}),       Tensor::FromVector<int8_t>({1}, {0}),
                                   Float(1.f), Zp(DType::kUInt8, 3)};
  for (bool ref : {true, false}) {
    auto out = RunNode(node, 10, inputs, {false, true, true, true, true, true, true, true}, ref);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(Ints((*out)[0]), (std::vector<int64_t>{1, 2, 3, 3, 3, 4, 5, 5, 5})) << (ref ? "reference" : "fast");
  }
  // Saturation: a large bias drives every output to 255; a negative one to 0.
  std::vector<Tensor> with_bias = inputs;
  with_bias.push_back(Tensor::FromVector<int32_t>({1}, {1000}));
  EXPECT_EQ(Ints(RunOk(MakeNode("QLinearConv", 9), 10, with_bias)), std::vector<int64_t>(9, 255));
  with_bias.back() = Tensor::FromVector<int32_t>({1}, {-1000});
  EXPECT_EQ(Ints(RunOk(MakeNode("QLinearConv", 9), 10, with_bias)), std::vector<int64_t>(9, 0));
}

TEST_F(QuantOpsTest, ConvIntegerPadsWithZeroPoint) {
  // ONNX's test_convinteger_with_padding: padding contributes x_zp, i.e. nothing.
  ir::Node node = MakeNode("ConvInteger", 3);
  node.attributes["pads"] = Ints({1, 1, 1, 1});
  const Tensor x = Tensor::FromVector<uint8_t>({1, 1, 3, 3}, {2, 3, 4, 5, 6, 7, 8, 9, 10});
  const Tensor w = Tensor::FromVector<uint8_t>({1, 1, 2, 2}, {1, 1, 1, 1});
  for (bool ref : {true, false}) {
    auto out = RunNode(node, 10, {x, w, Zp(DType::kUInt8, 1)}, {false, true, true}, ref);
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(Ints((*out)[0]), (std::vector<int64_t>{1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}));
  }
}

TEST_F(QuantOpsTest, BadInputsAreUserErrors) {
  auto expect_user_error = [](const ir::Node& node, const std::vector<Tensor>& inputs, const std::string& needle) {
    for (bool ref : {true, false}) {
      auto out = RunNode(node, 13, inputs, {}, ref);
      ASSERT_FALSE(out.ok()) << node.op_type << " should fail: " << needle;
      EXPECT_EQ(out.error().kind, ErrorKind::kUser);
      EXPECT_NE(out.error().message.find(needle), std::string::npos) << out.error().message;
    }
  };
  const Tensor x = RandomFull(DType::kUInt8, {1, 4, 5, 5}, 1);
  const Tensor w = RandomFull(DType::kInt8, {6, 4, 3, 3}, 2);
  expect_user_error(MakeNode("ConvInteger", 4), {x, w, Zp(DType::kInt8, 0), Zp(DType::kInt8, 0)}, "x_zero_point");
  expect_user_error(MakeNode("ConvInteger", 4),
                    {x, w, Zp(DType::kUInt8, 0), Tensor::FromVector<int8_t>({4}, {0, 0, 0, 0})}, "w_zero_point");
  expect_user_error(MakeNode("ConvInteger", 2), {x, RandomFull(DType::kInt8, {6, 3, 3, 3}, 2)}, "W has shape");
  expect_user_error(MakeNode("ConvInteger", 2), {Tensor(DType::kFloat32, {1, 4, 5, 5}), w}, "type float32");
  expect_user_error(MakeNode("QLinearConv", 8),
                    {x, Float(1.f), Zp(DType::kUInt8, 0), w, Floats({1.f, 1.f}), Zp(DType::kInt8, 0), Float(1.f),
                     Zp(DType::kUInt8, 0)},
                    "w_scale");
  expect_user_error(MakeNode("QLinearConv", 9),
                    {x, Float(1.f), Zp(DType::kUInt8, 0), w, Float(1.f), Zp(DType::kInt8, 0), Float(1.f),
                     Zp(DType::kUInt8, 0), Tensor::FromVector<int32_t>({5}, {0, 0, 0, 0, 0})},
                    "B has shape");
  const Tensor a = RandomFull(DType::kUInt8, {3, 4}, 3), b = RandomFull(DType::kInt8, {4, 5}, 4);
  expect_user_error(MakeNode("MatMulInteger", 2), {a, RandomFull(DType::kInt8, {3, 5}, 4)}, "rows");
  expect_user_error(MakeNode("MatMulInteger", 4), {a, b, Tensor::FromVector<uint8_t>({2}, {0, 0}), Zp(DType::kInt8, 0)},
                    "a_zero_point");
  expect_user_error(MakeNode("MatMulInteger", 4),
                    {a, b, Zp(DType::kUInt8, 0), Tensor::FromVector<int8_t>({4}, {0, 0, 0, 0})}, "b_zero_point");
  expect_user_error(MakeNode("QLinearMatMul", 8),
                    {a, Float(1.f), Zp(DType::kUInt8, 0), b, Floats({1.f, 1.f}), Zp(DType::kInt8, 0), Float(1.f),
                     Zp(DType::kUInt8, 0)},
                    "b_scale");
}

// Timing, not a check (run with --gtest_also_run_disabled_tests): a 1x64x56x56 3x3
// QLinearConv (64 output channels, pads 1), single thread, fast vs reference.
TEST_F(QuantOpsTest, DISABLED_QLinearConvTiming) {
  SetNumThreads(1);
  ir::Node node = MakeNode("QLinearConv", 9);
  node.attributes["pads"] = Ints({1, 1, 1, 1});
  const Tensor x = RandomFull(DType::kUInt8, {1, 64, 56, 56}, 1);
  std::vector<float> swv(64);
  for (size_t i = 0; i < swv.size(); ++i) swv[i] = 0.001f * (1.f + static_cast<float>(i % 7));
  struct Variant {
    const char* name;
    Tensor w, wz;
  };
  const std::vector<Variant> variants{
      {"int8 W, w_zp 0 (ORT's default)", RandomFull(DType::kInt8, {64, 64, 3, 3}, 2),
       Tensor::FromVector<int8_t>({64}, std::vector<int8_t>(64, 0))},
      {"uint8 W, per-channel w_zp (extra channel)", RandomFull(DType::kUInt8, {64, 64, 3, 3}, 2),
       RandomInts(DType::kUInt8, {64}, 3, 0, 255)}};
  for (const auto& v : variants) {
    const std::vector<Tensor> inputs{x,
                                     Float(0.02f),
                                     Zp(DType::kUInt8, 7),
                                     v.w,
                                     Floats(swv),
                                     v.wz,
                                     Float(4.f),
                                     Zp(DType::kUInt8, 128),
                                     RandomInts(DType::kInt32, {64}, 4, -1000, 1000)};
    for (bool ref : {true, false}) {
      const ops::OpDef* def = ops::OpRegistry::Global().Find("", "QLinearConv", 13);
      ops::KernelInit init{node, 13, {}, ref};
      for (size_t i = 0; i < inputs.size(); ++i) init.constant_inputs.push_back(i == 0 ? nullptr : &inputs[i]);
      auto kernel = def->create(init);
      ASSERT_TRUE(kernel.ok());
      QTestContext warm(inputs, 1);
      ASSERT_TRUE((*kernel)->Run(warm).ok());
      const int runs = ref ? 2 : 200;
      const auto start = std::chrono::steady_clock::now();
      const std::clock_t cpu_start = std::clock();  // CPU time: less disturbed by a busy machine
      for (int r = 0; r < runs; ++r) {
        QTestContext ctx(inputs, 1);
        ASSERT_TRUE((*kernel)->Run(ctx).ok());
      }
      const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC / runs;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;
      std::printf("QLinearConv 1x64x56x56 3x3 -> 64, %s, %s: %.3f ms (CPU %.3f ms)\n", v.name,
                  ref ? "reference" : "fast", ms, cpu_ms);
    }
  }
  SetNumThreads(2);
}

}  // namespace
}  // namespace seqto
