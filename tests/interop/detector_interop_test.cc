// A text detector's neck and head (tests/support DetectorHeadModel: nearest and linear
// Resize, Concat, ConvTranspose 2x2/2, BatchNormalization after a bias Add) against
// ONNX Runtime, float and quantized: seqto runs it channels-last (Resizes with
// permuted scales, ConvTranspose as a matmul writing Y in place, the BatchNorm as a
// depthwise 1x1 conv, the quantized nearest Resize on the 8-bit data).
// Float: max|seqto - ort| <= 1e-4 * max|ort| + 1e-5. Quantized: seqto's optimized
// session equals its unfused reference session within one quantum of the output,
// and ONNX Runtime (which runs the QDQ model with its own integer kernels, rounding
// values near a tie either way, a difference the layers after carry and grow) is
// within one quantum on at least 98% of the outputs and within 8 everywhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "onnxio/model_io.h"
#include "rewrite/passes.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"
#include "support/test_quantize.h"

namespace seqto {
namespace {

// The output of `model` on `x` from seqto's optimized session, from its unfused
// reference session (`plain`, when given) and from ORT.
void RunBoth(const ir::Model& model, const Tensor& x, std::vector<double>& ours, std::vector<double>& theirs,
             std::vector<double>* plain = nullptr) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / ("seqto_detector_" + std::to_string(::getpid()) + ".onnx"))
          .string();
  ASSERT_TRUE(onnxio::SaveModel(model, path).ok());
  const runtime::TensorMap inputs = {{model.graph.inputs.at(0).name, x}};
  auto session = runtime::Session::Create(model);
  ASSERT_TRUE(session) << session.error().message;
  auto out = (*session)->Run(inputs);
  ASSERT_TRUE(out) << out.error().message;
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  auto ref = testing::OrtRun(path, inputs);
  std::filesystem::remove(path);
  ASSERT_TRUE(ref) << ref.error().message;
  const std::string y = model.graph.outputs.at(0).name;
  ASSERT_EQ(ShapeToString(out->at(y).shape()), ShapeToString(ref->at(y).shape()));
  ours = out->at(y).ToDoubles();
  if (plain) {
    runtime::SessionOptions unfused;
    unfused.optimize = false;
    unfused.reference_only = true;
    auto reference = runtime::Session::Create(model, unfused);
    ASSERT_TRUE(reference) << reference.error().message;
    auto r = (*reference)->Run(inputs);
    ASSERT_TRUE(r) << r.error().message;
    *plain = r->at(y).ToDoubles();
  }
  theirs = ref->at(y).ToDoubles();
}

TEST(DetectorInterop, FloatHeadMatchesOrt) {
  std::mt19937 rng(21);
  const ir::Model model = testing::DetectorHeadModel(rng);
  std::vector<double> ours, theirs;
  RunBoth(model, testing::RandomTensor({2, 3, 8, 6}, rng, -2.f, 2.f), ours, theirs);
  ASSERT_FALSE(theirs.empty());
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(theirs[i]));
    max_diff = std::max(max_diff, std::fabs(ours[i] - theirs[i]));
  }
  EXPECT_LE(max_diff, 1e-4 * max_ref + 1e-5) << "max |ort| = " << max_ref;
}

TEST(DetectorInterop, QuantizedHeadMatchesOrt) {
  std::mt19937 rng(22);
  const ir::Model model = testing::DetectorHeadModel(rng);
  const Tensor calib = testing::RandomTensor({8, 3, 8, 6}, rng, -2.f, 2.f);
  auto q = testing::QuantizeForTest(model, calib);
  ASSERT_TRUE(q.ok()) << q.error().message;
  std::vector<double> ours, theirs, plain;
  RunBoth(*q, testing::RandomTensor({2, 3, 8, 6}, rng, -2.f, 2.f), ours, theirs, &plain);
  ASSERT_FALSE(theirs.empty());
  ASSERT_EQ(plain.size(), ours.size());
  const double quantum = testing::SmallestGap(theirs);
  double max_plain = 0, max_ort = 0;
  size_t over_one = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    max_plain = std::max(max_plain, std::fabs(ours[i] - plain[i]));
    const double d = std::fabs(ours[i] - theirs[i]);
    max_ort = std::max(max_ort, d);
    over_one += d > 1.5 * quantum;
  }
  EXPECT_LE(max_plain, quantum + 1e-6) << "against the unfused graph, quantum " << quantum;
  EXPECT_LE(max_ort, 8 * quantum + 1e-6) << "against ONNX Runtime, quantum " << quantum;
  EXPECT_LE(over_one, theirs.size() / 50) << "outputs more than one quantum from ONNX Runtime's";
}

}  // namespace
}  // namespace seqto
