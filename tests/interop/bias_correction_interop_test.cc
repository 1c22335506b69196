// Bias-corrected models against ONNX Runtime: the bundled Fashion-MNIST models
// quantized statically (per tensor and per channel) with --recover bias_correction
// are plain QDQ models (corrected int32 biases, no custom ops): they pass the ONNX
// checker, run in ONNX Runtime, and ONNX Runtime's and seqto's top-1 agree on >= 99.5%
// of the samples. Accuracy against the labels, with and without the correction, is
// printed (docs/design.md, Accuracy recovery).
//
// Data as in quant_interop_test.cc: calibration on 256 training images (batches of
// 16), evaluation on a seeded subset of the test set (SEQTO_QUANT_EVAL_SAMPLES,
// default 2000).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "data/open_dataset.h"
#include "data/sampling.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "quant/recover/recover.h"
#include "runners/runner.h"
#include "support/fashion_data.h"
#include "support/ort_oracle.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;

const char* kDataDir = "/usr/share/datasets/fashion-mnist/";
using Data = testing::FashionSamples;

Expected<Data> Load(const std::string& images, int64_t samples, uint64_t seed) {
  return testing::LoadFashionSamples(images, samples, seed);
}

// The samples in batches of `size` rows.
Expected<std::vector<runtime::TensorMap>> Batches(const Tensor& x, int64_t size) {
  std::vector<runtime::TensorMap> batches;
  for (int64_t b = 0; b < x.dim(0); b += size) {
    SEQTO_ASSIGN_OR_RETURN(Tensor rows, runners::SliceDim0(x, b, std::min(x.dim(0), b + size)));
    batches.push_back({{"input", std::move(rows)}});
  }
  return batches;
}

// Top-1 classes, the eval module's ranking rules (a failure is a test failure).
std::vector<int64_t> Classes(const Tensor& logits) {
  auto top1 = seqto::Top1(logits);
  EXPECT_TRUE(top1.ok()) << top1.error().message;
  return top1.ok() ? *top1 : std::vector<int64_t>{};
}

double Percent(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return 100.0 * same / std::max<size_t>(a.size(), 1);
}

// The logits of the model at `path` on `x`, from the runner `runner` ("engine", "ort").
Expected<Tensor> RunOn(const std::string& runner, const std::string& path, const Tensor& x) {
  runners::RunnerOptions options;
  options.threads = 1;
  SEQTO_ASSIGN_OR_RETURN(auto r, runners::MakeRunner(runner, options));
  SEQTO_ASSIGN_OR_RETURN(auto batches, Batches(x, 250));
  SEQTO_ASSIGN_OR_RETURN(auto out, r->Run(path, batches));
  auto it = out.find("logits");
  if (it == out.end()) return UserError(runner + ": no output 'logits'");
  return it->second;
}

Expected<Tensor> RunModel(const std::string& runner, const ir::Model& model, const std::string& tag, const Tensor& x) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("seqto_bc_" + tag + "_" + std::to_string(::getpid()) + ".onnx");
  SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(model, path.string()));
  auto out = RunOn(runner, path.string(), x);
  fs::remove(path);
  return out;
}

class BiasCorrectionInterop : public ::testing::TestWithParam<std::string> {};

TEST_P(BiasCorrectionInterop, OnnxRuntimeAgreesWithSeqto) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  if (!fs::exists(std::string(kDataDir) + "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  int64_t n = 2000;
  if (const char* env = std::getenv("SEQTO_QUANT_EVAL_SAMPLES")) n = std::atoll(env);
  auto eval = Load("t10k-images-idx3-ubyte.gz", n, 1);
  auto calib = Load("train-images-idx3-ubyte.gz", 256, 2);
  ASSERT_TRUE(eval.ok() && calib.ok());
  auto calib_batches = Batches(calib->x, 16);
  ASSERT_TRUE(calib_batches.ok()) << calib_batches.error().message;
  quant::BatchList list;
  list.num_batches = calib_batches->size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return (*calib_batches)[i]; };

  const std::string name = GetParam();
  auto model = onnxio::LoadModel(std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/" + name + ".onnx");
  ASSERT_TRUE(model.ok()) << model.error().message;
  for (bool per_channel : {false, true}) {
    const std::string variant = per_channel ? "per-channel" : "per-tensor";
    SCOPED_TRACE(name + " " + variant);
    quant::QuantOptions o;
    o.per_channel = per_channel;
    o.recovery.push_back({"bias_correction", {}});
    // The pipeline of seqto quantize (cli/cmd_quantize.cc).
    auto prepared = quant::QuantPlan::Prepare(*model);
    ASSERT_TRUE(prepared.ok()) << prepared.error().message;
    quant::recover::RecoveryContext ctx;
    ctx.calibration = &list;
    ctx.threads = 1;
    nlohmann::json record = nlohmann::json::array();
    auto rewritten = quant::recover::RewriteFloatModel(*prepared, o, ctx, record);
    ASSERT_TRUE(rewritten.ok()) << rewritten.error().message;
    auto tensors = quant::QuantPlan::TensorsToCalibrate(*rewritten, o);
    ASSERT_TRUE(tensors.ok()) << tensors.error().message;
    size_t next = 0;
    quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
      if (next >= calib_batches->size()) return false;
      feeds = (*calib_batches)[next++];
      return true;
    };
    auto stats = quant::Calibrate(*rewritten, *tensors, source, o.calibration_options, 1);
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    auto ranges = stats->Ranges(o.calibration);
    ASSERT_TRUE(ranges.ok()) << ranges.error().message;
    auto plan = quant::QuantPlan::Create(*rewritten, o, &*ranges);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    quant::QuantPlan uncorrected = *plan;
    Status refined = quant::recover::RefinePlan(*plan, ctx, record);
    ASSERT_TRUE(refined.ok()) << refined.message();
    ASSERT_FALSE(plan->refinements().values.empty());

    auto corrected_model = plan->Materialize();
    auto plain_model = uncorrected.Materialize();
    ASSERT_TRUE(corrected_model.ok() && plain_model.ok());
    Status check = onnxio::CheckModel(*corrected_model);
    ASSERT_TRUE(check.ok()) << check.message();
    for (const auto& node : corrected_model->graph.nodes)
      EXPECT_TRUE(node.domain.empty() || node.domain == "ai.onnx") << node.name << " is in " << node.domain;

    auto float_out = RunModel("engine", *rewritten, name + "_float", eval->x);
    auto plain_out = RunModel("engine", *plain_model, name + "_plain", eval->x);
    auto ours = RunModel("engine", *corrected_model, name + "_bc", eval->x);
    auto theirs = RunModel("ort", *corrected_model, name + "_bc", eval->x);
    ASSERT_TRUE(float_out.ok()) << float_out.error().message;
    ASSERT_TRUE(plain_out.ok()) << plain_out.error().message;
    ASSERT_TRUE(ours.ok()) << ours.error().message;
    ASSERT_TRUE(theirs.ok()) << theirs.error().message;
    const auto f = Classes(*float_out), p = Classes(*plain_out), a = Classes(*ours), b = Classes(*theirs);
    std::printf(
        "[%s %s] top-1: float %.2f%%, quantized %.2f%%, bias-corrected %.2f%% (ORT %.2f%%); agreement with float "
        "%.2f%% -> %.2f%%; ORT agrees with seqto on %.2f%%\n",
        name.c_str(), variant.c_str(), Percent(f, eval->labels), Percent(p, eval->labels), Percent(a, eval->labels),
        Percent(b, eval->labels), Percent(p, f), Percent(a, f), Percent(a, b));
    EXPECT_GE(Percent(a, b), 99.5);
    EXPECT_GT(Percent(a, eval->labels), Percent(f, eval->labels) - 3.0);
  }
}

INSTANTIATE_TEST_SUITE_P(FashionMnist, BiasCorrectionInterop, ::testing::Values("mobilenetv2", "resnet"));

}  // namespace
}  // namespace seqto
