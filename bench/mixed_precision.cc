// mixed_precision: how fast seqto runs the candidates of a `damage` linear sweep.
//
//   mixed_precision MODEL.onnx --data D [--preprocess P] [--samples S] [--calib-samples C] [--per-channel]
//                   [--greedy-steps G] [--analysis F] [--ks 0,1,2,4,8,16,n] [--batches 1,16] [--threads 1,2] [--runs R]
//                   [--rounds N] [--warmup W] [--budget S] [--work-dir DIR] [--quick] [--no-ort] [--json F]
//
// Issue 13, point 1. `seqto analyze` ranks the float model's quantization groups
// (the `damage` order, on --samples of --data); `seqto quantize --exclude` makes the
// candidate that leaves the first k groups float, for each k of --ks (capped at the
// number of groups n). Each candidate, the float model and the fully quantized one
// (k = 0) are timed in seqto and ONNX Runtime (the same file, the same random input)
// for each batch size and thread count, and compared with the bound
//   int8_ms + (float_ms - int8_ms) * (share of the model's MACs in the excluded groups) + 0.1 * float_ms
// where float_ms and int8_ms are seqto's own latencies of the float model and of k = 0.
// The MACs (multiply-accumulates of Conv, ConvTranspose, Gemm and MatMul at batch 1,
// quant/macs.h) of the model and of each group come from the analysis JSON. Each batch and thread count is timed in
// --rounds interleaved rounds (every file, both runtimes, the order alternating between rounds). Prints per k the
// medians over the rounds of: seqto ms, ORT ms, the bound, and the same-round ratios seqto/ORT and seqto/bound (with
// their spread), then one line per target (seqto/bound <= 1.0 and seqto/ORT <= 0.9 on every row).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
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

constexpr double kBoundTarget = 1.0;  // seqto/bound on every row
constexpr double kOrtTarget = 0.9;    // seqto/ORT on every row

struct Args {
  std::string model, data, preprocess, work_dir, json, analysis, ks = "0,1,2,4,8,16,n", batches = "1,16",
                                                                 threads = "1,2";
  size_t samples = 64, calib_samples = 64, greedy_steps = 8;
  bool per_channel = false, quick = false, no_ort = false;
  int rounds = 3;
  bench::Timing timing;
};

struct Candidate {
  size_t k = 0;
  std::string path;
  double mac_share = 0;             // -1: a group's MACs are unknown
  std::vector<std::string> groups;  // the excluded groups, in damage order
};

struct Row {
  std::string label;  // "float" or "k=N"
  size_t k = 0;
  double mac_share = 0;
  int batch = 0, threads = 0;
  // Medians over the rounds: latencies, the bound (from the round's own float and
  // k = 0 times) and the same-round ratios; -1 where not measured.
  double seqto_ms = -1, ort_ms = -1, bound_ms = -1, vs_ort = -1, vs_bound = -1;
  bench::Rounds seqto_rounds, ort_rounds, bound_rounds, vs_ort_rounds, vs_bound_rounds;
  std::string error;

  void Finish() {
    seqto_ms = seqto_rounds.median();
    ort_ms = ort_rounds.median();
    bound_ms = bound_rounds.median();
    vs_ort = vs_ort_rounds.median();
    vs_bound = vs_bound_rounds.median();
  }
};

// Runs a seqto subcommand; on failure the error carries its last output line.
Status RunSeqto(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {SEQTO_EXECUTABLE};
  argv.insert(argv.end(), args.begin(), args.end());
  SEQTO_ASSIGN_OR_RETURN(auto result, bench::RunCommand(argv));
  if (result.exit_code == 0) return Status::Ok();
  std::string tail = result.output;
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  if (const size_t nl = tail.rfind('\n'); nl != std::string::npos) tail = tail.substr(nl + 1);
  return UserError("seqto " + args.at(0) + " failed: " + tail);
}

// The options analyze and quantize share (data, preprocessing, calibration, weights).
std::vector<std::string> CalibArgs(const Args& a) {
  std::vector<std::string> args = {"--calib-samples", std::to_string(a.calib_samples)};
  if (!a.preprocess.empty()) args.insert(args.end(), {"--preprocess", a.preprocess});
  if (a.per_channel) args.push_back("--per-channel");
  return args;
}

Expected<std::vector<size_t>> ParseKs(const std::string& text, size_t n) {
  std::set<size_t> ks = {0};  // k = 0 (all quantized) is the bound's int8_ms
  for (const std::string& item : bench::SplitList(text)) {
    if (item == "n") {
      ks.insert(n);
      continue;
    }
    if (item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
      return UserError("--ks: '" + item + "' is not a group count (or n)");
    ks.insert(std::min<size_t>(std::stoul(item), n));
  }
  return std::vector<size_t>(ks.begin(), ks.end());
}

void PrintRow(const Row& r) {
  char share[16] = "";
  if (r.label != "float") std::snprintf(share, sizeof share, r.mac_share < 0 ? "unknown" : "%.1f%%", 100 * r.mac_share);
  std::printf("%-7s %9s %5d %7d %10s %10s %10s %9s %11s %11s %11s%s%s\n", r.label.c_str(), share, r.batch, r.threads,
              bench::Fmt(r.seqto_ms).c_str(), bench::Fmt(r.ort_ms).c_str(), bench::Fmt(r.bound_ms).c_str(),
              bench::Ratio(r.vs_ort, 1).c_str(), r.vs_ort_rounds.Spread().c_str(), bench::Ratio(r.vs_bound, 1).c_str(),
              r.vs_bound_rounds.Spread().c_str(), r.error.empty() ? "" : "   ", r.error.c_str());
  std::fflush(stdout);
}

// One line per target; returns them as JSON.
nlohmann::json PrintTargets(const std::vector<Row>& rows) {
  std::vector<std::string> over_bound, over_ort;
  size_t bound_rows = 0, ort_rows = 0;
  auto name = [](const Row& r) { return r.label + " b" + std::to_string(r.batch) + " t" + std::to_string(r.threads); };
  for (const Row& r : rows) {
    if (r.label == "float") continue;
    if (r.vs_bound > 0) {
      ++bound_rows;
      if (r.vs_bound > kBoundTarget) over_bound.push_back(name(r) + " " + bench::Ratio(r.vs_bound, 1));
    }
    if (r.vs_ort > 0) {
      ++ort_rows;
      if (r.vs_ort > kOrtTarget) over_ort.push_back(name(r) + " " + bench::Ratio(r.vs_ort, 1));
    }
  }
  auto line = [](const char* what, double target, size_t measured, const std::vector<std::string>& over) {
    const bool met = measured > 0 && over.empty();
    std::printf("target %s <= %.1f on every candidate row: %s", what, target, met ? "met" : "missed");
    if (measured == 0) std::printf(" (no row measured)");
    if (!over.empty()) {
      std::string s;
      for (const auto& o : over) s += (s.empty() ? "" : ", ") + o;
      std::printf(" (%zu of %zu rows over: %s)", over.size(), measured, s.c_str());
    }
    std::printf("\n");
    return met;
  };
  std::printf("\n");
  nlohmann::json j;
  j["bound_met"] = line("seqto/bound", kBoundTarget, bound_rows, over_bound);
  j["bound_over"] = over_bound;
  j["ort_met"] = line("seqto/ort", kOrtTarget, ort_rows, over_ort);
  j["ort_over"] = over_ort;
  return j;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "mixed_precision: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ChooseThreadWaits(argv);  // as the seqto executable does
  CLI::App app{"Latency of a damage linear sweep's candidates in seqto and ONNX Runtime, against the MAC bound"};
  Args a;
  a.timing.budget_s = 5;
  app.add_option("model", a.model, "Float ONNX model")->required();
  app.add_option("--data", a.data, "Calibration and ranking data: .npy, image folder, ... (as seqto analyze)")
      ->required();
  app.add_option("--preprocess", a.preprocess, "Preprocessing of image data (as seqto analyze)");
  app.add_option("--samples", a.samples, "Ranking samples for seqto analyze (default 64)");
  app.add_option("--calib-samples", a.calib_samples, "Calibration samples (default 64)");
  app.add_option("--analysis", a.analysis,
                 "Use this `seqto analyze --json` output of MODEL (from an earlier run's work folder) instead of "
                 "analyzing again");
  app.add_option("--greedy-steps", a.greedy_steps, "seqto analyze's interaction-search depth (default 8)");
  app.add_flag("--per-channel", a.per_channel, "Per-channel weights (default per-tensor)");
  app.add_option("--ks", a.ks, "Groups to exclude, first of the damage order (default 0,1,2,4,8,16,n; n = all)");
  app.add_option("--batches", a.batches, "Comma-separated batch sizes (default 1,16; 1 with --quick)");
  app.add_option("--threads", a.threads, "Comma-separated thread counts (default 1,2)");
  app.add_option("--runs", a.timing.runs, "Timed runs per measurement at most (default 10; 3 with --quick)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", a.rounds,
                 "Interleaved rounds: every file of one batch and thread count is timed once per round in both "
                 "runtimes; rows show medians over rounds of same-round ratios, and their spread (default 3; 1 with "
                 "--quick)")
      ->check(CLI::Range(1, 100));
  app.add_option("--warmup", a.timing.warmup, "Untimed runs before timing (default 2; 1 with --quick)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--budget", a.timing.budget_s,
                 "Seconds of timed runs per measurement after which no more runs start (0: no limit; default 5)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--work-dir", a.work_dir,
                 "Folder for the analysis and the candidates (default: <build>/bench/mp/<model>)");
  app.add_flag("--quick", a.quick, "Batch 1 only, 3 runs, 1 warm-up, 16 ranking and calibration samples, no searches");
  app.add_flag("--no-ort", a.no_ort, "Time seqto only");
  app.add_option("--json", a.json, "Also write the candidates, rows and targets as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  if (a.quick) {
    if (app.count("--runs") == 0) a.timing.runs = 3;
    if (app.count("--rounds") == 0) a.rounds = 1;
    if (app.count("--warmup") == 0) a.timing.warmup = 1;
    if (app.count("--batches") == 0) a.batches = "1";
    if (app.count("--samples") == 0) a.samples = 16;
    if (app.count("--calib-samples") == 0) a.calib_samples = 16;
    if (app.count("--greedy-steps") == 0) a.greedy_steps = 0;
  }
  auto batches = bench::ParseCounts("--batches", a.batches);
  if (!batches) return Fail(batches.error().message);
  auto thread_counts = bench::ParseCounts("--threads", a.threads);
  if (!thread_counts) return Fail(thread_counts.error().message);
  if (Status s = a.no_ort ? Status::Ok() : testing::OrtAvailable(); !s.ok()) return Fail(s.message());
  if (a.work_dir.empty()) a.work_dir = (fs::path(SEQTO_BENCH_BINARY_DIR) / "mp" / fs::path(a.model).stem()).string();
  std::error_code ec;
  fs::create_directories(a.work_dir, ec);
  if (ec) return Fail(a.work_dir + ": cannot create folder: " + ec.message());

  // The list's syntax is checked before the analysis (the long part); k is capped below.
  if (auto ks = ParseKs(a.ks, SIZE_MAX); !ks) return Fail(ks.error().message);
  auto float_model = onnxio::LoadModel(a.model);
  if (!float_model) return Fail(float_model.error().message);

  // The damage order: from seqto analyze, run now or earlier (--analysis).
  std::string analysis_path = a.analysis;
  const auto calib_args = CalibArgs(a);
  if (analysis_path.empty()) {
    analysis_path = (fs::path(a.work_dir) / "analysis.json").string();
    std::printf("ranking: seqto analyze on %zu samples of %s\n", a.samples, a.data.c_str());
    std::vector<std::string> analyze = {"analyze",        a.model,
                                        "--data",         a.data,
                                        "--samples",      std::to_string(a.samples),
                                        "--greedy-steps", std::to_string(a.greedy_steps),
                                        "--json",         analysis_path};
    analyze.insert(analyze.end(), calib_args.begin(), calib_args.end());
    if (Status s = RunSeqto(analyze); !s.ok()) return Fail(s.message());
  } else {
    if (!fs::is_regular_file(analysis_path, ec)) return Fail(analysis_path + ": no such file (--analysis)");
    std::printf("ranking: %s\n", analysis_path.c_str());
  }
  nlohmann::json analysis;
  try {
    std::ifstream in(analysis_path);
    analysis = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return Fail(analysis_path + ": " + e.what());
  }
  if (!a.analysis.empty()) {
    const std::string analyzed = analysis.value("model", "");
    std::error_code ec2;
    if (analyzed.empty() || !fs::equivalent(analyzed, a.model, ec2))
      return Fail(analysis_path + ": an analysis of '" + analyzed + "', not of " + a.model);
  }
  if (!analysis.contains("rankings") || !analysis["rankings"].contains("damage"))
    return Fail(analysis_path + ": no 'damage' ranking (did the sensitivity pass run?)");
  const auto order = analysis["rankings"]["damage"].get<std::vector<std::string>>();
  // The MACs (quant/macs.h: batch 1, from ONNX shape inference) of the model and of
  // each group; null where shape inference could not tell.
  if (!analysis.contains("macs") || !analysis["macs"].is_number_integer() || analysis["macs"].get<int64_t>() <= 0)
    return Fail(analysis_path +
                ": no MAC count for the model (no Conv, ConvTranspose, Gemm or MatMul with known shapes)");
  const int64_t total_macs = analysis["macs"].get<int64_t>();
  std::map<std::string, std::vector<std::string>> group_nodes;
  std::map<std::string, int64_t> group_macs;  // -1: unknown
  for (const auto& g : analysis["groups"]) {
    group_nodes[g["name"]] = g["nodes"].get<std::vector<std::string>>();
    group_macs[g["name"]] = g.contains("macs") && g["macs"].is_number_integer() ? g["macs"].get<int64_t>() : -1;
  }
  auto ks = ParseKs(a.ks, order.size());
  if (!ks) return Fail(ks.error().message);

  // The candidates.
  std::vector<Candidate> candidates;
  for (size_t k : *ks) {
    Candidate c;
    c.k = k;
    c.path = (fs::path(a.work_dir) / ("k" + std::to_string(k) + ".onnx")).string();
    c.groups.assign(order.begin(), order.begin() + k);
    std::string exclude;
    int64_t macs = 0;
    for (const std::string& g : c.groups) {
      for (const std::string& node : group_nodes[g]) exclude += (exclude.empty() ? "" : ",") + node;
      macs = macs < 0 || group_macs[g] < 0 ? -1 : macs + group_macs[g];
    }
    c.mac_share = macs < 0 ? -1 : static_cast<double>(macs) / static_cast<double>(total_macs);
    std::vector<std::string> quantize = {"quantize", a.model, "-o", c.path, "--calib-data", a.data};
    quantize.insert(quantize.end(), calib_args.begin(), calib_args.end());
    if (!exclude.empty()) quantize.insert(quantize.end(), {"--exclude", exclude});
    std::printf("candidate k=%zu: %zu groups float, %s of %.1f M MACs -> %s\n", k, c.groups.size(),
                c.mac_share < 0 ? "unknown share" : (bench::Fmt(100 * c.mac_share) + "%").c_str(), total_macs / 1e6,
                c.path.c_str());
    if (Status s = RunSeqto(quantize); !s.ok()) return Fail(s.message());
    candidates.push_back(c);
  }

  std::printf(
      "\nseqto vs ONNX Runtime on the candidates, median latency (ms per batch) of up to %d runs (%.0f s budget) "
      "after %d warm-up%s, median over %d interleaved round%s;\nbound = int8 + (float - int8) * MAC share + 0.1 * "
      "float, with seqto's float and k=0 ms of the same round\n",
      a.timing.runs, a.timing.budget_s, a.timing.warmup, a.timing.warmup == 1 ? "" : "s", a.rounds,
      a.rounds == 1 ? "" : "s");
  std::printf("%-7s %9s %5s %7s %10s %10s %10s %9s %11s %11s %11s\n", "k", "MAC share", "batch", "threads", "seqto ms",
              "ort ms", "bound ms", "seqto/ort", "(spread)", "seqto/bound", "(spread)");
  std::vector<ir::Model> models;
  for (const Candidate& c : candidates) {
    auto m = onnxio::LoadModel(c.path);
    if (!m) return Fail(m.error().message);
    models.push_back(std::move(*m));
  }
  std::vector<Row> rows;
  bool failed = false;
  // The files of one block: the float model, then the candidates (k = 0 first).
  std::vector<bench::BlockFile> files = {{&*float_model, a.model, {}}};
  for (size_t i = 0; i < candidates.size(); ++i) files.push_back({&models[i], candidates[i].path, {}});
  for (int batch : *batches)
    for (int threads : *thread_counts) {
      std::vector<Row> block(files.size());
      for (size_t i = 0; i < block.size(); ++i) {
        Row& r = block[i];
        r.label = i == 0 ? "float" : "k=" + std::to_string(candidates[i - 1].k);
        if (i > 0) {
          r.k = candidates[i - 1].k;
          r.mac_share = candidates[i - 1].mac_share;
        }
        r.batch = batch;
        r.threads = threads;
        auto shape = bench::InputShape(*files[i].model, batch);
        if (!shape) return Fail(files[i].path + ": " + shape.error().message);
        files[i].inputs = {{files[i].model->graph.inputs[0].name, bench::RandomInput(*shape)}};
      }
      // Interleaved rounds: each times every file in both runtimes (the order of the
      // files and of the runtimes alternating between rounds), and the round's ratios
      // use only that round's times, so a load that comes and goes hits both sides.
      for (int round = 0; round < a.rounds; ++round) {
        std::vector<bool> failed_before;
        for (const Row& r : block) failed_before.push_back(!r.error.empty());
        const std::vector<bench::PairTime> times =
            bench::TimeRound(files, failed_before, round, threads, a.timing, !a.no_ort);
        const double float_ms = times[0].seqto_ms, int8_ms = times.size() > 1 ? times[1].seqto_ms : -1;
        for (size_t i = 0; i < block.size(); ++i) {
          Row& r = block[i];
          const bench::PairTime& t = times[i];
          if (!t.error.empty()) {
            r.error = t.error;
            failed = true;
          }
          r.seqto_rounds.Add(t.seqto_ms);
          r.ort_rounds.Add(t.ort_ms);
          if (t.seqto_ms > 0 && t.ort_ms > 0) r.vs_ort_rounds.Add(t.seqto_ms / t.ort_ms);
          if (i > 0 && float_ms > 0 && int8_ms > 0 && r.mac_share >= 0 && t.seqto_ms > 0) {
            const double bound = int8_ms + (float_ms - int8_ms) * r.mac_share + 0.1 * float_ms;
            r.bound_rounds.Add(bound);
            r.vs_bound_rounds.Add(t.seqto_ms / bound);
          }
        }
      }
      for (Row& r : block) {
        r.Finish();
        PrintRow(r);
        rows.push_back(r);
      }
    }
  const nlohmann::json targets = PrintTargets(rows);

  if (!a.json.empty()) {
    nlohmann::json j;
    j["model"] = a.model;
    j["rounds"] = a.rounds;
    j["total_macs"] = total_macs;
    j["groups"] = order.size();
    j["candidates"] = nlohmann::json::array();
    for (const Candidate& c : candidates)
      j["candidates"].push_back({{"k", c.k},
                                 {"path", c.path},
                                 {"mac_share", c.mac_share < 0 ? nlohmann::json() : nlohmann::json(c.mac_share)},
                                 {"groups", c.groups}});
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json o = {{"candidate", r.label}, {"batch", r.batch}, {"threads", r.threads}};
      if (r.label != "float") {
        o["k"] = r.k;
        o["mac_share"] = r.mac_share < 0 ? nlohmann::json() : nlohmann::json(r.mac_share);
      }
      o["seqto_ms"] = bench::JsonMs(r.seqto_ms);
      o["ort_ms"] = bench::JsonMs(r.ort_ms);
      o["bound_ms"] = bench::JsonMs(r.bound_ms);
      o["seqto_over_ort"] = r.vs_ort > 0 ? nlohmann::json(r.vs_ort) : nlohmann::json();
      o["seqto_over_bound"] = r.vs_bound > 0 ? nlohmann::json(r.vs_bound) : nlohmann::json();
      o["rounds"] = {{"seqto_ms", r.seqto_rounds.Json()},
                     {"ort_ms", r.ort_rounds.Json()},
                     {"seqto_over_ort", r.vs_ort_rounds.Json()},
                     {"seqto_over_bound", r.vs_bound_rounds.Json()}};
      if (!r.error.empty()) o["error"] = r.error;
      j["rows"].push_back(o);
    }
    j["targets"] = targets;
    if (Status s = bench::WriteJson(a.json, j); !s.ok()) return Fail(s.message());
  }
  return failed ? 1 : 0;
}
