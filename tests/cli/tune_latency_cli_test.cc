// What `seqto tune` records about its latencies: the median is the latency
// objective, every measurement says whether it was unstable (p95/p50 > 1.5) and how
// much CPU other processes took meanwhile, and a run next to a CPU-bound process
// warns once that the machine looks busy (one stderr line, machine_busy in
// report.json); so does `seqto bench`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/parallel.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kSource = SEQTO_SOURCE_DIR;

// A short tuning job (ResNet, 300 test images, 4 candidates) with `threads` threads.
// The load meter reads only once its measuring windows add up to 0.25 s
// (OtherLoadMeter::kMinSeconds); at ~0.2 ms a run, 20 runs per model left the whole
// job just under that, so the busy test sometimes saw no reading at all. 400 runs make
// each model's measurement long enough on its own.
json Config(const fs::path& out, int threads) {
  json c = FashionResnetTuneConfig(out);
  c["search"] = {{"strategy", "linear"}, {"threshold", -1}, {"max_candidates", 4}};
  c["latency"] = {{"runs", 400}, {"warmup", 2}};
  c["threads"] = threads;
  return c;
}

// A child process that keeps one core busy until it is killed (or 10 minutes pass).
class CpuHog {
 public:
  CpuHog() : pid_(fork()) {
    if (pid_ == 0) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(10);
      volatile double x = 1;
      while (std::chrono::steady_clock::now() < end) x = x * 1.0000001 + 1e-9;
      _exit(0);
    }
  }
  ~CpuHog() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_;
};

size_t CountLines(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(TuneLatencyCli, BusyMachineWarnsOnceAndTheReportRecordsIt) {
  const fs::path dir = TempDir(), run = dir / "run";
  // As many threads as cores: one more CPU-bound process leaves a thread without a
  // core of its own, which is what the warning is about.
  std::ofstream(dir / "tune.json") << Config(run, AvailableCores()).dump(2);
  Result r;
  {
    const CpuHog hog;
    ASSERT_TRUE(hog.started());
    r = RunSeqto({"tune", (dir / "tune.json").string(), "-q"}, std::chrono::seconds(600));
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CountLines(r.err, "warning: the machine looks busy"), 1u) << r.err;
  const json report = json::parse(ReadFile(run / "report.json"));
  const json& busy = report["machine_busy"];
  ASSERT_TRUE(busy.is_object()) << report.dump(1);
  EXPECT_EQ(busy["cores"].get<int>(), AvailableCores());
  EXPECT_EQ(busy["threads"].get<int>(), AvailableCores());
  EXPECT_GT(busy["max_other_cores"].get<double>(), 0.5);
  EXPECT_TRUE(busy["baseline"].get<bool>() || !busy["cycles"].empty()) << busy.dump();
  // stderr says it when first seen; the report's line sums up the whole run, so only
  // the words before the load (which may have grown since) are the same.
  const std::string warning = busy["warning"].get<std::string>();
  EXPECT_NE(r.err.find(warning.substr(0, warning.find(" up to "))), std::string::npos) << r.err;
}

TEST(TuneLatencyCli, BenchNextToABusyProcessWarnsToo) {
  const fs::path dir = TempDir();
  const std::vector<std::string> args = {"bench",     (kSource / "examples/fashion-mnist/resnet.onnx").string(),
                                         "--runs",    "1500",
                                         "--threads", std::to_string(AvailableCores()),
                                         "--json",    (dir / "bench.json").string()};
  Result r;
  {
    const CpuHog hog;
    ASSERT_TRUE(hog.started());
    r = RunSeqto(args);
  }
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_EQ(CountLines(r.err, "seqto bench: warning: the machine looks busy"), 1u) << r.err;
  const json j = json::parse(ReadFile(dir / "bench.json"));
  ASSERT_TRUE(j["latency_ms"]["other_cores"].is_number()) << j.dump();
  EXPECT_GT(j["latency_ms"]["other_cores"].get<double>(), 0.5);
  EXPECT_TRUE(j["latency_ms"]["busy"].get<bool>());
}

TEST(TuneLatencyCli, EveryMeasurementRecordsMedianSpreadAndLoad) {
  const fs::path dir = TempDir(), run = dir / "run";
  std::ofstream(dir / "tune.json") << Config(run, 1).dump(2);
  const Result r = RunSeqto({"tune", (dir / "tune.json").string(), "-q"}, std::chrono::seconds(600));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(ReadFile(run / "report.json"));
  std::vector<json> latencies = {report["baseline"]["latency_ms"]};
  for (const auto& c : report["cycles"]) latencies.push_back(c["latency_ms"]);
  for (const json& lat : latencies) {
    for (const char* key : {"mean", "p50", "p95", "min", "max", "stddev"}) EXPECT_TRUE(lat[key].is_number()) << key;
    EXPECT_LE(lat["min"].get<double>(), lat["p50"].get<double>());
    EXPECT_LE(lat["p50"].get<double>(), lat["p95"].get<double>());
    EXPECT_EQ(lat["unstable"].get<bool>(), lat["p95"].get<double>() > 1.5 * lat["p50"].get<double>()) << lat.dump();
    EXPECT_TRUE(lat["other_cores"].is_null() || lat["other_cores"].get<double>() >= 0) << lat.dump();
    EXPECT_TRUE(lat["busy"].is_boolean());
  }
  // The latency objective is the median.
  for (const auto& p : report["pareto"]) {
    const size_t k = p["cycle"].get<size_t>();
    for (const auto& c : report["cycles"])
      if (c["index"].get<size_t>() == k) {
        EXPECT_DOUBLE_EQ(p["values"]["latency_ms"].get<double>(), c["latency_ms"]["p50"].get<double>());
      }
  }
  EXPECT_TRUE(report.contains("machine_busy"));  // null on a quiet machine, an object on a busy one
}

}  // namespace
}  // namespace seqto
