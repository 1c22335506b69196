// `seqto tune` end to end on the bundled Fashion-MNIST ResNet: a run writes a valid
// report with every candidate; a run killed with SIGKILL at arbitrary moments and
// resumed with --resume loses no finished candidate and ends with the same report
// as the uninterrupted run (latency aside: it is measured afresh).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_util.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = SEQTO_SOURCE_DIR;

// Starts seqto with `args` in `dir`; stderr accumulates over the runs in one folder.
pid_t SpawnTune(const std::vector<std::string>& args, const fs::path& dir) {
  return Spawn(args, dir, {.append_stderr = true});
}

// Waits for a run; kills it after `timeout`. Returns the exit code, or -1.
int WaitExit(pid_t pid, std::chrono::seconds timeout) { return Wait(pid, timeout).exit_code; }

size_t CountCycles(const fs::path& run) {
  std::error_code ec;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(run / "cycles", ec))
    if (e.path().extension() == ".json") ++n;
  return n;
}

// A small but real tuning job: ResNet, 300 test images, 64 calibration and ranking
// images, up to 7 candidates; objectives without latency so the Pareto picks are
// reproducible.
json Config(const fs::path& out) {
  json c = FashionResnetTuneConfig(out);
  c["data"]["seed"] = 7;
  c["quantization"] = {{"mode", "static"}, {"calibrate_method", "minmax"}};
  c["search"] = {{"strategy", "linear"}, {"threshold", -1}, {"max_candidates", 7}};
  c["objectives"] = {"accuracy_loss", "size_bytes"};
  c["latency"] = {{"runs", 3}, {"warmup", 1}};
  c["threads"] = 1;
  return c;
}

// The report without what is measured afresh on every run (latency, machine load,
// timings).
json Stable(json report) {
  report.erase("baseline");
  report["settings"]["config"].erase("out");  // where the run directory is
  report.erase("machine_busy");               // measured afresh too
  report.erase("stage_seconds");              // timings
  for (auto& c : report["cycles"]) c.erase("latency_ms");
  for (auto& r : report["recipes"]) {  // the recipes' timings
    r.erase("latency_ms");
    r.erase("seconds");
    for (auto& t : r["techniques"]) t.erase("seconds");
  }
  for (auto& t : report["recipe"]["techniques"]) t.erase("seconds");
  return report;
}

TEST(TuneCli, RunWritesReportModelsAndTop3) {
  const fs::path dir = TempDir(), run = dir / "run";
  std::ofstream(dir / "tune.json") << Config(run).dump(2);
  const pid_t pid = SpawnTune({"tune", (dir / "tune.json").string()}, dir);
  ASSERT_EQ(WaitExit(pid, std::chrono::seconds(600)), 0) << ReadFile(dir / "stderr");
  const json report = json::parse(ReadFile(run / "report.json"));
  ASSERT_EQ(report["cycles"].size(), 7u);
  EXPECT_TRUE(report["complete"].get<bool>());
  for (const auto& c : report["cycles"]) {
    EXPECT_EQ(c["excluded"].size(), c["index"].get<size_t>());
    for (const char* key : {"accuracy_loss", "top1_disagreement", "top5_overlap", "kendall_tau", "sqnr_db"})
      EXPECT_TRUE(c["metrics"].contains(key)) << key;
    // Every candidate is a valid model file of the size reported.
    const fs::path model = run / c["model_file"].get<std::string>();
    ASSERT_TRUE(fs::exists(model));
    EXPECT_EQ(fs::file_size(model), c["size_bytes"].get<uintmax_t>());
    auto loaded = onnxio::LoadModel(model.string());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_TRUE(onnxio::CheckModel(*loaded).ok());
  }
  // Candidate 0 (everything quantized) is about 4x smaller than the float model.
  EXPECT_LT(report["cycles"][0]["size_bytes"].get<double>(), 0.4 * report["baseline"]["size_bytes"].get<double>());
  // Excluding groups gives weights back in float (groups without weights only lose
  // their Q/DQ nodes, so the size is not strictly monotone, but it grows overall).
  EXPECT_GT(report["cycles"].back()["size_bytes"].get<double>(), report["cycles"][0]["size_bytes"].get<double>());
  ASSERT_GE(report["pareto"].size(), 1u);
  ASSERT_LE(report["pareto"].size(), 3u);
  for (size_t i = 0; i < report["pareto"].size(); ++i) {
    EXPECT_EQ(report["pareto"][i]["rank"].get<int>(), static_cast<int>(i + 1));
    EXPECT_TRUE(fs::exists(run / ("top" + std::to_string(i + 1) + ".onnx")));
  }
  EXPECT_TRUE(fs::exists(run / "best.onnx"));
  const std::string out = ReadFile(dir / "stdout");
  EXPECT_NE(out.find("Pareto top 3"), std::string::npos) << out;
  // Where the time went, printed and in report.json: every stage, each candidate, and
  // a total that covers the stages.
  EXPECT_NE(out.find("stage times (s): setup "), std::string::npos) << out;
  const json& stages = report["stage_seconds"];
  double sum = 0;
  for (const char* key : {"setup", "calibration", "analysis", "baseline", "search", "candidates", "report"}) {
    ASSERT_TRUE(stages.contains(key) && stages[key].is_number()) << key << ": " << stages.dump();
    EXPECT_GE(stages[key].get<double>(), 0) << key;
    sum += stages[key].get<double>();
  }
  EXPECT_GT(stages["analysis"].get<double>(), 0);
  EXPECT_LE(sum, stages["total"].get<double>() + 0.01);
  ASSERT_EQ(stages["per_candidate"].size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(stages["per_candidate"][i]["cycle"].get<size_t>(), i);
  EXPECT_EQ(stages["reused"], json::array());
  EXPECT_GT(stages["cpu_seconds"]["analysis"].get<double>(), 0);

  // The same run directory without --resume is refused: finished work is never lost.
  const pid_t again = SpawnTune({"tune", (dir / "tune.json").string()}, dir);
  EXPECT_EQ(WaitExit(again, std::chrono::seconds(60)), 1);
  EXPECT_NE(ReadFile(dir / "stderr").find("--resume"), std::string::npos);
}

TEST(TuneCli, KilledRunsResumeToTheSameReport) {
  const fs::path dir = TempDir();
  // The uninterrupted reference run.
  std::ofstream(dir / "ref.json") << Config(dir / "ref").dump(2);
  ASSERT_EQ(WaitExit(SpawnTune({"tune", (dir / "ref.json").string(), "-q"}, dir), std::chrono::seconds(600)), 0)
      << ReadFile(dir / "stderr");
  const json reference = json::parse(ReadFile(dir / "ref" / "report.json"));

  // The same job, killed with SIGKILL at moments spread over the whole run (during
  // start-up, calibration, analysis, and between and inside candidates), then resumed.
  const fs::path run = dir / "killed";
  std::ofstream(dir / "killed.json") << Config(run).dump(2);
  const std::vector<int> kill_after_ms = {150, 700, 1500, 400, 2500, 900, 3000};
  size_t kills = 0, max_seen = 0;
  bool finished = false;
  for (int delay : kill_after_ms) {
    std::vector<std::string> args = {"tune", (dir / "killed.json").string(), "-q"};
    if (fs::exists(run / "config.json")) args.push_back("--resume");
    const pid_t pid = SpawnTune(args, dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != 0) {  // it finished before the kill
      finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      ASSERT_TRUE(finished) << ReadFile(dir / "stderr");
      break;
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ++kills;
    // No finished candidate is ever lost.
    const size_t seen = CountCycles(run);
    EXPECT_GE(seen, max_seen);
    max_seen = std::max(max_seen, seen);
    // No partial file is left where a result belongs.
    if (fs::exists(run / "report.json")) {
      EXPECT_FALSE(json::parse(ReadFile(run / "report.json"), nullptr, false).is_discarded());
    }
  }
  if (!finished) {
    const pid_t pid = SpawnTune({"tune", (dir / "killed.json").string(), "-q", "--resume"}, dir);
    ASSERT_EQ(WaitExit(pid, std::chrono::seconds(600)), 0) << ReadFile(dir / "stderr");
  }
  EXPECT_GE(kills, 1u);
  const json resumed = json::parse(ReadFile(run / "report.json"));
  json a = Stable(reference), b = Stable(resumed);
  a.erase("model");
  b.erase("model");
  EXPECT_EQ(a, b) << "reference:\n" << a.dump(1) << "\nresumed:\n" << b.dump(1);

  // Resuming the finished run measures nothing again, and its stage times say so.
  ASSERT_EQ(
      WaitExit(SpawnTune({"tune", (dir / "killed.json").string(), "-q", "--resume"}, dir), std::chrono::seconds(600)),
      0)
      << ReadFile(dir / "stderr");
  const json again = json::parse(ReadFile(run / "report.json"));
  EXPECT_EQ(again["stage_seconds"]["reused"], json({"calibration", "analysis", "baseline"}));
  EXPECT_EQ(again["stage_seconds"]["per_candidate"], json::array());
  EXPECT_EQ(Stable(again), Stable(resumed));
}

TEST(TuneCli, DisagreementLossIgnoresTheLabels) {
  // search.loss "disagreement": with labels, the loss is still the share of images
  // whose top-1 changes from the float model's (accuracy is reported beside it).
  const fs::path dir = TempDir(), run = dir / "run";
  json c = Config(run);
  c["search"]["max_candidates"] = 3;
  c["search"]["loss"] = "disagreement";
  std::ofstream(dir / "tune.json") << c.dump(2);
  ASSERT_EQ(WaitExit(SpawnTune({"tune", (dir / "tune.json").string(), "-q"}, dir), std::chrono::seconds(600)), 0)
      << ReadFile(dir / "stderr");
  const json report = json::parse(ReadFile(run / "report.json"));
  ASSERT_EQ(report["cycles"].size(), 3u);
  EXPECT_EQ(report["settings"]["config"]["search"]["loss"], "disagreement");
  bool differs_from_label_loss = false;
  for (const auto& cycle : report["cycles"]) {
    const json& m = cycle["metrics"];
    EXPECT_EQ(m["accuracy_loss"], m["top1_disagreement"]);
    ASSERT_TRUE(m.contains("accuracy_top1"));
    const double label_loss = report["baseline"]["accuracy"]["top1"].get<double>() - m["accuracy_top1"].get<double>();
    differs_from_label_loss |= std::abs(label_loss - m["accuracy_loss"].get<double>()) > 1e-9;
  }
  EXPECT_TRUE(differs_from_label_loss) << "the two losses coincide on every cycle: the test shows nothing";
}

TEST(TuneCli, EngineAndOrtRunnersGiveTheSameAccuracy) {
  const fs::path dir = TempDir();
  json engine = Config(dir / "engine"), ort = Config(dir / "ort");
  // Enough samples that one flipped prediction is far below the 0.5 point allowed.
  for (json* c : {&engine, &ort}) {
    (*c)["search"]["max_candidates"] = 4;
    (*c)["data"]["eval"]["samples"] = 2000;
  }
  ort["runner"] = "ort";
  std::ofstream(dir / "engine.json") << engine.dump(2);
  std::ofstream(dir / "ort.json") << ort.dump(2);
  ASSERT_EQ(WaitExit(SpawnTune({"tune", (dir / "engine.json").string(), "-q"}, dir), std::chrono::seconds(600)), 0)
      << ReadFile(dir / "stderr");
  ASSERT_EQ(WaitExit(SpawnTune({"tune", (dir / "ort.json").string(), "-q"}, dir), std::chrono::seconds(600)), 0)
      << ReadFile(dir / "stderr");
  const json a = json::parse(ReadFile(dir / "engine" / "report.json"));
  const json b = json::parse(ReadFile(dir / "ort" / "report.json"));
  ASSERT_EQ(a["cycles"].size(), b["cycles"].size());
  // Same candidates (calibration and ranking do not depend on the runner) ...
  for (size_t i = 0; i < a["cycles"].size(); ++i) {
    EXPECT_EQ(a["cycles"][i]["excluded"], b["cycles"][i]["excluded"]);
    EXPECT_EQ(a["cycles"][i]["size_bytes"], b["cycles"][i]["size_bytes"]);
    // ... measured by two runtimes: the same accuracy to within 0.5 point.
    EXPECT_NEAR(a["cycles"][i]["metrics"]["accuracy_top1"].get<double>(),
                b["cycles"][i]["metrics"]["accuracy_top1"].get<double>(), 0.5)
        << "cycle " << i;
  }
  EXPECT_NEAR(a["baseline"]["accuracy"]["top1"].get<double>(), b["baseline"]["accuracy"]["top1"].get<double>(), 0.5);
}

}  // namespace
}  // namespace seqto
