// SmoothQuant on a transformer with outlier activation channels, against ONNX Runtime.
// The model is built here (testing::OutlierTransformerModel: seeded random weights, a
// LayerNorm whose gamma is 30x..100x on four channels feeding the FFN's MatMul, as
// LLMs' activations have), reading Fashion-MNIST images as 28 tokens of 28 pixels.
// Static per-tensor uint8/int8 MinMax quantization, calibrated on 100 training images,
// measured on 200 test images against the float model (output SQNR, top-1
// agreement): none, smooth_quant (alpha 0.5), its alpha search, and without folding. SmoothQuant must
// gain a clear margin of SQNR, and the smoothed QDQ models must be plain ONNX that
// ONNX Runtime runs with the same top-1 as seqto (docs/design.md, SmoothQuant).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "quant/recover/recover.h"
#include "runners/runner.h"
#include "support/fashion_data.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;

const char* kDataDir = "/usr/share/datasets/fashion-mnist/";

// Fashion images [N, 1, 28, 28] as token sequences [N, 28, 28].
Expected<Tensor> Tokens(const std::string& images, int64_t samples, uint64_t seed) {
  SEQTO_ASSIGN_OR_RETURN(testing::FashionSamples s, testing::LoadFashionSamples(images, samples, seed));
  return s.x.Reshaped({s.x.dim(0), 28, 28});
}

Expected<Tensor> RunOn(const std::string& runner, const ir::Model& model, const std::string& tag, const Tensor& x) {
  const fs::path path =
      fs::path(::testing::TempDir()) / ("seqto_sq_" + tag + "_" + std::to_string(::getpid()) + ".onnx");
  SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(model, path.string()));
  runners::RunnerOptions options;
  options.threads = 1;
  SEQTO_ASSIGN_OR_RETURN(auto r, runners::MakeRunner(runner, options));
  auto out = r->Run(path.string(), {{{"x", x}}});
  fs::remove(path);
  if (!out) return out.error();
  auto it = out->find("logits");
  if (it == out->end()) return UserError(runner + ": no output 'logits'");
  return it->second;
}

double SqnrDb(const Tensor& ref, const Tensor& got) {
  const auto a = ref.ToDoubles(), b = got.ToDoubles();
  double signal = 0, noise = 0;
  for (size_t i = 0; i < a.size(); ++i) signal += a[i] * a[i], noise += (a[i] - b[i]) * (a[i] - b[i]);
  return 10 * std::log10(signal / noise);
}

double AgreementPercent(const Tensor& a, const Tensor& b) {
  auto x = Top1(a), y = Top1(b);
  EXPECT_TRUE(x.ok() && y.ok());
  if (!x.ok() || !y.ok()) return 0;
  size_t same = 0;
  for (size_t i = 0; i < x->size(); ++i) same += (*x)[i] == (*y)[i];
  return 100.0 * same / std::max<size_t>(x->size(), 1);
}

// The pipeline of seqto quantize (cli/cmd_quantize.cc): static, per-tensor, MinMax.
Expected<ir::Model> Quantize(const ir::Model& model, const std::string& recover, const Tensor& calib,
                             nlohmann::json& record) {
  quant::QuantOptions o;
  if (!recover.empty()) {
    SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec, quant::recover::ParseRecoverySpec(recover, "test"));
    o.recovery.push_back(spec);
  }
  std::vector<runtime::TensorMap> batches;
  for (int64_t b = 0; b < calib.dim(0); b += 20) {
    SEQTO_ASSIGN_OR_RETURN(Tensor rows, runners::SliceDim0(calib, b, std::min(calib.dim(0), b + 20)));
    batches.push_back({{"x", std::move(rows)}});
  }
  quant::BatchList list;
  list.num_batches = batches.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return batches[i]; };
  SEQTO_ASSIGN_OR_RETURN(ir::Model prepared, quant::QuantPlan::Prepare(model));
  quant::recover::RecoveryContext ctx;
  ctx.calibration = &list;
  ctx.threads = 1;
  record = nlohmann::json::array();
  SEQTO_ASSIGN_OR_RETURN(ir::Model rewritten, quant::recover::RewriteFloatModel(prepared, o, ctx, record));
  SEQTO_ASSIGN_OR_RETURN(auto tensors, quant::QuantPlan::TensorsToCalibrate(rewritten, o));
  size_t next = 0;
  quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next >= batches.size()) return false;
    feeds = batches[next++];
    return true;
  };
  SEQTO_ASSIGN_OR_RETURN(auto stats, quant::Calibrate(rewritten, tensors, source, o.calibration_options, 1));
  SEQTO_ASSIGN_OR_RETURN(auto ranges, stats.Ranges(o.calibration));
  SEQTO_ASSIGN_OR_RETURN(quant::QuantPlan plan, quant::QuantPlan::Create(rewritten, o, &ranges));
  SEQTO_RETURN_IF_ERROR(quant::recover::RefinePlan(plan, ctx, record));
  return plan.Materialize();
}

TEST(SmoothQuantInterop, OutlierTransformerGainsAndOnnxRuntimeAgrees) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  if (!fs::exists(std::string(kDataDir) + "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  auto calib = Tokens("train-images-idx3-ubyte.gz", 100, 2);
  auto eval = Tokens("t10k-images-idx3-ubyte.gz", 200, 1);
  ASSERT_TRUE(calib.ok()) << calib.error().message;
  ASSERT_TRUE(eval.ok()) << eval.error().message;
  std::mt19937 rng(2024);
  const ir::Model model = testing::OutlierTransformerModel(rng);
  auto float_out = RunOn("engine", model, "float", *eval);
  ASSERT_TRUE(float_out.ok()) << float_out.error().message;

  std::map<std::string, double> sqnr;
  for (const std::string recover :
       {"", "smooth_quant", "smooth_quant:alpha_search=true", "smooth_quant:folding=false"}) {
    SCOPED_TRACE(recover.empty() ? "none" : recover);
    nlohmann::json record;
    auto q = Quantize(model, recover, *calib, record);
    ASSERT_TRUE(q.ok()) << q.error().message;
    Status check = onnxio::CheckModel(*q);
    ASSERT_TRUE(check.ok()) << check.message();
    for (const auto& node : q->graph.nodes)
      EXPECT_TRUE(node.domain.empty() || node.domain == "ai.onnx") << node.name << " is in " << node.domain;
    auto ours = RunOn("engine", *q, "q", *eval);
    auto theirs = RunOn("ort", *q, "q", *eval);
    ASSERT_TRUE(ours.ok()) << ours.error().message;
    ASSERT_TRUE(theirs.ok()) << theirs.error().message;
    sqnr[recover] = SqnrDb(*float_out, *ours);
    std::printf(
        "[%s] output SQNR %.2f dB (ORT %.2f dB), top-1 agreement with float %.1f%% (ORT %.1f%%); ORT agrees "
        "with seqto on %.1f%%; %s\n",
        recover.empty() ? "none" : recover.c_str(), sqnr[recover], SqnrDb(*float_out, *theirs),
        AgreementPercent(*float_out, *ours), AgreementPercent(*float_out, *theirs), AgreementPercent(*ours, *theirs),
        record.empty() ? "" : record[0]["result"].dump().c_str());
    EXPECT_GE(AgreementPercent(*ours, *theirs), 99.5);
    if (!recover.empty()) {
      const auto& r = record.at(0).at("result");
      // The LayerNorm and the FFN's Relu fold; the embedding (graph input) and the
      // classifier (after ReduceMean) get a Mul; without folding all four do.
      const bool folding = recover.find("folding=false") == std::string::npos;
      EXPECT_EQ(r.value("groups", 0), 4) << r;
      EXPECT_EQ(r.value("folded", -1), folding ? 2 : 0) << r;
      EXPECT_EQ(r.value("inserted_muls", -1), folding ? 2 : 4) << r;
    }
  }
  EXPECT_GT(sqnr["smooth_quant"], sqnr[""] + 6.0);
  EXPECT_GT(sqnr["smooth_quant:alpha_search=true"], sqnr[""] + 6.0);
  // The gain is the folds': a Mul quantized on A's own grid first keeps none of it.
  EXPECT_GT(sqnr["smooth_quant"], sqnr["smooth_quant:folding=false"] + 6.0);
}

}  // namespace
}  // namespace seqto
