#include "tune/tune_stages.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>
#include <tuple>

#include "core/digest.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "core/npy.h"
#include "eval/metrics.h"
#include "eval/pareto.h"
#include "onnxio/model_io.h"
#include "quant/analysis/analyze.h"
#include "quant/calib/calibrate.h"
#include "quant/rank/ranker.h"
#include "quant/recover/recover.h"
#include "tune/measured_cost.h"

namespace seqto::tune {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Status WriteJson(const fs::path& path, const json& j) { return WriteFileAtomic(path.string(), j.dump(2) + "\n"); }

// A file of the run directory: seqto wrote it, so damage means deleting it is the fix.
Expected<json> ReadJson(const fs::path& path) {
  auto j = ReadJsonFile(path.string());
  if (!j) return UserError(j.error().message + " (delete it to recompute)");
  return j;
}

// Every regular file of `path` (itself, or all under a folder), sorted.
std::vector<std::string> FilesUnder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// digests.json: {"sha256": {absolute path: hex}} of the files `paths` name (folders:
// every file under them).
Expected<json> ContentDigests(const std::vector<std::string>& paths) {
  std::set<std::string> files;
  for (const auto& p : paths)
    for (const auto& f : FilesUnder(p)) {
      std::error_code ec;
      const fs::path abs = fs::absolute(f, ec);
      files.insert((ec ? fs::path(f) : abs).lexically_normal().string());
    }
  const std::vector<std::string> list(files.begin(), files.end());
  SEQTO_ASSIGN_OR_RETURN(std::vector<std::string> hashes, Sha256Files(list));
  json sha = json::object();
  for (size_t i = 0; i < list.size(); ++i) sha[list[i]] = hashes[i];
  return json{{"sha256", sha}};
}

// The first file whose content differs between a run's digests and today's.
std::optional<std::string> DigestDifference(const json& run, const json& now) {
  const json& a = run.at("sha256");
  const json& b = now.at("sha256");
  for (const auto& [file, hash] : a.items()) {
    if (!b.contains(file)) return file + " was read by the run but is not read now (removed?)";
    if (b.at(file) != hash) return file + ": its content changed since the run was made (SHA-256 differs)";
  }
  for (const auto& [file, hash] : b.items())
    if (!a.contains(file)) return file + " is new since the run was made";
  return std::nullopt;
}

// latency_ms as report.json has it (docs/report-format.md): the statistics; whether
// they are unstable (p95/p50 above kUnstableP95OverP50); the cores' worth of CPU time
// other processes took while the model was measured (null: unknown) and whether that
// looks busy for `threads` threads (0: all cores).
json LatencyJson(const LatencyStats& s, std::optional<double> other_cores, int threads) {
  json j = {{"mean", s.mean}, {"p50", s.p50},       {"p95", s.p95},  {"min", s.min},
            {"max", s.max},   {"stddev", s.stddev}, {"runs", s.runs}};
  j["unstable"] = LatencyUnstable(s);
  j["other_cores"] = other_cores ? json(std::round(*other_cores * 100) / 100) : json(nullptr);
  j["busy"] = other_cores && LooksBusy(*other_cores, threads, AvailableCores());
  return j;
}

std::string HumanBytes(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(b >= 1e6 ? 2 : 1);
  if (b >= 1e6)
    os << b / 1e6 << " MB";
  else
    os << b / 1e3 << " kB";
  return os.str();
}

}  // namespace

Expected<Tensor> FirstOutput(const runtime::TensorMap& outputs, const std::string& name) {
  auto it = outputs.find(name);
  if (it == outputs.end()) return InternalError("the runner returned no output '" + name + "'");
  return it->second;
}

Expected<runtime::TensorMap> LatencyBatch(const LoadedSet& set, int batch) {
  if (set.batches.empty()) return UserError("no samples to measure latency on");
  runtime::TensorMap out;
  for (const auto& [name, t] : set.batches.front()) {
    SEQTO_ASSIGN_OR_RETURN(out[name], runners::SliceDim0(t, 0, std::min<int64_t>(batch, t.dim(0))));
  }
  return out;
}

CandidateOutcome OutcomeOf(const json& j) {
  CandidateOutcome o;
  o.accuracy_loss = j.at("metrics").at("accuracy_loss").get<double>();
  o.size_bytes = j.at("size_bytes").get<double>();
  o.latency_ms = j.at("latency_ms").at("p50").get<double>();  // the median: one slow run does not move it
  return o;
}

// ------------------------------------------------------------------ data

Status OpenInputs(TuneRun& run) {
  const TuneConfig& config = run.config;
  // Everything the run reads is opened (and hashed) before the run directory is
  // touched: a missing or bad file is an error that leaves nothing behind.
  SEQTO_ASSIGN_OR_RETURN(ir::Model float_model, onnxio::LoadModel(config.model));
  SEQTO_ASSIGN_OR_RETURN(run.prepared, quant::QuantPlan::Prepare(float_model));
  const std::vector<ir::ValueInfo>& model_inputs = run.prepared.graph.inputs;
  if (run.prepared.graph.outputs.empty()) return UserError(config.model + ": the model has no outputs");
  run.output_name = run.prepared.graph.outputs[0].name;
  const bool calibrates = config.quantization.mode == quant::QuantMode::kStatic;

  // Data: each set opened once; the split fixes which samples each uses, the same on
  // every run and resume.
  SEQTO_ASSIGN_OR_RETURN(run.eval_data, OpenSet(config.eval, model_inputs, "evaluation"));
  auto open_set = [&](const DataSetConfig& set, const std::string& what) -> Expected<std::shared_ptr<data::Dataset>> {
    if (set.from_eval && set.labels == config.eval.labels &&
        set.preprocess.ToString() == config.eval.preprocess.ToString())
      return run.eval_data;
    return OpenSet(set, model_inputs, what);
  };
  if (calibrates) {
    SEQTO_ASSIGN_OR_RETURN(run.calib_data, open_set(config.calibration, "calibration"));
  }
  SEQTO_ASSIGN_OR_RETURN(run.ranking_data, open_set(config.ranking, "ranking"));
  auto request = [&](const DataSetConfig& set, const std::shared_ptr<data::Dataset>& d) {
    SetRequest r;
    if (!d) return r;  // not used (dynamic quantization does not calibrate)
    r.from_eval = set.from_eval;
    r.size = d->size();
    r.samples = set.samples;
    std::error_code ec;
    r.same_file_as_eval = !set.from_eval && fs::equivalent(set.path, config.eval.path, ec);
    return r;
  };
  SEQTO_ASSIGN_OR_RETURN(
      run.split, SplitData(run.eval_data->size(), config.eval.samples, request(config.calibration, run.calib_data),
                           request(config.ranking, run.ranking_data), config.seed));

  // Content digests of the model and every data file, so a resume can tell that a
  // file changed under the same name.
  std::vector<std::string> inputs = {config.model};
  auto add_set = [&](const DataSetConfig& set, const std::shared_ptr<data::Dataset>& d) {
    if (!d) return;
    for (const auto& f : set.files()) inputs.push_back(f);
    // A labels file the format found by itself (MNIST idx: next to the images).
    std::error_code ec;
    if (fs::is_regular_file(d->labels_source(), ec)) inputs.push_back(d->labels_source());
  };
  add_set(config.eval, run.eval_data);
  add_set(config.calibration, run.calib_data);
  add_set(config.ranking, run.ranking_data);
  SEQTO_ASSIGN_OR_RETURN(run.digests, ContentDigests(inputs));
  return Status::Ok();
}

Status OpenRunDir(TuneRun& run) {
  const fs::path& dir = run.dir;
  // Locked for the whole run: two processes writing one run would leave a report that
  // disagrees with its cycles.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return UserError(dir.string() + ": cannot create the run directory: " + ec.message());
  SEQTO_ASSIGN_OR_RETURN(run.lock, DirLock::Acquire(dir.string(), "tune.lock"));
  const fs::path config_file = dir / "config.json", digests_file = dir / "digests.json";
  if (fs::exists(config_file)) {
    if (!run.options.resume)
      return UserError(dir.string() +
                       ": a run directory is already there; pass --resume to continue it or "
                       "choose another --out");
    SEQTO_ASSIGN_OR_RETURN(json previous, ReadJson(config_file));
    if (auto diff = FirstSettingsDifference(previous, run.settings))
      return UserError(dir.string() + ": the run there was made with other settings (" + *diff +
                       "); resume it with the same config or choose another --out");
    if (fs::exists(digests_file)) {
      SEQTO_ASSIGN_OR_RETURN(json previous_digests, ReadJson(digests_file));
      if (auto diff = DigestDifference(previous_digests, run.digests))
        return UserError(dir.string() + ": cannot resume: " + *diff +
                         "; the run's results do not hold for it (choose another --out for a new run)");
    }
  }
  for (const char* sub : {"cycles", "candidates", "baseline"}) fs::create_directories(dir / sub, ec);
  if (ec) return UserError(dir.string() + ": cannot create the run directory: " + ec.message());
  SEQTO_RETURN_IF_ERROR(WriteJson(digests_file, run.digests));
  return WriteJson(config_file, run.settings);
}

Status LoadData(TuneRun& run) {
  const TuneConfig& config = run.config;
  const DataSplit& split = run.split;
  // What each set uses: stated once, and recorded in report.json.
  const std::string split_line = split.Describe(run.eval_data->size(), config.eval.samples);
  if (!split_line.empty()) run.Say("data split: " + split_line);
  run.data_json = {{"eval", {{"samples", split.eval.size()}, {"of", run.eval_data->size()}}},
                   {"held_out_of_eval", split.held_out}};
  if (!split_line.empty()) run.data_json["split"] = split_line;
  for (auto [name, set, part, d] :
       {std::tuple{"calibration", &config.calibration, &split.calibration, run.calib_data.get()},
        std::tuple{"ranking", &config.ranking, &split.ranking, run.ranking_data.get()}}) {
    if (!d) continue;
    run.data_json[name] = {{"samples", part->indices.size()},
                           {"source", part->held_out ? "held out of the evaluation data" : "its own data"},
                           {"overlap_with_eval", part->overlap}};
    if (part->overlap > 0) {
      const std::string line = std::string(name) +
                               " data overlaps the evaluation data: " + std::to_string(part->overlap) + " of its " +
                               std::to_string(part->indices.size()) + " samples are also evaluated (" + set->path +
                               " is the evaluation data; the accuracy loss may look smaller than it is)";
      run.Warn(line);
      run.data_json[name]["warning"] = line;
    }
  }

  // The same seeded samples for every candidate.
  run.Say("loading data");
  SEQTO_ASSIGN_OR_RETURN(
      run.eval, LoadSamples(run.eval_data, split.eval, run.prepared.graph.inputs, config.batch_size, "evaluation"));
  run.Say("evaluation data: " + std::to_string(run.eval.samples) + " samples of " + run.eval.description +
          (run.has_labels() ? " (labelled)" : " (no labels)") +
          (run.loss_from_labels() ? "" : ": accuracy loss is top-1 disagreement with the float model"));
  return Status::Ok();
}

// ------------------------------------------------------------------ calibration

Expected<const LoadedSet*> CalibrationSamples(TuneRun& run) {
  if (!run.calib_data) return UserError("calibration data: none (dynamic quantization does not calibrate)");
  if (!run.calib) {
    SEQTO_ASSIGN_OR_RETURN(run.calib, LoadSamples(run.calib_data, run.split.calibration.indices,
                                                  run.prepared.graph.inputs, run.config.batch_size, "calibration"));
  }
  return &*run.calib;
}

Expected<quant::TensorRanges> CalibrateModel(TuneRun& run, const ir::Model& model, const quant::QuantOptions& qopts) {
  SEQTO_ASSIGN_OR_RETURN(const LoadedSet* calib, CalibrationSamples(run));
  SEQTO_ASSIGN_OR_RETURN(auto tensors, quant::QuantPlan::TensorsToCalibrate(model, qopts));
  size_t next = 0;
  quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next >= calib->batches.size()) return false;
    feeds = calib->batches[next++];
    return true;
  };
  run.Say("calibrating " + std::to_string(tensors.size()) + " tensors on " + std::to_string(calib->samples) +
          " samples (" + quant::CalibrationMethodName(qopts.calibration) + ")");
  SEQTO_ASSIGN_OR_RETURN(auto stats,
                         quant::Calibrate(model, tensors, source, qopts.calibration_options, run.config.threads));
  return stats.Ranges(qopts.calibration);
}

Status Calibrate(TuneRun& run) {
  const quant::QuantOptions& qopts = run.quant_options;
  const fs::path calib_file = run.dir / "calibration.json";
  run.calibration_reused = fs::exists(calib_file);
  if (qopts.mode != quant::QuantMode::kStatic) return Status::Ok();
  if (run.calibration_reused && !run.ranges_ready) {
    SEQTO_ASSIGN_OR_RETURN(json j, ReadJson(calib_file));
    for (auto it = j.at("ranges").begin(); it != j.at("ranges").end(); ++it)
      run.ranges[it.key()] = quant::TensorRange{it.value()[0].get<double>(), it.value()[1].get<double>()};
    run.Say("calibration: " + std::to_string(run.ranges.size()) + " ranges from " + calib_file.string());
    return Status::Ok();
  }
  // The recipes stage may have calibrated the chosen model already.
  if (!run.ranges_ready) {
    SEQTO_ASSIGN_OR_RETURN(run.ranges, CalibrateModel(run, run.prepared, qopts));
  }
  run.calibration_reused = false;
  json j;
  j["method"] = quant::CalibrationMethodName(qopts.calibration);
  j["samples"] = run.calib->samples;
  for (const auto& [name, r] : run.ranges) j["ranges"][name] = {r.min, r.max};
  return WriteJson(calib_file, j);
}

// ------------------------------------------------------------------ plan

Status Plan(TuneRun& run) {
  const quant::QuantOptions& qopts = run.quant_options;
  const bool refined = run.plan.has_value();  // the recipes stage built and refined it
  // The sweep gives groups 16-bit activations: those get refinements of their own
  // (bias correction measured at 16 bits), for the chosen recipe only.
  const bool int16_activations = run.config.fallback == quant::Fallback::kInt16Activations;
  if (!refined || int16_activations) {
    quant::BatchList samples;
    SEQTO_ASSIGN_OR_RETURN(quant::recover::RecoveryContext ctx, RecoveryContextOf(run, samples));
    if (!refined) {
      SEQTO_ASSIGN_OR_RETURN(run.plan,
                             quant::QuantPlan::Create(run.prepared, qopts,
                                                      qopts.mode == quant::QuantMode::kStatic ? &run.ranges : nullptr));
      // The chosen recipe's plan-stage techniques (bias correction, learned rounding).
      SEQTO_RETURN_IF_ERROR(quant::recover::RefinePlan(*run.plan, ctx, run.recovery_record));
    }
    if (int16_activations)
      SEQTO_RETURN_IF_ERROR(quant::recover::RefinePlanForInt16Activations(*run.plan, ctx, run.recovery_record));
  }
  run.Say("quantization plan: " + std::to_string(run.plan->groups().size()) + " groups");
  return Status::Ok();
}

// ------------------------------------------------------------------ analysis

Status OpenRunner(TuneRun& run) {
  runners::RunnerOptions runner_opts;
  runner_opts.threads = run.config.threads;
  SEQTO_ASSIGN_OR_RETURN(run.runner, runners::MakeRunner(run.config.runner, runner_opts));
  SEQTO_ASSIGN_OR_RETURN(run.latency_batch, LatencyBatch(run.eval, run.config.latency_batch));
  return Status::Ok();
}

namespace {

// Times pareto's latency costs on the runner (tune/measured_cost.h) and returns
// analysis.json's "measured_cost": the timings, each step's costs and the order. The
// models timed are written under dir/cost and removed afterwards.
Expected<json> MeasurePareto(const TuneConfig& config, const quant::QuantPlan& plan,
                             const quant::AnalysisResult& analysis, runners::Runner& runner,
                             const runtime::TensorMap& latency_batch, const json& mac_order, const fs::path& dir,
                             const std::function<void(const std::string&)>& say) {
  const auto start = std::chrono::steady_clock::now();
  SEQTO_ASSIGN_OR_RETURN(const std::vector<double> recovered, quant::RecoveredLoss(analysis));
  std::vector<std::string> names;
  std::vector<double> size_share;
  double weights = 0;
  for (const auto& g : analysis.groups) weights += double(std::max<int64_t>(g.weight_elements, 0));
  for (const auto& g : analysis.groups) {
    names.push_back(g.name);
    size_share.push_back(weights > 0 ? double(std::max<int64_t>(g.weight_elements, 0)) / weights : 0);
  }
  const fs::path cost_dir = dir / "cost";
  std::error_code ec;
  fs::create_directories(cost_dir, ec);
  if (ec) return UserError(cost_dir.string() + ": cannot create the directory (" + ec.message() + ")");
  std::map<std::set<std::string>, std::string> files;  // each set is written once
  runners::LatencyOptions lopts;
  lopts.warmup = std::min(config.latency_warmup, 2);
  lopts.runs = config.cost_runs;
  TimeExcluded time = [&](const std::set<std::string>& excluded) -> Expected<double> {
    auto it = files.find(excluded);
    if (it == files.end()) {
      SEQTO_ASSIGN_OR_RETURN(ir::Model model, plan.Materialize(excluded, config.fallback));
      const std::string file = (cost_dir / ("model_" + std::to_string(files.size()) + ".onnx")).string();
      SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(model, file));
      it = files.emplace(excluded, file).first;
    }
    SEQTO_ASSIGN_OR_RETURN(LatencyStats lat, runner.Latency(it->second, latency_batch, lopts));
    // The fastest run: other processes only ever add time, and on a loaded machine
    // (MobileNetV2-12, load 5-7 on 2 cores) p50 deltas were ±16 ms on a 3 ms model.
    return lat.min;
  };
  MeasuredCostOptions mo;
  mo.groups = config.cost_groups;
  mo.lookahead = config.cost_lookahead;
  mo.rounds = config.cost_rounds;
  mo.cost_latency = config.cost_latency;
  mo.cost_size = config.cost_size;
  say("timing the exclusion costs of up to " + std::to_string(mo.groups) + " groups on " + runner.name() + " (" +
      std::to_string(mo.rounds) + " rounds of " + std::to_string(lopts.runs) + " runs)");
  Expected<MeasuredCostResult> res =
      MeasuredParetoOrder(names, recovered, size_share, mac_order.get<std::vector<std::string>>(), time, mo);
  fs::remove_all(cost_dir, ec);  // build products; the costs are in analysis.json
  if (!res.ok()) return res.status();
  json steps = json::array();
  for (const auto& st : res->steps)
    steps.push_back({{"group", st.group},
                     {"recovered", st.recovered},
                     {"isolated_ms", st.isolated_ms},
                     {"marginal_ms", st.marginal_ms},
                     {"size_share", st.size_share}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[200];
  std::snprintf(line, sizeof line,
                "exclusion costs: %zu models timed in %.1f s (int8 %.3f ms, float %.3f ms, resolution %.3f ms)",
                res->timings, seconds, res->int8_ms, res->float_ms, res->resolution_ms);
  say(line);
  return json{{"runner", runner.name()},      {"int8_ms", res->int8_ms},
              {"float_ms", res->float_ms},    {"resolution_ms", res->resolution_ms},
              {"models_timed", res->timings}, {"seconds", seconds},
              {"rounds", mo.rounds},          {"runs", lopts.runs},
              {"lookahead", mo.lookahead},    {"steps", steps},
              {"order", res->order}};
}

// Analyzes the plan on the ranking data and ranks its groups with every ranker the
// analysis has measured enough for; returns analysis.json.
Expected<json> AnalyzeAndRank(TuneRun& run, const quant::Ranker& ranker) {
  const TuneConfig& config = run.config;
  const quant::QuantPlan& plan = *run.plan;
  SEQTO_ASSIGN_OR_RETURN(LoadedSet ranking, LoadSamples(run.ranking_data, run.split.ranking.indices,
                                                        run.prepared.graph.inputs, config.batch_size, "ranking"));
  quant::BatchList list;
  list.num_batches = ranking.batches.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return ranking.batches[i]; };
  quant::AnalysisOptions aopts;
  aopts.sensitivity = ranker.needs_sensitivity;
  aopts.revert_one = ranker.needs_revert_one;
  if (!ranker.needs_search) aopts.greedy_steps = 0;  // the searches cost runs only `damage` uses
  aopts.worst_samples = config.worst_samples;
  aopts.threads = config.threads;
  run.Say("analyzing " + std::to_string(plan.groups().size()) + " groups on " + std::to_string(ranking.samples) +
          " samples");
  SEQTO_ASSIGN_OR_RETURN(quant::AnalysisResult analysis, quant::Analyze(plan, list, aopts));
  {
    std::string line = "analysis passes:";
    for (const auto& st : analysis.stages) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " %s %.1f s (%zu plans x %zu samples),", st.name.c_str(), st.seconds, st.plans,
                    st.samples);
      line += buf;
    }
    line.pop_back();
    run.Say(line);
  }
  json j;
  j["groups"] = AnalysisGroupsJson(analysis);
  j["macs"] = plan.model_macs();
  j["sensitivity_full_loss"] =
      std::isfinite(analysis.sensitivity_full_loss) ? json(analysis.sensitivity_full_loss) : json(nullptr);
  j["greedy_order"] = SearchOrderJson(analysis.greedy);
  j["backward_order"] = SearchOrderJson(analysis.backward);
  quant::RankOptions rank_opts;
  rank_opts.seed = config.seed;
  rank_opts.cost_latency = config.cost_latency;
  rank_opts.cost_size = config.cost_size;
  for (const auto& r : quant::Rankers()) {
    if ((r.needs_sensitivity && !aopts.sensitivity) || (r.needs_revert_one && !aopts.revert_one) ||
        (r.needs_search && aopts.greedy_steps == 0))
      continue;
    SEQTO_ASSIGN_OR_RETURN(j["rankings"][r.name], r.rank(analysis, rank_opts));
  }
  if (config.ranker == "pareto" && config.cost_latency > 0 && config.cost_groups > 0) {
    run.times.Stage("analysis");
    SEQTO_ASSIGN_OR_RETURN(j["measured_cost"],
                           MeasurePareto(config, plan, analysis, *run.runner, run.latency_batch,
                                         j["rankings"]["pareto"], run.dir, [&](const std::string& l) { run.Say(l); }));
    j["rankings"]["pareto_mac"] = j["rankings"]["pareto"];  // the order on MAC shares, for comparison
    j["rankings"]["pareto"] = j["measured_cost"]["order"];
    run.times.Stage("cost timing");
  }
  j["seconds"] = analysis.seconds;
  // What the ranking cost: the samples its sensitivity passes settled on and the
  // edited plans they measured.
  j["sensitivity_samples"] = analysis.sensitivity_samples;
  j["plan_evaluations"] = analysis.plan_evaluations;
  j["stages"] = AnalysisStagesJson(analysis);
  return j;
}

}  // namespace

Status Analyze(TuneRun& run) {
  SEQTO_ASSIGN_OR_RETURN(const quant::Ranker* ranker, quant::GetRanker(run.config.ranker));
  const fs::path analysis_file = run.dir / "analysis.json";
  run.analysis_reused = fs::exists(analysis_file);
  json j;
  if (run.analysis_reused) {
    SEQTO_ASSIGN_OR_RETURN(j, ReadJson(analysis_file));
  } else {
    SEQTO_ASSIGN_OR_RETURN(j, AnalyzeAndRank(run, *ranker));
    SEQTO_RETURN_IF_ERROR(WriteJson(analysis_file, j));
  }
  run.order = j.at("rankings").at(run.config.ranker).get<std::vector<std::string>>();
  run.groups_json = j.at("groups");
  if (j.contains("measured_cost")) run.measured_cost = j["measured_cost"];
  if (run.order.size() != run.plan->groups().size())
    return UserError(analysis_file.string() + ": the ranking does not match the plan's groups (delete the file)");
  return Status::Ok();
}

// ------------------------------------------------------------------ baseline

namespace {

// The float model measured on the runner: baseline.json and baseline/output.npy.
Status MeasureBaseline(TuneRun& run, const fs::path& baseline_file, const fs::path& baseline_out) {
  const TuneConfig& config = run.config;
  run.Say("measuring the float model on " + run.runner->name());
  run.load.Start();
  SEQTO_ASSIGN_OR_RETURN(runners::Measurement m,
                         run.runner->Measure(config.model, run.eval.batches, run.latency_batch, run.latency_options));
  run.load.Stop();
  const std::optional<double> other_cores = run.load.OtherCores();
  if (other_cores) run.load.Reset();
  SEQTO_ASSIGN_OR_RETURN(run.float_output, FirstOutput(m.outputs, run.output_name));
  json& baseline = run.baseline;
  baseline["model_file"] = config.model;
  baseline["size_bytes"] = static_cast<int64_t>(fs::file_size(config.model));
  baseline["latency_ms"] = LatencyJson(m.latency, other_cores, run.measure_threads);
  baseline["samples"] = run.eval.samples;
  if (run.has_labels()) {
    AccuracyAccumulator acc;
    SEQTO_RETURN_IF_ERROR(acc.Add(run.float_output, run.eval.labels));
    SEQTO_ASSIGN_OR_RETURN(AccuracyMetrics am, acc.Result());
    baseline["accuracy"] = {{"top1", am.top1}, {"top5", am.top5}};
  }
  SEQTO_RETURN_IF_ERROR(WriteNpy(baseline_out.string(), run.float_output));
  return WriteJson(baseline_file, baseline);
}

}  // namespace

Status Baseline(TuneRun& run) {
  const TuneConfig& config = run.config;
  run.latency_options.warmup = config.latency_warmup;
  run.latency_options.runs = config.latency_runs;
  run.measure_threads = config.threads > 0 ? config.threads : NumThreads();  // 0: OpenMP's all cores
  const fs::path baseline_file = run.dir / "baseline.json", baseline_out = run.dir / "baseline" / "output.npy";
  run.baseline_reused = fs::exists(baseline_file) && fs::exists(baseline_out);
  if (run.baseline_reused) {
    SEQTO_ASSIGN_OR_RETURN(run.baseline, ReadJson(baseline_file));
    SEQTO_ASSIGN_OR_RETURN(run.float_output, ReadNpy(baseline_out.string()));
  } else {
    SEQTO_RETURN_IF_ERROR(MeasureBaseline(run, baseline_file, baseline_out));
  }
  if (run.has_labels()) run.float_top1 = run.baseline.at("accuracy").at("top1").get<double>();
  return Status::Ok();
}

// ------------------------------------------------------------------ sweep

namespace {

// Candidate k: the plan with the first k ranked groups excluded, saved under
// candidates/, measured on the runner and compared with the float model; its
// cycle_K.json is written.
Expected<Cycle> MeasureCandidate(TuneRun& run, size_t k) {
  const TuneConfig& config = run.config;
  const fs::path& dir = run.dir;
  const std::vector<std::string> excluded(run.order.begin(), run.order.begin() + static_cast<long>(k));
  SEQTO_ASSIGN_OR_RETURN(
      ir::Model model, run.plan->Materialize(std::set<std::string>(excluded.begin(), excluded.end()), config.fallback));
  const std::string model_file = "candidates/cycle_" + std::to_string(k) + ".onnx";
  SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(model, (dir / model_file).string()));

  run.load.Start();
  SEQTO_ASSIGN_OR_RETURN(
      runners::Measurement measured,
      run.runner->Measure((dir / model_file).string(), run.eval.batches, run.latency_batch, run.latency_options));
  run.load.Stop();
  const std::optional<double> other_cores = run.load.OtherCores();
  if (other_cores) run.load.Reset();
  SEQTO_ASSIGN_OR_RETURN(Tensor cand, FirstOutput(measured.outputs, run.output_name));
  const LatencyStats& lat = measured.latency;
  AgreementAccumulator agree;
  SEQTO_RETURN_IF_ERROR(agree.Add(run.float_output, cand));
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics am, agree.Result());
  json metrics = {{"top1_disagreement", am.top1_disagreement},
                  {"top5_overlap", am.top5_overlap},
                  {"kendall_tau", am.kendall_tau},
                  {"sqnr_db", am.sqnr_db},
                  {"kl_divergence", am.kl_divergence}};
  if (run.has_labels()) {
    AccuracyAccumulator acc;
    SEQTO_RETURN_IF_ERROR(acc.Add(cand, run.eval.labels));
    SEQTO_ASSIGN_OR_RETURN(AccuracyMetrics m, acc.Result());
    metrics["accuracy_top1"] = m.top1;
    metrics["accuracy_top5"] = m.top5;
  }
  metrics["accuracy_loss"] =
      run.loss_from_labels() ? run.float_top1 - metrics["accuracy_top1"].get<double>() : am.top1_disagreement;
  json j = {{"index", k},
            {"excluded", excluded},
            {"model_file", model_file},
            {"metrics", metrics},
            {"size_bytes", static_cast<int64_t>(fs::file_size(dir / model_file))},
            {"latency_ms", LatencyJson(lat, other_cores, run.measure_threads)}};
  SEQTO_RETURN_IF_ERROR(WriteJson(dir / "cycles" / ("cycle_" + std::to_string(k) + ".json"), j));
  std::ostringstream line;
  line << std::fixed << std::setprecision(2) << "cycle " << k << "/" << run.plan->groups().size() << " ("
       << excluded.size() << " excluded): accuracy loss " << metrics["accuracy_loss"].get<double>() << " pt, "
       << HumanBytes(j["size_bytes"].get<double>()) << ", " << std::setprecision(3) << lat.p50 << " ms"
       << (LatencyUnstable(lat) ? " (unstable: p95/p50 > 1.5)" : "");
  run.Say(line.str());
  return Cycle{k, j, OutcomeOf(j)};
}

}  // namespace

Status Sweep(TuneRun& run) {
  const size_t groups = run.plan->groups().size();
  // Finished candidates from an earlier run.
  for (size_t k = 0; k <= groups; ++k) {
    const fs::path f = run.dir / "cycles" / ("cycle_" + std::to_string(k) + ".json");
    if (!fs::exists(f)) continue;
    SEQTO_ASSIGN_OR_RETURN(json j, ReadJson(f));
    run.cycles[k] = Cycle{k, j, OutcomeOf(j)};
  }
  run.resumed_cycles = run.cycles.size();
  if (!run.cycles.empty()) run.Say("resuming: " + std::to_string(run.cycles.size()) + " candidates already measured");

  SearchOptions sopts;
  sopts.groups = groups;
  sopts.threshold = run.config.threshold;
  sopts.max_candidates = run.config.max_candidates;
  SEQTO_ASSIGN_OR_RETURN(auto strategy, MakeSearchStrategy(run.config.strategy, sopts));

  // One candidate at a time, each written (and the report with it) as soon as it is
  // measured.
  while (true) {
    std::map<size_t, CandidateOutcome> done;
    for (const auto& [k, c] : run.cycles) done[k] = c.outcome;
    std::optional<size_t> next = strategy->Next(done);
    run.times.Stage("search");
    if (!next) return Status::Ok();
    SEQTO_ASSIGN_OR_RETURN(run.cycles[*next], MeasureCandidate(run, *next));
    const double seconds = run.times.Lap();
    run.times.Add("candidates", seconds);
    run.times.Candidate(*next, seconds);
    SEQTO_RETURN_IF_ERROR(WriteReport(run, false));
    run.times.Stage("report");
  }
}

// ------------------------------------------------------------------ report

namespace {

double Objective(const CandidateOutcome& o, const std::string& name) {
  if (name == "accuracy_loss") return o.accuracy_loss;
  if (name == "size_bytes") return o.size_bytes;
  return o.latency_ms;
}

// report.json's machine_busy: null when no latency measurement looked busy, else
// the one warning line and what it concerns.
json MachineBusyJson(const json& baseline, const std::vector<const Cycle*>& cycles, int threads) {
  double max_other = 0;
  const bool baseline_busy = baseline.at("latency_ms").value("busy", false);
  if (baseline_busy) max_other = baseline["latency_ms"]["other_cores"].get<double>();
  json busy_cycles = json::array();
  for (const Cycle* c : cycles) {
    const json& lat = c->j.at("latency_ms");
    if (!lat.value("busy", false)) continue;
    busy_cycles.push_back(c->k);
    max_other = std::max(max_other, lat.at("other_cores").get<double>());
  }
  if (!baseline_busy && busy_cycles.empty()) return nullptr;
  const int cores = AvailableCores();
  std::ostringstream w;
  w << std::fixed << std::setprecision(2) << "the machine looks busy: other processes used up to " << max_other
    << " of its " << cores << " cores while measuring ";
  if (baseline_busy) w << "the float model" << (busy_cycles.empty() ? "" : " and ");
  if (!busy_cycles.empty()) w << busy_cycles.size() << " of " << cycles.size() << " candidates";
  w << " with " << (threads > 0 ? threads : cores)
    << " threads, so latencies may be inflated (report.json: machine_busy)";
  return {{"warning", w.str()},
          {"cores", cores},
          {"threads", threads > 0 ? threads : cores},
          {"max_other_cores", max_other},
          {"baseline", baseline_busy},
          {"cycles", busy_cycles}};
}

// report.json's settings: the headline values flat (as docs/report-format.md reads
// them), the whole configuration under "config".
json ReportSettings(const TuneRun& run) {
  const TuneConfig& config = run.config;
  const json& q = run.settings["quantization"];
  return {{"mode", q["mode"]},
          {"per_channel", q["per_channel"]},
          {"activation_type", q["activation_type"]},
          {"weight_type", q["weight_type"]},
          {"calibration", q["calibrate_method"]},
          {"ranker", config.ranker},
          {"strategy", config.strategy},
          {"threshold", config.threshold},
          {"fallback", run.settings["search"]["fallback"]},
          {"runner", config.runner},
          {"objectives", config.objectives},
          {"eval_samples", run.eval.samples},
          {"data", run.data_json},
          {"config", run.settings}};
}

}  // namespace

Status WriteReport(TuneRun& run, bool complete) {
  const TuneConfig& config = run.config;
  const fs::path& dir = run.dir;
  std::vector<const Cycle*> list;
  for (const auto& [k, c] : run.cycles) list.push_back(&c);
  std::vector<std::vector<double>> objectives;
  for (const Cycle* c : list) {
    std::vector<double> v;
    for (const auto& o : config.objectives) v.push_back(Objective(c->outcome, o));
    objectives.push_back(v);
  }
  json report;
  report["model"] = config.model;
  report["settings"] = ReportSettings(run);
  report["baseline"] = run.baseline;
  report["groups"] = run.groups_json;
  report["macs"] = run.plan->model_macs();
  if (!run.measured_cost.is_null()) report["measured_cost"] = run.measured_cost;
  report["ranking"] = run.order;
  // The recipes tried (none: no recipes stage) and what the chosen techniques did.
  report["recipes"] = run.recipes_json.is_null() ? json::array() : run.recipes_json.at("recipes");
  report["recipe"] = {{"name", run.recipes_json.is_null() ? json(nullptr) : run.recipes_json.at("chosen")},
                      {"mode", run.config.recipes},
                      {"techniques", run.recovery_record.is_null() ? json::array() : run.recovery_record}};
  report["complete"] = complete;
  report["machine_busy"] = MachineBusyJson(run.baseline, list, run.measure_threads);
  report["stage_seconds"] = run.times.Json();
  if (!report["machine_busy"].is_null() && !run.warned_busy) {
    run.warned_busy = true;
    run.Warn(report["machine_busy"]["warning"].get<std::string>());
  }
  report["cycles"] = json::array();
  for (const Cycle* c : list) report["cycles"].push_back(c->j);
  report["pareto"] = json::array();
  if (!objectives.empty()) {
    // The whole front, best first; its first three are the top 3 (with model files).
    SEQTO_ASSIGN_OR_RETURN(auto picks, RankPareto(objectives, 0));
    for (size_t i = 0; i < picks.size(); ++i) {
      const Cycle* c = list[picks[i].candidate];
      json normalized, values;
      for (size_t o = 0; o < config.objectives.size(); ++o) {
        normalized[config.objectives[o]] = picks[i].normalized[o];
        values[config.objectives[o]] = objectives[picks[i].candidate][o];
      }
      json entry = {{"rank", picks[i].rank},
                    {"cycle", c->k},
                    {"objectives", normalized},
                    {"values", values},
                    {"distance", picks[i].distance}};
      if (i >= 3) {
        report["pareto"].push_back(entry);
        continue;
      }
      const std::string file = "top" + std::to_string(i + 1) + ".onnx";
      entry["model_file"] = file;
      report["pareto"].push_back(entry);
      SEQTO_RETURN_IF_ERROR(
          CopyFileAtomic((dir / c->j.at("model_file").get<std::string>()).string(), (dir / file).string()));
      if (i == 0)
        SEQTO_RETURN_IF_ERROR(
            CopyFileAtomic((dir / c->j.at("model_file").get<std::string>()).string(), (dir / "best.onnx").string()));
    }
  }
  return WriteJson(dir / "report.json", report);
}

Expected<std::string> Summary(const TuneRun& run) {
  const TuneConfig& config = run.config;
  // A copy: a key a damaged baseline.json lacks reads as null, then fails to convert.
  json baseline = run.baseline;
  SEQTO_ASSIGN_OR_RETURN(json report, ReadJson(run.dir / "report.json"));
  std::ostringstream s;
  s << std::fixed;
  s << "float model: " << HumanBytes(baseline["size_bytes"].get<double>()) << ", " << std::setprecision(3)
    << baseline["latency_ms"]["p50"].get<double>() << " ms";
  if (run.has_labels()) s << ", top-1 " << std::setprecision(2) << run.float_top1 << "%";
  s << "\n\n  cycle  excluded  acc.loss(pt)  top1-disagr(%)     size   latency(ms, p50)\n";
  for (const auto& [k, c] : run.cycles) {
    s << std::setw(7) << k << std::setw(10) << c.j["excluded"].size() << std::setprecision(2) << std::setw(14)
      << c.outcome.accuracy_loss << std::setw(16) << c.j["metrics"]["top1_disagreement"].get<double>() << std::setw(9)
      << HumanBytes(c.outcome.size_bytes) << std::setprecision(3) << std::setw(14) << c.outcome.latency_ms
      << (c.j["latency_ms"].value("unstable", false) ? "  unstable" : "") << "\n";
  }
  if (std::any_of(run.cycles.begin(), run.cycles.end(),
                  [](const auto& kc) { return kc.second.j["latency_ms"].value("unstable", false); }))
    s << "  (unstable: p95 > " << std::setprecision(1) << kUnstableP95OverP50
      << " x p50, the latency varied too much to be compared)\n";
  s << "\nPareto top 3 (objectives: ";
  for (size_t i = 0; i < config.objectives.size(); ++i) s << (i ? ", " : "") << config.objectives[i];
  s << "):\n";
  for (const auto& p : report["pareto"]) {
    if (!p.contains("model_file")) break;
    const Cycle& c = run.cycles.at(p["cycle"].get<size_t>());
    s << "  #" << p["rank"].get<int>() << "  cycle " << c.k << " (" << c.k << " groups excluded): accuracy loss "
      << std::setprecision(2) << c.outcome.accuracy_loss << " pt, " << HumanBytes(c.outcome.size_bytes) << ", "
      << std::setprecision(3) << c.outcome.latency_ms << " ms -> "
      << (run.dir / p["model_file"].get<std::string>()).string() << "\n";
  }
  s << "\n" << run.times.Text();
  return s.str();
}

}  // namespace seqto::tune
