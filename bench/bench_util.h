// Small helpers the benchmark programs share (bench/bench_util.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/stats.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "runtime/session.h"

namespace seqto::bench {

// The non-empty items of a comma-separated command-line list ("1,2" -> {"1", "2"}).
inline std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

// A comma list of positive counts (threads, batch sizes): "1,2" -> {1, 2}. The error
// names `option` and the item that is not a count.
Expected<std::vector<int>> ParseCounts(const std::string& option, const std::string& text);

// How long to measure: `warmup` untimed runs, then `runs` timed runs, but no more
// once `budget_s` seconds of timed runs have passed and at least `min_runs` ran, and
// no more warm-up runs once one ran and they took `budget_s` (big models at batch 16
// get fewer runs; 0: no budget).
struct Timing {
  int runs = 10, warmup = 2, min_runs = 3;
  double budget_s = 0;
};

// Median-based latency of seqto's engine (an in-process runtime::Session with
// `threads` threads; optimize = false: the unoptimized graph). stats.runs says how
// many timed runs the budget allowed, `warmup_done` (if given) how many untimed ones.
Expected<LatencyStats> TimeSeqto(const ir::Model& model, const runtime::TensorMap& inputs, int threads,
                                 const Timing& timing, bool optimize = true, int* warmup_done = nullptr);

double Median(std::vector<double> values);  // NaN for none

// One round's latency of one model file in both runtimes: seqto's engine
// (TimeSeqto) and ONNX Runtime (the file at `path`, as many timed runs and warm-ups
// as seqto got). `ort_first` times ONNX Runtime first: the programs alternate the
// order between rounds so that a load that grows or fades during a round does not
// always favour the same runtime. A failure leaves that runtime's ms at -1 and says
// why in `error`.
struct PairTime {
  double seqto_ms = -1, ort_ms = -1;
  int runs = 0;
  std::string error;
};
PairTime TimePair(const ir::Model& model, const std::string& path, const runtime::TensorMap& inputs, int threads,
                  const Timing& timing, bool with_ort, bool ort_first);

// One file of a block the programs time together (one batch and thread count).
struct BlockFile {
  const ir::Model* model = nullptr;
  std::string path;
  runtime::TensorMap inputs;
};
// One interleaved round over a block: every file timed with TimePair, in the block's
// order on even rounds, and reversed, ONNX Runtime first, on odd ones. A file whose
// `skip` is true (it failed in an earlier round) is left untimed (a default PairTime).
std::vector<PairTime> TimeRound(const std::vector<BlockFile>& files, const std::vector<bool>& skip, int round,
                                int threads, const Timing& timing, bool with_ort);

// The values one quantity took over interleaved measurement rounds (a latency, or a
// ratio of two latencies of the same round). This machine's load drifts by tens of
// percent within minutes, so the programs report the median over rounds, and the
// spread, rather than one pass: a ratio of two runtimes measured in the same round
// shares that round's load.
struct Rounds {
  std::vector<double> values;  // measured rounds only
  void Add(double v) {
    if (v > 0 && std::isfinite(v)) values.push_back(v);
  }
  double median() const { return values.empty() ? -1 : Median(values); }
  // "0.81-0.93" (min-max over the rounds), "" with fewer than two rounds.
  std::string Spread() const;
  nlohmann::json Json() const;  // the per-round values
};

// Uniform random float32 in [-1, 1] with a fixed seed: the same input for every runtime.
Tensor RandomInput(const Shape& shape, unsigned seed = 42);

// The single input's shape at `batch`: `dims` (the dimensions after the batch) when
// given, else the model's, which must then be known.
Expected<Shape> InputShape(const ir::Model& model, int batch, const std::vector<int64_t>& dims = {});

// "12.34" (two decimals), or "n/a" for a negative value (not measured).
std::string Fmt(double ms);
// a / b with two decimals (and `suffix`), or "n/a" when either is missing.
std::string Ratio(double a, double b, const char* suffix = "");
// A measured value or JSON null (negative: not measured).
nlohmann::json JsonMs(double ms);

// Runs a program (argv[0] a path) to its end with stdin from /dev/null; returns its
// exit code and its stdout and stderr together.
struct CommandResult {
  int exit_code = 0;
  std::string output;
};
Expected<CommandResult> RunCommand(const std::vector<std::string>& argv);

// Writes `j` (indented) to `path`; the error names the file.
Status WriteJson(const std::string& path, const nlohmann::json& j);

}  // namespace seqto::bench
