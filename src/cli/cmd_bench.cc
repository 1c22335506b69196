// seqto bench MODEL [--batch B] [--threads T] [--runs R] [--shape NAME=DIMS] [--json F] [--profile]:
// latency of a model on random inputs of its declared shape; with --profile, where
// the time goes (per op type and per node of the optimized graph).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/common.h"
#include "core/parallel.h"
#include "core/stats.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"

namespace seqto::cli {

namespace {

// Largest random input bench makes (a typo in --shape or --batch must not exhaust memory).
constexpr uint64_t kMaxInputBytes = uint64_t{4} << 30;

Expected<Shape> ParseDims(const std::string& text, const std::string& what) {
  Shape shape;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t x = text.find('x', pos);
    const std::string item = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    const bool digits = !item.empty() && item.size() <= 12 && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoll(item) <= 0)
      return UserError(what + ": bad shape '" + text + "' (expected positive sizes joined by 'x', e.g. 1x3x224x224)");
    shape.push_back(std::stoll(item));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return shape;
}

// Builds a random tensor for a graph input: batch from --batch, other dynamic
// dimensions from --shape.
Expected<Tensor> RandomInput(const ir::ValueInfo& info, int batch, const std::map<std::string, Shape>& shapes,
                             std::mt19937& rng) {
  Shape shape;
  if (auto it = shapes.find(info.name); it != shapes.end()) {
    shape = it->second;
  } else {
    if (!info.shape)
      return UserError("input '" + info.name + "' has unknown rank: set it with --shape " + info.name + "=DIMS");
    for (size_t d = 0; d < info.shape->size(); ++d) {
      const ir::Dim& dim = (*info.shape)[d];
      if (d == 0 && batch > 0)
        shape.push_back(batch);
      else if (dim.known())
        shape.push_back(dim.value);
      else if (d == 0)
        shape.push_back(1);
      else
        return UserError("input '" + info.name + "' has dynamic dimension " + std::to_string(d) + " ('" + dim.param +
                         "'): set it with --shape " + info.name + "=DIMS");
    }
  }
  if (!info.is_tensor()) return UserError("input '" + info.name + "' is a " + info.other_type + ", not a tensor");
  const DType dtype = info.dtype == DType::kUndefined ? DType::kFloat32 : info.dtype;
  if (!IsSupportedDType(dtype))
    return UserError("input '" + info.name + "' has type " + DTypeName(dtype) + ", which bench cannot generate");
  uint64_t bytes = DTypeSize(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > kMaxInputBytes)
      return UserError("input '" + info.name + "': shape " + ShapeToString(shape) + " is too large (over " +
                       std::to_string(kMaxInputBytes >> 30) + " GiB)");
  Tensor t(dtype, shape);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  if (t.dtype() == DType::kFloat32) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  } else if (t.dtype() == DType::kUInt8) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
  }  // other types: zeros (indices, masks)
  return t;
}

struct BenchArgs {
  std::string model;
  int batch = 0, threads = 0, runs = 20, warmup = 3;
  std::vector<std::string> shapes;
  std::string json;
  bool profile = false;
};

// Where a run's time goes: per op type (domain.op) and the slowest nodes, averaged
// over the profiled runs. Printed, and returned for --json.
nlohmann::json PrintProfile(const std::vector<runtime::Session::StepProfile>& steps, double run_ms) {
  struct Total {
    double ms = 0;
    int nodes = 0;
  };
  std::map<std::string, Total> by_op;
  double sum = 0;
  nlohmann::json j;
  j["nodes"] = nlohmann::json::array();
  for (const auto& s : steps) {
    const double ms = s.runs > 0 ? s.total_ms / static_cast<double>(s.runs) : 0.0;
    const std::string op = (s.domain.empty() ? "" : s.domain + ".") + s.op_type;
    by_op[op].ms += ms;
    ++by_op[op].nodes;
    sum += ms;
    j["nodes"].push_back({{"name", s.name}, {"op", op}, {"ms", ms}});
  }
  std::vector<std::pair<std::string, Total>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::printf("profile: %.3f ms per run in %zu nodes (%.3f ms outside them)\n", sum, steps.size(),
              std::max(0.0, run_ms - sum));
  std::printf("  %-36s %6s %10s %7s\n", "op", "nodes", "ms/run", "share");
  j["ops"] = nlohmann::json::array();
  for (const auto& [op, t] : ops) {
    std::printf("  %-36s %6d %10.3f %6.1f%%\n", op.c_str(), t.nodes, t.ms, sum > 0 ? 100 * t.ms / sum : 0.0);
    j["ops"].push_back({{"op", op}, {"nodes", t.nodes}, {"ms", t.ms}});
  }
  std::vector<const runtime::Session::StepProfile*> slowest;
  for (const auto& s : steps) slowest.push_back(&s);
  std::sort(slowest.begin(), slowest.end(), [](auto* a, auto* b) { return a->total_ms > b->total_ms; });
  slowest.resize(std::min<size_t>(slowest.size(), 15));
  std::printf("  slowest nodes:\n");
  for (const auto* s : slowest)
    std::printf("  %-36s %-28s %10.3f\n", s->name.c_str(), s->op_type.c_str(),
                s->runs > 0 ? s->total_ms / static_cast<double>(s->runs) : 0.0);
  return j;
}

int RunBench(const BenchArgs& args) {
  const std::string& path = args.model;
  const int batch = args.batch, threads = args.threads, runs = args.runs, warmup = args.warmup;
  const std::vector<std::string>& shape_specs = args.shapes;
  const std::string& json_path = args.json;
  auto model = onnxio::LoadModel(path);
  if (!model) return ReportError("bench", model.error());
  if (Status s = RequireOutputs(*model, path); !s.ok()) return ReportError("bench", s.error());
  std::map<std::string, Shape> shapes;
  for (const auto& spec : shape_specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return ReportError("bench", UserError("--shape '" + spec + "': expected NAME=DIMS"));
    auto dims = ParseDims(spec.substr(eq + 1), "--shape " + spec.substr(0, eq));
    if (!dims) return ReportError("bench", dims.error());
    shapes[spec.substr(0, eq)] = *dims;
  }
  for (const auto& [name, s] : shapes) {
    bool found = false;
    for (const auto& in : model->graph.inputs) found |= in.name == name;
    if (!found) return ReportError("bench", UserError("--shape: '" + name + "' is not an input of the model"));
  }
  std::mt19937 rng(42);
  runtime::TensorMap inputs;
  for (const auto& in : model->graph.inputs) {
    auto t = RandomInput(in, batch, shapes, rng);
    if (!t) return ReportError("bench", t.error());
    inputs[in.name] = std::move(*t);
  }
  runtime::SessionOptions options;
  options.threads = threads;
  auto session = runtime::Session::Create(*model, options);
  if (!session) return ReportError("bench", std::move(session).WithContext(path).error());
  std::vector<double> times;
  OtherLoadMeter load;
  load.Start();
  for (int i = 0; i < warmup + runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = (*session)->Run(inputs);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) return ReportError("bench", std::move(out).WithContext(path).error());
    if (i >= warmup) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  load.Stop();
  const LatencyStats stats = Summarize(times);
  const int used_threads = threads > 0 ? threads : NumThreads();
  const std::optional<double> other_cores = load.OtherCores();
  const bool busy = other_cores && LooksBusy(*other_cores, used_threads, AvailableCores());
  const int used_batch =
      inputs.empty() ? 0 : static_cast<int>(inputs.begin()->second.shape().empty() ? 1 : inputs.begin()->second.dim(0));
  std::printf("model %s  runner engine  batch %d  threads %d  runs %d\n", path.c_str(), used_batch, used_threads, runs);
  std::printf("latency ms: mean %.3f  p50 %.3f  p95 %.3f  min %.3f  max %.3f  stddev %.3f\n", stats.mean, stats.p50,
              stats.p95, stats.min, stats.max, stats.stddev);
  if (LatencyUnstable(stats))
    std::fprintf(stderr, "seqto bench: warning: unstable latency: p95 is %.2f x p50 (over %.1f)\n",
                 stats.p95 / stats.p50, kUnstableP95OverP50);
  if (busy)
    std::fprintf(stderr,
                 "seqto bench: warning: the machine looks busy: other processes used %.2f of its %d cores while "
                 "measuring with %d threads, so latencies may be inflated\n",
                 *other_cores, AvailableCores(), used_threads);
  nlohmann::json profile;
  if (args.profile) {  // separate runs: the timer calls must not touch the latency above
    (*session)->EnableProfiling(true);
    for (int i = 0; i < runs; ++i)
      if (auto out = (*session)->Run(inputs); !out)
        return ReportError("bench", std::move(out).WithContext(path).error());
    profile = PrintProfile((*session)->Profile(), stats.mean);
  }
  if (!json_path.empty()) {
    nlohmann::json j;
    if (args.profile) j["profile"] = profile;
    j["model"] = path;
    j["runner"] = "engine";
    j["batch"] = used_batch;
    j["threads"] = used_threads;
    j["runs"] = runs;
    j["warmup"] = warmup;
    j["latency_ms"] = {{"mean", stats.mean}, {"p50", stats.p50}, {"p95", stats.p95},
                       {"min", stats.min},   {"max", stats.max}, {"stddev", stats.stddev}};
    j["latency_ms"]["unstable"] = LatencyUnstable(stats);
    j["latency_ms"]["other_cores"] = other_cores ? nlohmann::json(*other_cores) : nlohmann::json();
    j["latency_ms"]["busy"] = busy;
    if (Status s = WriteTextFile(json_path, j.dump(2) + "\n"); !s.ok()) return ReportError("bench", s.error());
  }
  return kExitOk;
}

}  // namespace

void AddBenchCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Measure a model's latency on random inputs");
  auto args = std::make_shared<BenchArgs>();
  cmd->add_option("model", args->model, "ONNX model file")->required();
  cmd->add_option("--batch", args->batch, "Batch size (first dimension of every input; default: the model's, or 1)")
      ->check(CLI::Range(1, 1 << 30));
  AddThreadsOption(*cmd, args->threads);
  cmd->add_option("--runs", args->runs, "Timed runs")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--warmup", args->warmup, "Untimed runs first")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--shape", args->shapes, "NAME=1x3x224x224: shape of an input with dynamic dimensions");
  cmd->add_option("--json", args->json, "Also write the results as JSON to this file");
  cmd->add_flag("--profile", args->profile,
                "Also time every node of the optimized graph (separate runs) and print the time per op type and "
                "the slowest nodes");
  cmd->callback([=, &exit_code] { exit_code = RunBench(*args); });
}

}  // namespace seqto::cli
