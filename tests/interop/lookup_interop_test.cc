// fuse-unary-lookups against ONNX Runtime: a QDQ model of PP-LCNet's learnable
// affine block and HardSwish written out (x * Clip(x + 3, 0, 6) / 6), each op with
// its own Q/DQ, on a uint8 input holding all 256 codes. seqto runs it as one
// com.seqto.QLookup; ONNX Runtime runs its own QDQ fusions (QLinearAdd / QLinearMul
// with precomputed scale ratios), which round differently where a real value lies
// near a .5 tie; a one-quantum flip in an intermediate (scale 0.05) moves the output
// (scale 0.01, after x * Clip(..) / 6) by up to two. Agreement: seqto's lookup equals
// its unfused graph exactly, and ONNX Runtime within two quanta on every code, with
// at most 3 of the 256 codes different (measured: 2, one by two quanta).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "onnxio/model_io.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"

namespace seqto {
namespace {

using testing::MakeNode;

class Builder {
 public:
  explicit Builder(ir::Graph& g) : g_(g) {}
  std::string Const(Tensor t) {
    const std::string name = "c" + std::to_string(count_++);
    g_.initializers[name] = std::move(t);
    return name;
  }
  std::string Op(const std::string& op, std::vector<std::string> in) {
    const std::string out = op + "_" + std::to_string(count_++);
    g_.nodes.push_back(MakeNode(out, op, std::move(in), {out}));
    return out;
  }
  std::string Zp(uint8_t v) { return Const(Tensor::FromVector<uint8_t>({}, {v})); }
  std::string Q(const std::string& x, float s, uint8_t zp) {
    return Op("QuantizeLinear", {x, Const(Tensor::Scalar<float>(s)), Zp(zp)});
  }
  std::string Dq(const std::string& x, float s, uint8_t zp) {
    return Op("DequantizeLinear", {x, Const(Tensor::Scalar<float>(s)), Zp(zp)});
  }
  std::string Qdq(const std::string& x, float s, uint8_t zp) { return Dq(Q(x, s, zp), s, zp); }
  // A constant as quantizers write it: DQ of a uint8 [1].
  std::string QuantizedConst(uint8_t code, float s) {
    return Op("DequantizeLinear",
              {Const(Tensor::FromVector<uint8_t>({1}, {code})), Const(Tensor::Scalar<float>(s)), Zp(0)});
  }

 private:
  ir::Graph& g_;
  int count_ = 0;
};

TEST(LookupInterop, WrittenOutHardSwishMatchesOrt) {
  ir::Model m;
  m.opsets[""] = 13;
  ir::Graph& g = m.graph;
  g.name = "lookups";
  g.inputs.push_back({"q", DType::kUInt8, std::vector<ir::Dim>{{1}, {4}, {8}, {8}}});
  Builder b(g);
  // affine: x * 1.25 + (-0.5), then HardSwish
  std::string x = b.Dq("q", 0.04f, 128);
  x = b.Qdq(b.Op("Mul", {b.QuantizedConst(125, 0.01f), x}), 0.05f, 128);
  x = b.Qdq(b.Op("Add", {x, b.Const(Tensor::FromVector<float>({1}, {-0.5f}))}), 0.05f, 138);
  const std::string a = b.Qdq(b.Op("Add", {x, b.QuantizedConst(150, 0.02f)}), 0.06f, 0);
  const std::string c =
      b.Qdq(b.Op("Clip", {a, b.Const(Tensor::Scalar<float>(0.f)), b.Const(Tensor::Scalar<float>(6.f))}), 6.f / 255, 0);
  const std::string h = b.Qdq(b.Op("Mul", {x, c}), 0.05f, 30);
  b.Q(b.Op("Div", {h, b.Const(Tensor::FromVector<float>({1}, {6.f}))}), 0.01f, 40);
  g.outputs.push_back({g.nodes.back().outputs[0], DType::kUndefined, std::nullopt});

  Tensor codes(DType::kUInt8, {1, 4, 8, 8});
  std::iota(codes.data<uint8_t>(), codes.data<uint8_t>() + 256, uint8_t{0});
  const runtime::TensorMap inputs = {{"q", codes}};
  runtime::SessionOptions o;
  o.threads = 1;
  auto session = runtime::Session::Create(m, o);
  ASSERT_TRUE(session) << session.error().message;
  (*session)->EnableProfiling(true);
  int lookups = 0, steps = 0;
  for (const auto& step : (*session)->Profile()) lookups += step.op_type == "QLookup", ++steps;
  EXPECT_EQ(lookups, 1);
  EXPECT_EQ(steps, 1);
  auto ours = (*session)->Run(inputs);
  ASSERT_TRUE(ours) << ours.error().message;
  runtime::SessionOptions unfused_options = o;
  unfused_options.optimize = false;
  auto unfused = runtime::Session::Create(m, unfused_options);
  ASSERT_TRUE(unfused) << unfused.error().message;
  auto plain = (*unfused)->Run(inputs);
  ASSERT_TRUE(plain) << plain.error().message;

  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / ("seqto_lookups_" + std::to_string(::getpid()) + ".onnx"))
          .string();
  ASSERT_TRUE(onnxio::SaveModel(m, path).ok());
  auto ref = testing::OrtRun(path, inputs);
  std::filesystem::remove(path);
  ASSERT_TRUE(ref) << ref.error().message;
  const std::string out = g.outputs[0].name;
  const std::vector<double> got = ours->at(out).ToDoubles(), want = ref->at(out).ToDoubles();
  EXPECT_EQ(got, plain->at(out).ToDoubles());
  ASSERT_EQ(got.size(), want.size());
  int differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), 2.0) << "code " << i;
    differ += got[i] != want[i];
  }
  EXPECT_LE(differ, 3) << "of 256 codes";
}

}  // namespace
}  // namespace seqto
