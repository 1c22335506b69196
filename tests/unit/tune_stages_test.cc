// The tuner's stages on their own (tune/tune_stages.h): each given what the stages
// before it would have left, without data or measurements.
#include "tune/tune_stages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "onnxio/model_io.h"

namespace seqto::tune {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("seqto_stages_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A config for the run directory `dir`, dynamic quantization (no ranges needed).
TuneConfig Config(const fs::path& dir) {
  TuneConfig c;
  c.model = std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/resnet.onnx";
  c.out = dir.string();
  c.quantization.mode = quant::QuantMode::kDynamic;
  return c;
}

// Options that keep every progress line.
TuneOptions Recording(std::vector<std::string>& lines) {
  TuneOptions o;
  o.progress = [&lines](const std::string& l) { lines.push_back(l); };
  return o;
}

// The plan stage on the bundled Fashion-MNIST ResNet.
void PlanResnet(TuneRun& run) {
  auto model = onnxio::LoadModel(run.config.model);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto prepared = quant::QuantPlan::Prepare(*model);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  run.prepared = std::move(*prepared);
  const Status s = Plan(run);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_TRUE(run.plan.has_value());
  ASSERT_FALSE(run.plan->groups().empty());
  for (const auto& g : run.plan->groups()) run.order.push_back(g.name);
}

// cycle_K.json as the sweep writes it.
json CycleJson(size_t k, double loss, int64_t size) {
  return {{"index", k},
          {"excluded", json::array()},
          {"model_file", "candidates/cycle_" + std::to_string(k) + ".onnx"},
          {"metrics", {{"accuracy_loss", loss}, {"top1_disagreement", loss}}},
          {"size_bytes", size},
          {"latency_ms", {{"p50", 1.0}, {"p95", 1.1}, {"unstable", false}, {"busy", false}}}};
}

TEST(TuneStages, CalibrationRangesComeBackFromTheRunDirectory) {
  const fs::path dir = TempDir();
  WriteFile(dir / "calibration.json",
            R"({"method": "minmax", "samples": 4, "ranges": {"a": [-1.5, 2.0], "b": [0, 6]}})");
  TuneConfig config = Config(dir);
  config.quantization.mode = quant::QuantMode::kStatic;
  std::vector<std::string> lines;
  const TuneOptions options = Recording(lines);
  TuneRun run(config, options);
  // No model and no data: a stage that calibrated again would fail on them.
  const Status s = Calibrate(run);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(run.calibration_reused);
  ASSERT_EQ(run.ranges.size(), 2u);
  EXPECT_EQ(run.ranges.at("a").min, -1.5);
  EXPECT_EQ(run.ranges.at("a").max, 2.0);
  EXPECT_EQ(run.ranges.at("b").max, 6.0);
  EXPECT_EQ(lines, std::vector<std::string>{"calibration: 2 ranges from " + (dir / "calibration.json").string()});
}

TEST(TuneStages, DynamicQuantizationHasNoCalibration) {
  const fs::path dir = TempDir();
  WriteFile(dir / "calibration.json", R"({"ranges": {"a": [-1, 1]}})");
  std::vector<std::string> lines;
  const TuneConfig config = Config(dir);
  const TuneOptions options = Recording(lines);
  TuneRun run(config, options);
  ASSERT_TRUE(Calibrate(run).ok());
  EXPECT_TRUE(run.ranges.empty());
  EXPECT_TRUE(lines.empty());
}

TEST(TuneStages, SweepTakesFinishedCandidatesFromTheRunDirectory) {
  const fs::path dir = TempDir();
  TuneConfig config = Config(dir);
  config.strategy = "linear";
  config.threshold = 0.5;
  std::vector<std::string> lines;
  const TuneOptions options = Recording(lines);
  TuneRun run(config, options);
  PlanResnet(run);
  // k = 1 meets the threshold: linear asks for nothing more, so nothing is measured
  // (the run has no data and no runner).
  WriteFile(dir / "cycles" / "cycle_0.json", CycleJson(0, 5.0, 100).dump());
  WriteFile(dir / "cycles" / "cycle_1.json", CycleJson(1, 0.25, 120).dump());
  const Status s = Sweep(run);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(run.resumed_cycles, 2u);
  ASSERT_EQ(run.cycles.size(), 2u);
  EXPECT_EQ(run.cycles.at(1).outcome.accuracy_loss, 0.25);
  EXPECT_EQ(run.cycles.at(1).outcome.size_bytes, 120);
  EXPECT_EQ(run.cycles.at(1).outcome.latency_ms, 1.0);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "resuming: 2 candidates already measured"), lines.end());
  EXPECT_FALSE(fs::exists(dir / "report.json"));  // the report stage writes it, after the sweep
}

TEST(TuneStages, ReportComesFromTheCyclesAndCopiesThePicks) {
  const fs::path dir = TempDir();
  TuneConfig config = Config(dir);
  config.objectives = {"accuracy_loss", "size_bytes"};
  std::vector<std::string> lines;
  const TuneOptions options = Recording(lines);
  TuneRun run(config, options);
  PlanResnet(run);
  run.baseline = {{"model_file", config.model},
                  {"size_bytes", 1000},
                  {"latency_ms", {{"p50", 2.0}, {"busy", false}}},
                  {"samples", 10}};
  // Cycle 5 is dominated by cycle 2 (more loss, larger); normalized to [0, 100],
  // cycle 2 is 25 from the ideal point and cycle 0 is 100.
  for (auto [k, loss, size] : {std::tuple{size_t{0}, 3.0, 1000}, {size_t{2}, 1.0, 1500}, {size_t{5}, 2.0, 3000}}) {
    const json j = CycleJson(k, loss, size);
    WriteFile(dir / j["model_file"].get<std::string>(), "model " + std::to_string(k));
    run.cycles[k] = Cycle{k, j, OutcomeOf(j)};
  }
  Status s = WriteReport(run, /*complete=*/true);
  ASSERT_TRUE(s.ok()) << s.message();
  const json report = json::parse(ReadFile(dir / "report.json"));
  EXPECT_EQ(report["complete"], true);
  EXPECT_EQ(report["model"], config.model);
  EXPECT_EQ(report["baseline"], run.baseline);
  EXPECT_EQ(report["ranking"], run.order);
  EXPECT_EQ(report["macs"], run.plan->model_macs());
  EXPECT_TRUE(report["machine_busy"].is_null());
  EXPECT_EQ(report["settings"]["objectives"], json(config.objectives));
  EXPECT_EQ(report["settings"]["mode"], "dynamic");
  ASSERT_EQ(report["cycles"].size(), 3u);
  EXPECT_EQ(report["cycles"][1], run.cycles.at(2).j);
  ASSERT_EQ(report["pareto"].size(), 2u);
  EXPECT_EQ(report["pareto"][0]["cycle"], 2);
  EXPECT_EQ(report["pareto"][0]["model_file"], "top1.onnx");
  EXPECT_DOUBLE_EQ(report["pareto"][0]["distance"].get<double>(), 25.0);
  EXPECT_EQ(report["pareto"][1]["cycle"], 0);
  EXPECT_EQ(report["pareto"][1]["model_file"], "top2.onnx");
  EXPECT_EQ(ReadFile(dir / "top1.onnx"), "model 2");
  EXPECT_EQ(ReadFile(dir / "best.onnx"), "model 2");
  EXPECT_EQ(ReadFile(dir / "top2.onnx"), "model 0");
  EXPECT_FALSE(fs::exists(dir / "top3.onnx"));

  auto summary = Summary(run);
  ASSERT_TRUE(summary.ok()) << summary.error().message;
  EXPECT_NE(summary->find("float model: 1.0 kB, 2.000 ms"), std::string::npos) << *summary;
  EXPECT_NE(summary->find("#1  cycle 2 (2 groups excluded): accuracy loss 1.00 pt, 1.5 kB"), std::string::npos)
      << *summary;
  EXPECT_NE(summary->find("-> " + (dir / "top2.onnx").string()), std::string::npos) << *summary;

  s = WriteReport(run, /*complete=*/false);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(json::parse(ReadFile(dir / "report.json"))["complete"], false);
}

}  // namespace
TEST(TuneStages, RecipeLossesDifferOnlyBeyondSamplingNoise) {
  // 100 samples. a misses 0..k-1, b misses k..k+m-1 (disjoint): discordant k and m.
  auto misses = [](int from, int count) {
    std::vector<bool> v(100, false);
    for (int i = from; i < from + count; ++i) v[static_cast<size_t>(i)] = true;
    return v;
  };
  // 4 vs 6 samples: 2 < 1.96 sqrt(10) = 6.2, noise either way.
  EXPECT_FALSE(MissesDiffer(misses(0, 4), misses(4, 6)));
  EXPECT_FALSE(MissesDiffer(misses(4, 6), misses(0, 4)));
  // 2 vs 20: 18 > 1.96 sqrt(22) = 9.2.
  EXPECT_TRUE(MissesDiffer(misses(0, 2), misses(2, 20)));
  EXPECT_TRUE(MissesDiffer(misses(2, 20), misses(0, 2)));
  // Shared misses do not count: both miss the same 30, a 1 more, b 9 more (8 > 6.2).
  std::vector<bool> a = misses(0, 31), b = misses(0, 30);
  for (int i = 31; i < 40; ++i) b[static_cast<size_t>(i)] = true;
  EXPECT_TRUE(MissesDiffer(a, b));
  EXPECT_FALSE(MissesDiffer(a, a));
  EXPECT_FALSE(MissesDiffer(misses(0, 0), misses(0, 0)));
}

}  // namespace seqto::tune
