// latency_under_load: does a latency measured next to another busy process still mean
// something? The same model, idle and next to one CPU-bound process.
//
//   latency_under_load [MODEL.onnx ...] [--models-dir DIR] [--models a,b] [--threads 1,2] [--runs R]
//                      [--warmup W] [--no-ort] [--hog-limit S] [--strict] [--json F]
//
// For each model (the benchmark CNNs in --models-dir, then every MODEL.onnx given) and
// thread count: the median latency (batch 1, random input) of seqto's engine with the
// machine idle and with one CPU-bound child process running (a busy loop this program
// starts before and kills after each loaded measurement; it also ends by itself after
// --hog-limit seconds and when this program dies), and the ratio of the loaded median
// to the idle 1-thread median. ONNX Runtime (tools/ort/ort_run.js, as engine_vs_ort
// runs it) is measured under the same conditions for comparison. The target is a
// ratio <= 1.3 at 1 and at 2 threads: worker threads must not spin on a core the other
// process needs (core/parallel.h, ChooseThreadWaits: started on a busy machine they
// sleep at once; started on an idle one, as here, they spin 20-50 us per wait, and the
// loaded rows measure what a load that comes later costs). "other cores" is the CPU
// other processes took during the loaded measurement (OtherLoadMeter): about 1.0 when
// the hog ran alone, more when the machine was busy anyway.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/parallel.h"
#include "core/stats.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"

namespace {

using namespace seqto;
namespace fs = std::filesystem;

constexpr double kTarget = 1.3;  // loaded p50 / idle 1-thread p50

// One CPU-bound child process: a busy loop, killed by the destructor; it exits by
// itself after `limit_s` and when this process dies, so it can never outlive us.
class CpuHog {
 public:
  explicit CpuHog(double limit_s) {
    pid_ = fork();
    if (pid_ != 0) return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
    volatile double x = 1;
    while (std::chrono::steady_clock::now() < end)
      for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
    _exit(0);
  }
  ~CpuHog() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

struct Cell {
  double p50 = -1;  // -1: not measured
  std::string error;
};

struct Row {
  std::string model;
  int threads = 0;
  Cell idle, loaded, ort_idle, ort_loaded;
  std::optional<double> other_cores;  // during the loaded measurements (seqto and ORT)
};

Expected<LatencyStats> TimeSession(runtime::Session& session, const runtime::TensorMap& inputs, int runs, int warmup) {
  std::vector<double> times;
  for (int i = 0; i < warmup + runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = session.Run(inputs);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) return out.error();
    if (i >= warmup) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Summarize(times);
}

void Fill(Cell& cell, const Expected<LatencyStats>& stats) {
  if (stats)
    cell.p50 = stats->p50;
  else
    cell.error = stats.error().message;
}

std::string Fmt(double v, const char* suffix = "") {
  if (v < 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%s", v, suffix);
  return buf;
}

double Ratio(double a, double b) { return a > 0 && b > 0 ? a / b : -1; }

// Random input (uniform in [-1, 1], fixed seed) of batch 1 for every graph input.
Expected<runtime::TensorMap> RandomInputs(const ir::Model& model, const std::string& path) {
  runtime::TensorMap inputs;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const ir::ValueInfo& in : model.graph.inputs) {
    if (!in.shape || in.dtype != DType::kFloat32)
      return UserError(path + ": input '" + in.name + "' must be float32 with a known rank (" + in.Describe() + ")");
    Shape shape;
    for (size_t d = 0; d < in.shape->size(); ++d) {
      const int64_t v = (*in.shape)[d].value;
      if (v < 0 && d > 0)
        return UserError(path + ": input '" + in.name + "' needs known dimensions after the batch (" + in.Describe() +
                         ")");
      shape.push_back(d == 0 ? 1 : v);
    }
    Tensor t(DType::kFloat32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
    inputs[in.name] = std::move(t);
  }
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  ChooseThreadWaits(argv);  // as the seqto executable does
  CLI::App app{"Median latency idle and next to one CPU-bound process, seqto and ONNX Runtime"};
  std::vector<std::string> extra_models;
  std::string models_dir = SEQTO_BENCH_MODELS_DIR, models = "mobilenetv2,resnet50,mobilenetv2_qdq,resnet50_qdq";
  std::string threads_list = "1,2", json_path;
  int runs = 30, warmup = 3;
  double hog_limit = 300;
  bool no_ort = false, strict = false;
  app.add_option("model", extra_models, "More models (.onnx) to measure after the benchmark CNNs");
  app.add_option("--models-dir", models_dir, "Folder with the benchmark models (make_bench_models.py output)");
  app.add_option("--models", models, "Comma-separated benchmark model names (files <name>.onnx; '' for none)");
  app.add_option("--threads", threads_list, "Comma-separated thread counts (default 1,2; 1 is always measured)");
  app.add_option("--runs", runs, "Timed runs per measurement (default 30)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed runs first (default 3)")->check(CLI::NonNegativeNumber);
  app.add_option("--hog-limit", hog_limit, "Seconds after which the CPU-bound child ends by itself (default 300)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-ort", no_ort, "Measure seqto only");
  app.add_flag("--strict", strict, "Exit 1 when a seqto ratio is over 1.3");
  app.add_option("--json", json_path, "Also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);

  std::vector<int> thread_counts = {1};
  for (const std::string& t : bench::SplitList(threads_list)) {
    char* end = nullptr;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || !CheckThreads(v, "--threads").ok()) {
      std::fprintf(stderr, "latency_under_load: --threads: '%s' is not a thread count (1 to %d)\n", t.c_str(),
                   MaxThreads());
      return 1;
    }
    if (std::find(thread_counts.begin(), thread_counts.end(), v) == thread_counts.end())
      thread_counts.push_back(static_cast<int>(v));
  }
  std::vector<std::pair<std::string, std::string>> model_paths;  // name, path
  for (const std::string& name : bench::SplitList(models))
    model_paths.push_back({name, (fs::path(models_dir) / (name + ".onnx")).string()});
  for (const std::string& path : extra_models) model_paths.push_back({fs::path(path).stem().string(), path});
  if (Status s = no_ort ? Status::Ok() : testing::OrtAvailable(); !s.ok()) {
    std::fprintf(stderr, "latency_under_load: %s\n", s.message().c_str());
    return 1;
  }

  std::printf(
      "median latency of %d runs (batch 1) after %d warm-up%s, idle and next to one CPU-bound process; %d cores\n",
      runs, warmup, warmup == 1 ? "" : "s", AvailableCores());
  std::printf("ratio = loaded p50 / idle 1-thread p50 of the same runtime; target <= %.1f\n", kTarget);
  std::printf("%-18s %7s %9s %10s %7s %7s %12s %12s %9s\n", "model", "threads", "idle ms", "loaded ms", "ratio",
              "other", "ort idle ms", "ort load ms", "ort ratio");
  std::fflush(stdout);

  std::vector<Row> rows;
  int over = 0, failed = 0;
  for (const auto& [name, path] : model_paths) {
    auto model = onnxio::LoadModel(path);
    if (!model) {
      std::fprintf(stderr, "latency_under_load: %s\n", model.error().message.c_str());
      return 1;
    }
    auto inputs = RandomInputs(*model, path);
    if (!inputs) {
      std::fprintf(stderr, "latency_under_load: %s\n", inputs.error().message.c_str());
      return 1;
    }
    double idle1 = -1, ort_idle1 = -1;
    for (int threads : thread_counts) {
      Row row;
      row.model = name;
      row.threads = threads;
      // Idle first, then both runtimes next to the CPU-bound process (one hog for
      // both, so "other cores" spans a window long enough to read).
      runtime::SessionOptions options;
      options.threads = threads;
      auto session = runtime::Session::Create(*model, options);
      testing::OrtOptions ort_options;
      ort_options.threads = threads;
      if (session)
        Fill(row.idle, TimeSession(**session, *inputs, runs, warmup));
      else
        row.idle.error = session.error().message;
      if (!no_ort) Fill(row.ort_idle, testing::OrtBenchmark(path, *inputs, runs, warmup, ort_options));
      {
        CpuHog hog(hog_limit);
        if (!hog.started()) row.loaded.error = "could not start the CPU-bound process";
        OtherLoadMeter load;
        load.Start();
        if (session && hog.started()) Fill(row.loaded, TimeSession(**session, *inputs, runs, warmup));
        if (!no_ort && hog.started())
          Fill(row.ort_loaded, testing::OrtBenchmark(path, *inputs, runs, warmup, ort_options));
        load.Stop();
        row.other_cores = load.OtherCores();
      }
      if (threads == 1) {
        idle1 = row.idle.p50;
        ort_idle1 = row.ort_idle.p50;
      }
      const double ratio = Ratio(row.loaded.p50, idle1);
      if (ratio > kTarget) ++over;
      std::string note;
      for (const Cell* c : {&row.idle, &row.loaded, &row.ort_idle, &row.ort_loaded})
        if (!c->error.empty()) {
          note += (note.empty() ? "   " : "; ") + c->error;
          ++failed;
        }
      std::printf("%-18s %7d %9s %10s %7s %7s %12s %12s %9s%s%s\n", name.c_str(), threads, Fmt(row.idle.p50).c_str(),
                  Fmt(row.loaded.p50).c_str(), Fmt(ratio).c_str(),
                  row.other_cores ? Fmt(*row.other_cores).c_str() : "?", Fmt(row.ort_idle.p50).c_str(),
                  Fmt(row.ort_loaded.p50).c_str(), Fmt(Ratio(row.ort_loaded.p50, ort_idle1)).c_str(),
                  ratio > kTarget ? "   over target" : "", note.c_str());
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  std::printf("%d of %zu seqto ratios over %.1f\n", over, rows.size(), kTarget);

  if (!json_path.empty()) {
    auto ms = [](const Cell& c) { return c.p50 < 0 ? nlohmann::json() : nlohmann::json(c.p50); };
    nlohmann::json j = {{"runs", runs}, {"warmup", warmup}, {"cores", AvailableCores()}, {"target", kTarget}};
    j["rows"] = nlohmann::json::array();
    std::map<std::string, std::pair<double, double>> idle1;  // model -> seqto, ort idle 1-thread p50
    for (const Row& r : rows)
      if (r.threads == 1) idle1[r.model] = {r.idle.p50, r.ort_idle.p50};
    for (const Row& r : rows) {
      const double ratio = Ratio(r.loaded.p50, idle1[r.model].first);
      const double ort_ratio = Ratio(r.ort_loaded.p50, idle1[r.model].second);
      j["rows"].push_back({{"model", r.model},
                           {"threads", r.threads},
                           {"idle_p50_ms", ms(r.idle)},
                           {"loaded_p50_ms", ms(r.loaded)},
                           {"ratio", ratio < 0 ? nlohmann::json() : nlohmann::json(ratio)},
                           {"other_cores", r.other_cores ? nlohmann::json(*r.other_cores) : nlohmann::json()},
                           {"ort_idle_p50_ms", ms(r.ort_idle)},
                           {"ort_loaded_p50_ms", ms(r.ort_loaded)},
                           {"ort_ratio", ort_ratio < 0 ? nlohmann::json() : nlohmann::json(ort_ratio)}});
    }
    std::ofstream f(json_path);
    f << j.dump(2) << "\n";
    f.close();
    if (!f) {
      std::fprintf(stderr, "latency_under_load: %s: cannot write file\n", json_path.c_str());
      return 1;
    }
  }
  if (failed > 0) return 1;
  return strict && over > 0 ? 1 : 0;
}
