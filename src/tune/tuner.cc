#include "tune/tuner.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "data/model_feed.h"
#include "tune/tune_stages.h"

namespace seqto::tune {

using nlohmann::json;

// ------------------------------------------------------------------ data

namespace {
json NullIfNotFinite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

json AnalysisGroupsJson(const quant::AnalysisResult& analysis) {
  json groups = json::array();
  for (const auto& g : analysis.groups)
    groups.push_back({{"name", g.name},
                      {"op_type", g.op_type},
                      {"nodes", g.nodes},
                      {"order", g.order},
                      {"macs", g.macs >= 0 ? json(g.macs) : json(nullptr)},
                      {"weight_sqnr_db", NullIfNotFinite(g.weight_sqnr_db)},
                      {"qdq_sqnr_db", NullIfNotFinite(g.qdq_sqnr_db)},
                      {"xmodel_sqnr_db", NullIfNotFinite(g.xmodel_sqnr_db)},
                      {"seqto_score", NullIfNotFinite(g.seqto_score)},
                      {"sensitivity", NullIfNotFinite(g.sensitivity_revert_one)},
                      {"sensitivity_isolated", NullIfNotFinite(g.sensitivity_isolated)}});
  return groups;
}

json SearchOrderJson(const std::vector<quant::SearchStep>& steps) {
  json order = json::array();
  for (const auto& step : steps) order.push_back({{"name", step.group}, {"output_loss", NullIfNotFinite(step.loss)}});
  return order;
}

json AnalysisStagesJson(const quant::AnalysisResult& analysis) {
  json stages = json::array();
  for (const auto& s : analysis.stages)
    stages.push_back({{"name", s.name},
                      {"seconds", s.seconds},
                      {"cpu_seconds", s.cpu_seconds},
                      {"plans", s.plans},
                      {"samples", s.samples}});
  return stages;
}

Expected<std::shared_ptr<data::Dataset>> OpenSet(const DataSetConfig& set,
                                                 const std::vector<ir::ValueInfo>& model_inputs,
                                                 const std::string& what) {
  if (model_inputs.empty()) return UserError(what + " data: the model has no inputs to feed");
  data::DataOptions options;
  options.labels_path = set.labels;
  options.classes_path = set.classes;
  options.preprocess = set.preprocess;
  options.input_shape = data::TargetFor(model_inputs[0]).shape;
  auto dataset = data::OpenDataset(set.path, options);
  if (!dataset) return Status(dataset.error()).WithContext(what + " data");
  return dataset;
}

Expected<LoadedSet> LoadSet(const DataSetConfig& set, const std::vector<ir::ValueInfo>& model_inputs, uint64_t seed,
                            size_t batch_size, const std::string& what) {
  SEQTO_ASSIGN_OR_RETURN(std::shared_ptr<data::Dataset> dataset, OpenSet(set, model_inputs, what));
  const auto indices = data::SampleIndices(dataset->size(), static_cast<int64_t>(set.samples), seed);
  return LoadSamples(dataset, indices, model_inputs, batch_size, what);
}

Expected<LoadedSet> LoadSamples(const std::shared_ptr<data::Dataset>& dataset, const std::vector<int64_t>& indices,
                                const std::vector<ir::ValueInfo>& model_inputs, size_t batch_size,
                                const std::string& what) {
  LoadedSet out;
  out.description = dataset->description();
  out.samples = indices.size();
  if (out.samples == 0) return UserError(what + " data: no samples");
  auto iterator =
      data::BatchIterator::Create(dataset, indices, static_cast<int64_t>(batch_size), data::TargetsFor(model_inputs));
  if (!iterator) return Status(iterator.error()).WithContext(what + " data");
  data::Batch batch;
  while (true) {
    auto more = (*iterator)->Next(batch);
    if (!more) return Status(more.error()).WithContext(what + " data");
    if (!*more) break;
    out.labels.insert(out.labels.end(), batch.labels.begin(), batch.labels.end());
    out.batches.push_back(std::move(batch.feeds));
    batch = data::Batch();
  }
  return out;
}

namespace {

// The pipeline, stage by stage (tune/tune_stages.h), with the time of each.
Expected<TuneResult> RunTuneImpl(const TuneConfig& config, const TuneOptions& options) {
  TuneRun run(config, options);
  // data
  SEQTO_RETURN_IF_ERROR(OpenInputs(run));
  SEQTO_RETURN_IF_ERROR(OpenRunDir(run));
  SEQTO_RETURN_IF_ERROR(LoadData(run));
  // The runner first: the recipes, and pareto's measured costs during the analysis,
  // measure models on it.
  SEQTO_RETURN_IF_ERROR(OpenRunner(run));
  run.times.Stage("setup");
  SEQTO_RETURN_IF_ERROR(Recipes(run));
  run.times.Stage("recipes", run.recipes_reused);
  SEQTO_RETURN_IF_ERROR(Calibrate(run));
  SEQTO_RETURN_IF_ERROR(Plan(run));
  run.times.Stage("calibration", run.calibration_reused);  // the plan's time counts with it
  SEQTO_RETURN_IF_ERROR(Analyze(run));
  run.times.Stage("analysis", run.analysis_reused);
  SEQTO_RETURN_IF_ERROR(Baseline(run));
  run.times.Stage("baseline", run.baseline_reused);
  SEQTO_RETURN_IF_ERROR(Sweep(run));  // writes the report after each candidate
  SEQTO_RETURN_IF_ERROR(WriteReport(run, /*complete=*/true));
  run.times.Stage("report");

  TuneResult result;
  result.run_dir = run.dir.string();
  result.cycles = run.cycles.size();
  result.resumed_cycles = run.resumed_cycles;
  result.report_path = (run.dir / "report.json").string();
  SEQTO_ASSIGN_OR_RETURN(result.summary, Summary(run));
  return result;
}

}  // namespace

Expected<TuneResult> RunTune(const TuneConfig& config, const TuneOptions& options) {
  // The run directory's files are seqto's own and written atomically, but a user may
  // edit or damage them: a missing key must be an error naming the run, not a crash.
  try {
    return RunTuneImpl(config, options);
  } catch (const nlohmann::json::exception& e) {
    return UserError(config.out + ": a file of the run directory is damaged (" + std::string(e.what()) +
                     "); delete it, or the run directory, to recompute");
  }
}

}  // namespace seqto::tune
