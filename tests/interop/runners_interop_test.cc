// The ort runner against real ONNX Runtime (tools/ort), and the engine runner against
// it: both are given the same model file and the same batches and must agree within
// max|engine - ort| <= 1e-4 * max|ort| per output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/npy.h"
#include "runners/ort_runner.h"
#include "runners/runner.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;
using runtime::TensorMap;

fs::path Example(const std::string& name) { return fs::path(SEQTO_SOURCE_DIR) / "examples" / "fashion-mnist" / name; }

// The bundled Fashion-MNIST sample (8 images) as batches of 3 and 5.
std::vector<TensorMap> UnevenBatches(Tensor* all = nullptr) {
  auto input = ReadNpy(Example("sample_input.npy").string());
  EXPECT_TRUE(input) << input.error().message;
  if (!input) return {};
  if (all) *all = *input;
  auto a = runners::SliceDim0(*input, 0, 3), b = runners::SliceDim0(*input, 3, 8);
  EXPECT_TRUE(a && b);
  return {{{"input", *a}}, {{"input", *b}}};
}

// max |got - want| / max |want| over all elements.
double RelativeError(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.Describe(), want.Describe());
  const auto g = got.ToDoubles(), w = want.ToDoubles();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

std::unique_ptr<runners::Runner> Make(const std::string& name) {
  auto runner = runners::MakeRunner(name, {.threads = 1});
  EXPECT_TRUE(runner) << runner.error().message;
  return runner ? std::move(*runner) : nullptr;
}

TEST(RunnersInterop, EngineAndOrtAgreeOnUnevenBatches) {
  const std::string model = Example("resnet.onnx").string();
  Tensor all;
  const auto batches = UnevenBatches(&all);
  ASSERT_EQ(batches.size(), 2u);
  auto engine = Make("engine"), ort = Make("ort");
  ASSERT_TRUE(engine && ort);
  EXPECT_EQ(ort->name(), "ort");
  auto e = engine->Run(model, batches);
  ASSERT_TRUE(e) << e.error().message;
  auto o = ort->Run(model, batches);
  ASSERT_TRUE(o) << o.error().message;
  ASSERT_EQ(o->size(), 1u);
  ASSERT_EQ(o->at("logits").Describe(), "float32[8x10]");
  EXPECT_LE(RelativeError(e->at("logits"), o->at("logits")), 1e-4);

  // The concatenation is right: the same as ORT on all 8 samples in one batch, and
  // each half as ORT on that half alone.
  auto whole = ort->Run(model, {{{"input", all}}});
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_LE(RelativeError(o->at("logits"), whole->at("logits")), 1e-5);
  auto second = ort->Run(model, {batches[1]});
  ASSERT_TRUE(second) << second.error().message;
  auto rows = runners::SliceDim0(o->at("logits"), 3, 8);
  ASSERT_TRUE(rows);
  EXPECT_LE(RelativeError(*rows, second->at("logits")), 1e-5);
}

TEST(RunnersInterop, OrtLatencyAndMeasure) {
  const std::string model = Example("resnet.onnx").string();
  const auto batches = UnevenBatches();
  ASSERT_EQ(batches.size(), 2u);
  auto ort = Make("ort");
  ASSERT_TRUE(ort);

  // Wall time of a call against the latency measured inside it: the difference is the
  // per-call overhead (Node.js start-up, model loading, .npy files).
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = ort->Latency(model, batches[0], {.warmup = 2, .runs = 9});
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->runs, 9);
  EXPECT_GT(stats->min, 0);
  EXPECT_LE(stats->min, stats->p50);
  EXPECT_LE(stats->p50, stats->p95);
  EXPECT_LE(stats->p95, stats->max);
  EXPECT_LT(stats->mean * 11, wall_ms);  // timed inside the child: start-up is not counted
  ::testing::Test::RecordProperty("ort_call_overhead_ms", std::to_string(wall_ms - stats->mean * 11));

  // Measure: the outputs of Run and the latency of Latency from one child process.
  auto m = ort->Measure(model, batches, batches[1], {.warmup = 1, .runs = 4});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->latency.runs, 4);
  EXPECT_LE(m->latency.p50, m->latency.p95);
  auto run = ort->Run(model, batches);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(m->outputs.at("logits").ToDoubles(), run->at("logits").ToDoubles());
}

TEST(RunnersInterop, ModelOrtRejectsIsOneUserErrorLine) {
  const fs::path path = fs::path(::testing::TempDir()) / ("seqto_runners_bad_" + std::to_string(::getpid()) + ".onnx");
  std::ofstream(path) << "this is not an ONNX model";
  auto ort = Make("ort");
  ASSERT_TRUE(ort);
  auto out = ort->Run(path.string(), UnevenBatches());
  fs::remove(path);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kUser);
  const std::string& m = out.error().message;
  EXPECT_EQ(m.rfind("ort runner: " + path.string() + ": ONNX Runtime cannot load the model: ", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  // Inputs ORT refuses (wrong shape) name the batch.
  Tensor wrong(DType::kFloat32, {2, 1, 27, 28});
  auto shape = ort->Run(Example("resnet.onnx").string(), {UnevenBatches()[0], {{"input", wrong}}});
  ASSERT_FALSE(shape);
  EXPECT_EQ(shape.error().kind, ErrorKind::kUser);
  EXPECT_NE(shape.error().message.find("failed to run the model on batch 1 of 2"), std::string::npos)
      << shape.error().message;
}

}  // namespace
}  // namespace seqto
