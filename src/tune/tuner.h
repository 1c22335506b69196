// The tuner, `seqto tune`'s engine (docs/design.md, Pipeline): load and prepare
// the model, calibrate once, quantize fully, analyze and rank the groups, then
// evaluate candidates (the full quantization minus the first k ranked groups) chosen
// by a search strategy, each measured on a runner; keep the Pareto-optimal ones.
// Each step is a stage of its own (tune/tune_stages.h).
//
// The run directory holds everything, written atomically as soon as it is known:
//   config.json            the settings (a resumed run must have the same, `out` aside)
//   digests.json           SHA-256 of the model and every data file (a resumed run's must match)
//   tune.lock              flock'ed while a seqto tune works in the directory
//   calibration.json       the calibrated ranges (calibrate once, also across resumes)
//   analysis.json          per-group errors and every ranker's order
//   baseline.json, baseline/  the float model's metrics and outputs (measured once)
//   cycles/cycle_K.json    one finished candidate (K = groups excluded)
//   candidates/cycle_K.onnx  its model
//   report.json            docs/report-format.md; rewritten after every candidate
//   top1.onnx .. top3.onnx, best.onnx   the Pareto picks so far
// A run killed at any moment and started again with resume loses no finished
// candidate and ends with the same report.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/dataset.h"
#include "ir/graph.h"
#include "quant/analysis/analyze.h"
#include "runtime/session.h"
#include "tune/config.h"

namespace seqto::tune {

// The sampled samples of one data set, in memory, stacked into batches for the
// model's inputs (the same samples every time: seeded, without replacement).
struct LoadedSet {
  std::vector<runtime::TensorMap> batches;
  std::vector<int64_t> labels;  // empty without labels
  size_t samples = 0;
  std::string description;
};
// `what` names the set in errors ("evaluation data: ...").
Expected<LoadedSet> LoadSet(const DataSetConfig& set, const std::vector<ir::ValueInfo>& model_inputs, uint64_t seed,
                            size_t batch_size, const std::string& what);
// The same in two steps: open the data for the model's inputs, then load chosen
// samples of it (the tuner's split, tune/data_split.h).
Expected<std::shared_ptr<data::Dataset>> OpenSet(const DataSetConfig& set,
                                                 const std::vector<ir::ValueInfo>& model_inputs,
                                                 const std::string& what);
Expected<LoadedSet> LoadSamples(const std::shared_ptr<data::Dataset>& dataset, const std::vector<int64_t>& indices,
                                const std::vector<ir::ValueInfo>& model_inputs, size_t batch_size,
                                const std::string& what);

// The analysis as JSON, in the one shape `seqto analyze --json`, the tuner's
// analysis.json and its report share: per-group metrics (name, nodes, op_type,
// order, weight/qdq/xmodel SQNR, seqto_score, sensitivity, sensitivity_isolated;
// null where not measured), and a search's order ([{name, output_loss}]).
nlohmann::json AnalysisGroupsJson(const quant::AnalysisResult& analysis);
nlohmann::json SearchOrderJson(const std::vector<quant::SearchStep>& steps);
// The analysis's passes: [{name, seconds, cpu_seconds, plans, samples}].
nlohmann::json AnalysisStagesJson(const quant::AnalysisResult& analysis);

struct TuneOptions {
  bool resume = false;
  // Progress lines ("calibrating: 3/16 batches", "cycle 4: ..."); empty: silent.
  std::function<void(const std::string&)> progress;
  // Warnings, each at most once per run (calibration data that overlaps the evaluation
  // data, a machine that looks busy); shown even when progress is not.
  std::function<void(const std::string&)> warn;
};

struct TuneResult {
  std::string run_dir;
  std::string report_path;
  size_t cycles = 0;          // candidates evaluated in total
  size_t resumed_cycles = 0;  // of which were loaded from an earlier run
  std::string summary;        // the terminal table of candidates and the top 3
};

Expected<TuneResult> RunTune(const TuneConfig& config, const TuneOptions& options);

}  // namespace seqto::tune
