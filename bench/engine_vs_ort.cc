// engine_vs_ort: latency of seqto's engine against ONNX Runtime on the benchmark CNNs.
//
//   engine_vs_ort [--runs R] [--warmup W] [--models-dir DIR] [--models a,b] [--threads 1,2] [--no-ort] [--quick]
//                 [--json F]
//
// For each model (resnet50, mobilenetv2 and their QDQ int8 versions resnet50_qdq,
// mobilenetv2_qdq), batch (1, 16) and thread count (1, 2): the median latency of
// seqto (in-process runtime::Session) and of ONNX Runtime (timed inside its Node.js
// process by tools/ort/ort_run.js, so process start-up and model loading do not
// count), each after W untimed warm-up runs, on the same random input. For QDQ
// models also seqto without graph optimizations: the unfused QDQ graph in float
// (DequantizeLinear -> float op -> QuantizeLinear), what the QDQ fusion saves, and,
// when the float model X ran before X_qdq in the same run, seqto's int8 speed-up
// over its own float (X's seqto ms / X_qdq's).
// Prints a table: model, batch, threads, seqto ms, ort ms, seqto/ort, unfused ms,
// int8 speed-up.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
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

struct Row {
  std::string model;
  int batch = 0, threads = 0;
  double seqto_ms = -1, ort_ms = -1;  // median; -1: not measured
  double unfused_ms = -1;             // QDQ models: seqto with optimize = false
  double float_ms = -1;               // QDQ models: seqto on the float model, same batch and threads
  std::string note;
};

using bench::Fmt;
using bench::Ratio;

void PrintRow(const Row& r) {
  std::printf("%-16s %6d %8d %12s %12s %10s %12s %10s%s%s\n", r.model.c_str(), r.batch, r.threads,
              Fmt(r.seqto_ms).c_str(), Fmt(r.ort_ms).c_str(), Ratio(r.seqto_ms, r.ort_ms).c_str(),
              Fmt(r.unfused_ms).c_str(), Ratio(r.float_ms, r.seqto_ms, "x").c_str(), r.note.empty() ? "" : "   ",
              r.note.c_str());
  std::fflush(stdout);
}

// A QDQ model: one with QuantizeLinear / DequantizeLinear nodes.
bool IsQdq(const ir::Model& model) {
  return std::any_of(model.graph.nodes.begin(), model.graph.nodes.end(), [](const ir::Node& n) {
    return n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear";
  });
}

}  // namespace

int main(int argc, char** argv) {
  ChooseThreadWaits(argv);  // as the seqto executable does
  CLI::App app{"Latency of seqto's engine against ONNX Runtime on the benchmark CNNs (median of R runs)"};
  int runs = 10, warmup = 2;
  std::string models_dir = SEQTO_BENCH_MODELS_DIR, models = "resnet50,mobilenetv2,resnet50_qdq,mobilenetv2_qdq",
              json_path;
  bool quick = false;
  app.add_option("--runs", runs, "Timed runs per measurement (default 10; 3 with --quick)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Untimed runs before timing (default 2; 1 with --quick)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--models-dir", models_dir, "Folder with the benchmark models (make_bench_models.py output)");
  app.add_option("--models", models, "Comma-separated model names (files <name>.onnx in --models-dir)");
  app.add_flag("--quick", quick, "Batch 1 only, 3 runs, 1 warm-up (a smoke run)");
  bool no_ort = false;
  app.add_flag("--no-ort", no_ort, "Time seqto only (fused and unfused), not ONNX Runtime");
  std::string threads_list = "1,2";
  app.add_option("--threads", threads_list, "Comma-separated thread counts (default 1,2)");
  app.add_option("--json", json_path, "Also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--runs") == 0) runs = 3;
    if (app.count("--warmup") == 0) warmup = 1;
  }
  const std::vector<int> batches = quick ? std::vector<int>{1} : std::vector<int>{1, 16};
  auto thread_counts_or = bench::ParseCounts("--threads", threads_list);
  if (!thread_counts_or) {
    std::fprintf(stderr, "engine_vs_ort: %s\n", thread_counts_or.error().message.c_str());
    return 1;
  }
  const std::vector<int> thread_counts = *thread_counts_or;
  bench::Timing timing;
  timing.runs = runs;
  timing.warmup = warmup;

  if (Status s = no_ort ? Status::Ok() : testing::OrtAvailable(); !s.ok()) {
    std::fprintf(stderr, "engine_vs_ort: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("seqto engine vs ONNX Runtime: median latency of %d runs after %d warm-up%s\n", runs, warmup,
              warmup == 1 ? "" : "s");
  std::printf("%-16s %6s %8s %12s %12s %10s %12s %10s\n", "model", "batch", "threads", "seqto ms", "ort ms",
              "seqto/ort", "unfused ms", "int8 gain");
  std::fflush(stdout);

  std::vector<Row> rows;
  bool failed = false;
  for (const std::string& name : bench::SplitList(models)) {
    const std::string path = (fs::path(models_dir) / (name + ".onnx")).string();
    auto model = onnxio::LoadModel(path);
    if (!model) {
      std::fprintf(stderr, "engine_vs_ort: %s\n", model.error().message.c_str());
      return 1;
    }
    if (model->graph.inputs.size() != 1) {
      std::fprintf(stderr, "engine_vs_ort: %s: expected one input, found %zu\n", path.c_str(),
                   model->graph.inputs.size());
      return 1;
    }
    const ir::ValueInfo& in = model->graph.inputs[0];
    for (int batch : batches) {
      Shape shape = {batch};
      for (size_t d = 1; in.shape && d < in.shape->size(); ++d) shape.push_back((*in.shape)[d].value);
      if (!in.shape || std::any_of(shape.begin(), shape.end(), [](int64_t v) { return v < 0; })) {
        std::fprintf(stderr, "engine_vs_ort: %s: input '%s' needs known dimensions after the batch (%s)\n",
                     path.c_str(), in.name.c_str(), in.Describe().c_str());
        return 1;
      }
      const Tensor input = bench::RandomInput(shape);
      for (int threads : thread_counts) {
        Row row;
        row.model = name;
        row.batch = batch;
        row.threads = threads;
        const runtime::TensorMap inputs = {{in.name, input}};
        auto ours = bench::TimeSeqto(*model, inputs, threads, timing);
        if (ours)
          row.seqto_ms = ours->p50;
        else {
          row.note = "seqto: " + ours.error().message;
          failed = true;
        }
        if (IsQdq(*model)) {
          const std::string float_name =
              name.size() > 4 && name.compare(name.size() - 4, 4, "_qdq") == 0 ? name.substr(0, name.size() - 4) : "";
          for (const Row& f : rows)
            if (f.model == float_name && f.batch == batch && f.threads == threads) row.float_ms = f.seqto_ms;
          auto unfused = bench::TimeSeqto(*model, inputs, threads, timing, /*optimize=*/false);
          if (unfused)
            row.unfused_ms = unfused->p50;
          else {
            row.note += (row.note.empty() ? "seqto unfused: " : "; seqto unfused: ") + unfused.error().message;
            failed = true;
          }
        }
        if (!no_ort) {
          testing::OrtOptions ort_options;
          ort_options.threads = threads;
          auto ort = testing::OrtBenchmark(path, {{in.name, input}}, runs, warmup, ort_options);
          if (ort)
            row.ort_ms = ort->p50;
          else {
            row.note += (row.note.empty() ? "" : "; ") + ort.error().message;
            failed = true;
          }
        }
        PrintRow(row);
        rows.push_back(row);
      }
    }
  }

  if (!json_path.empty()) {
    nlohmann::json j;
    j["runs"] = runs;
    j["warmup"] = warmup;
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json o = {{"model", r.model}, {"batch", r.batch}, {"threads", r.threads}};
      o["seqto_ms"] = r.seqto_ms < 0 ? nlohmann::json() : nlohmann::json(r.seqto_ms);
      o["ort_ms"] = r.ort_ms < 0 ? nlohmann::json() : nlohmann::json(r.ort_ms);
      o["ratio"] = r.seqto_ms > 0 && r.ort_ms > 0 ? nlohmann::json(r.seqto_ms / r.ort_ms) : nlohmann::json();
      if (r.unfused_ms >= 0) o["unfused_ms"] = r.unfused_ms;
      if (r.float_ms > 0 && r.seqto_ms > 0) {
        o["float_ms"] = r.float_ms;
        o["int8_speedup"] = r.float_ms / r.seqto_ms;
      }
      if (!r.note.empty()) o["error"] = r.note;
      j["rows"].push_back(o);
    }
    if (Status s = bench::WriteJson(json_path, j); !s.ok()) {
      std::fprintf(stderr, "engine_vs_ort: %s\n", s.message().c_str());
      return 1;
    }
  }
  return failed ? 1 : 0;
}
