// A conv whose per-channel weight scales are far too small for its int32 bias (the
// dead channels of a folded BatchNorm whose gamma is ~0, as in PP-OCRv4's recognizer),
// quantized per channel, against ONNX Runtime: the QDQ model must be plain ONNX that
// ONNX Runtime runs with the same results as seqto, and both within quantization error
// of the float model (docs/design.md, Defaults and per-channel axes: bias).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "onnxio/model_io.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"
#include "support/test_quantize.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;

// x[4,2,6,6] -> conv (4 output channels, 3x3, pad 1, bias) -> relu -> conv2 (1x1) -> y.
// Output channel 1 of the first conv has all-zero weights, channel 2 weights of
// ~1e-30 (a scale of ~1e-32: its bias would need 2^90 times that scale in int32),
// channel 3 weights of ~1e-12 (2^30 times); each carries a bias the next conv sees.
ir::Model DeadChannelConv(std::mt19937& rng) {
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back(testing::FloatValue("x", {{-1, "N"}, {2}, {6}, {6}}));
  g.outputs.push_back(testing::FloatValue("y", {{-1, "N"}, {2}, {6}, {6}}));
  Tensor w = testing::RandomTensor({4, 2, 3, 3}, rng);
  float* wd = w.data<float>();
  for (int64_t i = 18; i < 36; ++i) wd[i] = 0.0f;
  for (int64_t i = 36; i < 54; ++i) wd[i] *= 1e-30f;
  for (int64_t i = 54; i < 72; ++i) wd[i] *= 1e-12f;
  g.initializers["w"] = w;
  g.initializers["b"] = Tensor::FromVector<float>({4}, {0.25f, 0.75f, 0.5f, 1.5f});
  g.initializers["w2"] = testing::RandomTensor({2, 4, 1, 1}, rng);
  ir::Node conv = testing::MakeNode("conv", "Conv", {"x", "w", "b"}, {"c"});
  conv.attributes["pads"] = testing::Ints({1, 1, 1, 1});
  g.nodes.push_back(conv);
  g.nodes.push_back(testing::MakeNode("relu", "Relu", {"c"}, {"r"}));
  g.nodes.push_back(testing::MakeNode("conv2", "Conv", {"r", "w2"}, {"y"}));
  for (const char* v : {"c", "r"}) g.value_infos.push_back({v, DType::kFloat32, std::nullopt});
  return m;
}

Expected<Tensor> RunEngine(const ir::Model& m, const Tensor& x) {
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(m));
  SEQTO_ASSIGN_OR_RETURN(auto out, session->Run({{"x", x}}));
  return out.at("y");
}

Expected<Tensor> RunOrt(const ir::Model& m, const Tensor& x) {
  const fs::path path = fs::path(::testing::TempDir()) / ("seqto_bias_fit_" + std::to_string(::getpid()) + ".onnx");
  SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(m, path.string()));
  auto out = testing::OrtRun(path.string(), {{"x", x}});
  fs::remove(path);
  if (!out.ok()) return out.error();
  return out->at("y");
}

TEST(BiasFitInterop, DeadChannelsQuantizePerChannelAndOnnxRuntimeAgrees) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  std::mt19937 rng(14);
  const ir::Model model = DeadChannelConv(rng);
  const Tensor x = testing::RandomTensor({4, 2, 6, 6}, rng);
  auto q = testing::QuantizeForTest(model, x);
  ASSERT_TRUE(q.ok()) << q.error().message;
  Status check = onnxio::CheckModel(*q);
  ASSERT_TRUE(check.ok()) << check.message();

  auto ref = RunEngine(model, x);
  auto ours = RunEngine(*q, x);
  auto theirs = RunOrt(*q, x);
  ASSERT_TRUE(ref.ok()) << ref.error().message;
  ASSERT_TRUE(ours.ok()) << ours.error().message;
  ASSERT_TRUE(theirs.ok()) << theirs.error().message;
  const auto a = ref->ToDoubles(), b = ours->ToDoubles(), c = theirs->ToDoubles();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  // y's uint8 step is at most its range / 255; the quantized convs add a few steps.
  double lo = 0, hi = 0;
  for (double v : a) lo = std::min(lo, v), hi = std::max(hi, v);
  const double step = (hi - lo) / 255;
  double worst_float = 0, worst_ort = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst_float = std::max(worst_float, std::fabs(b[i] - a[i]));
    worst_ort = std::max(worst_ort, std::fabs(c[i] - b[i]));
  }
  std::printf("y step %.4g; seqto vs float: worst %.4g; ONNX Runtime vs seqto: worst %.4g\n", step, worst_float,
              worst_ort);
  EXPECT_LE(worst_float, 4 * step);
  EXPECT_LE(worst_ort, 1.01 * step);  // at most one rounding apart
}

}  // namespace
}  // namespace seqto
