// The stages of a `seqto tune` run (tuner.h), internal to the tuner and its tests.
// RunTune calls them in order:
//   data         OpenInputs, OpenRunDir, LoadData: the model, the data sets and their
//                split, the run directory; the evaluation samples in memory
//   recipes      Recipes: the accuracy-recovery techniques the full quantization is
//                tried with; the best one's float rewrite (recipes.json, recipes/)
//   calibration  Calibrate: the ranges of the chosen recipe's model (calibration.json)
//   plan         Plan: the full quantization with the recipe's refinements, split
//                into groups
//   analysis     OpenRunner, Analyze: per-group errors and the ranker's order (analysis.json)
//   baseline     Baseline: the float model's outputs and latency (baseline.json, baseline/)
//   sweep        Sweep: the candidates the search strategy picks (cycles/, candidates/)
//   report       WriteReport, Summary: report.json, the Pareto picks, the terminal table
// Each stage reads what the stages before it left in a TuneRun and adds its own. A
// stage whose result is already in the run directory (a resumed run) reads it from
// there instead of computing it again.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dir_lock.h"
#include "core/parallel.h"
#include "core/status.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "ir/graph.h"
#include "quant/quantize.h"
#include "quant/recover/technique.h"
#include "runners/runner.h"
#include "tune/config.h"
#include "tune/data_split.h"
#include "tune/search.h"
#include "tune/stage_times.h"
#include "tune/tuner.h"

namespace seqto::tune {

// One finished candidate.
struct Cycle {
  size_t k = 0;      // groups excluded: the first k of the ranking
  nlohmann::json j;  // as written to cycles/cycle_K.json
  CandidateOutcome outcome;
};
// The objectives of a cycle_K.json (its latency: the p50).
CandidateOutcome OutcomeOf(const nlohmann::json& cycle);

// What the stages of one run hand each other, in the order they fill it.
struct TuneRun {
  TuneRun(const TuneConfig& config, const TuneOptions& options)
      : config(config),
        options(options),
        dir(config.out),
        settings(config.ToJson()),
        quant_options(config.quantization) {}

  const TuneConfig& config;
  const TuneOptions& options;
  const std::filesystem::path dir;  // the run directory
  const nlohmann::json settings;    // config.json; report.json's settings.config
  StageTimes times;
  void Say(const std::string& line) const {
    if (options.progress) options.progress(line);
  }
  void Warn(const std::string& line) const {
    if (options.warn) options.warn(line);
  }

  // data (OpenInputs, OpenRunDir, LoadData)
  ir::Model prepared;       // the float model, prepared for quantization
  std::string output_name;  // its first output: what candidates are compared on
  std::shared_ptr<data::Dataset> eval_data, calib_data, ranking_data;  // calib_data: static mode only
  DataSplit split;
  nlohmann::json digests;       // digests.json
  std::optional<DirLock> lock;  // on the run directory, for the whole run
  nlohmann::json data_json;     // report.json's settings.data: what each set uses
  LoadedSet eval;               // the evaluation samples
  bool has_labels() const { return !eval.labels.empty(); }
  // Whether accuracy loss is the drop of labelled top-1 accuracy (else top-1
  // disagreement with the float model): search.loss and the data decide.
  bool loss_from_labels() const { return has_labels() && config.loss == "accuracy"; }

  // recipes (Recipes)
  quant::QuantOptions quant_options;  // config.quantization, with the chosen recipe's techniques
  nlohmann::json recipes_json;        // recipes.json; null without the stage
  nlohmann::json recovery_record;     // what the chosen techniques did (the float stage so far)
  std::optional<LoadedSet> calib;     // the calibration samples, once loaded (CalibrationSamples)
  bool recipes_reused = false;

  // calibration (Calibrate; static mode only)
  quant::TensorRanges ranges;
  bool ranges_ready = false;  // the recipes stage calibrated the chosen model
  bool calibration_reused = false;

  // plan (Plan)
  std::optional<quant::QuantPlan> plan;

  // analysis (OpenRunner, Analyze)
  std::unique_ptr<runners::Runner> runner;
  runtime::TensorMap latency_batch;  // the first latency.batch evaluation samples
  std::vector<std::string> order;    // the ranker's order of the plan's groups
  nlohmann::json groups_json;        // analysis.json's groups
  nlohmann::json measured_cost;      // pareto's timed exclusion costs, or null
  bool analysis_reused = false;

  // baseline (Baseline)
  runners::LatencyOptions latency_options;
  // The load other processes put on the machine while models are measured; short
  // measurements are pooled with the next ones until there is enough to tell.
  OtherLoadMeter load;
  int measure_threads = 0;  // the threads latency is measured with
  nlohmann::json baseline;  // baseline.json
  Tensor float_output;      // baseline/output.npy
  double float_top1 = 0;    // its top-1 accuracy (%); 0 without labels
  bool baseline_reused = false;

  // sweep (Sweep) and report (WriteReport)
  std::map<size_t, Cycle> cycles;  // every finished candidate, by k
  size_t resumed_cycles = 0;       // of which came from an earlier run
  bool warned_busy = false;        // the machine-busy warning was shown
};

// data: loads and prepares the model, opens the data sets and splits them, hashes
// every file read. Nothing is written: a missing or bad file leaves nothing behind.
Status OpenInputs(TuneRun& run);
// The run directory: created and locked; an existing run is continued only with
// --resume, the same settings and the same file contents; config.json, digests.json.
Status OpenRunDir(TuneRun& run);
// States the split (and any overlap with the evaluation data), loads the
// evaluation samples.
Status LoadData(TuneRun& run);
// recipes: with "auto" or a list, the full quantization under each recipe (a set of
// recovery techniques), measured on the ranking samples; the best by the first
// objective (ties, and accuracy losses within sampling noise: the higher output
// SQNR) is kept (recipes.json; a resumed run reads its choice). Then, and for a
// forced recipe, the chosen float-stage techniques rewrite run.prepared.
Status Recipes(TuneRun& run);
// Whether two recipes' accuracy losses on the same samples differ by more than
// sampling noise: `a[i]` / `b[i]` say whether sample i counts against each (wrong,
// or unlike the float model). McNemar's test on the samples only one of them misses,
// two-sided at 95%: |n_a - n_b| > 1.96 sqrt(n_a + n_b). The recipes stage treats
// losses that do not differ as a tie, decided by output SQNR.
bool MissesDiffer(const std::vector<bool>& a, const std::vector<bool>& b);

// The calibration samples in memory (loaded on first use; static mode only).
Expected<const LoadedSet*> CalibrationSamples(TuneRun& run);
// What the recovery techniques read: the calibration samples (through `list`, which
// must outlive the context; static mode only), the threads and the run's seed.
Expected<quant::recover::RecoveryContext> RecoveryContextOf(TuneRun& run, quant::BatchList& list);
// The ranges `model` gets from the calibration samples under `options`.
Expected<quant::TensorRanges> CalibrateModel(TuneRun& run, const ir::Model& model, const quant::QuantOptions& options);
// The output `name` of a runner's outputs (an internal error when missing).
Expected<Tensor> FirstOutput(const runtime::TensorMap& outputs, const std::string& name);
// The first `batch` samples of a set: what latency is measured on.
Expected<runtime::TensorMap> LatencyBatch(const LoadedSet& set, int batch);
// calibration: the ranges of the tensors static quantization needs, calibrated once
// and kept in calibration.json, so a resumed run uses the very same ones.
Status Calibrate(TuneRun& run);
// plan: the full quantization of the prepared model with the chosen recipe's
// plan-stage refinements, split into groups.
Status Plan(TuneRun& run);
// The runner every model is measured on, and the batch latency is measured on.
Status OpenRunner(TuneRun& run);
// analysis: per-group errors and every ranker's order on the ranking data, once
// (analysis.json); `pareto` also times exclusion costs on the runner.
Status Analyze(TuneRun& run);
// baseline: the float model's outputs, metrics and latency, once (baseline.json,
// baseline/output.npy).
Status Baseline(TuneRun& run);
// sweep: the candidates from an earlier run, then the ones the search strategy
// picks, each written (cycles/, candidates/, report.json) as soon as it is measured.
Status Sweep(TuneRun& run);
// report: report.json (docs/report-format.md) and the Pareto picks (top1..3.onnx,
// best.onnx) from the cycles so far; `complete` once the sweep is over.
Status WriteReport(TuneRun& run, bool complete);
// The terminal summary: the float model, the candidates, the top 3, the stage times.
Expected<std::string> Summary(const TuneRun& run);

}  // namespace seqto::tune
