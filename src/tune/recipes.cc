// The recipes stage of a tune run (tune_stages.h): which accuracy-recovery techniques
// (quant/recover/) the sweep's full quantization is built with.
//
// A recipe is a set of techniques. Each recipe tried is the whole quantization
// pipeline (float-stage rewrite, calibration, plan, plan-stage refinement), its fully
// quantized model measured on the runner on the ranking samples against the float
// model. Recipes with the same float stage share one rewrite and one calibration
// (calibration is most of a recipe's cost).
//   - "auto" searches greedily: from no technique, add the technique that improves
//     the most, while one does. Expensive techniques (learned rounding: minutes on
//     MobileNetV2) are left to lists. With n techniques that is at most n(n+1)/2 recipes,
//     and usually far fewer: a technique that does not help is not tried again.
//   - "list" tries each recipe of the config's list.
// "Best" is the run's first objective (accuracy loss, size or latency), ties broken
// by the higher output SQNR. Accuracy loss on a few hundred ranking samples moves by
// a point per sample, so two recipes' losses count as a tie unless the samples one
// gets wrong and the other right differ by more than sampling noise (McNemar's test
// on the paired samples, two-sided 95%); the output SQNR, measured on every output
// value rather than on top-1 flips, then decides. The ranking samples are what the analysis ranks on, held
// out of the evaluation: choosing a recipe on them does not bias the candidates'
// accuracy, which the sweep measures on the evaluation samples.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/file_util.h"
#include "core/json_util.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/recover/recover.h"
#include "tune/tune_stages.h"

namespace seqto::tune {

namespace fs = std::filesystem;
using nlohmann::json;

Expected<quant::recover::RecoveryContext> RecoveryContextOf(TuneRun& run, quant::BatchList& list) {
  quant::recover::RecoveryContext ctx;
  ctx.threads = run.config.threads;
  ctx.seed = run.config.seed;
  ctx.say = [&run](const std::string& line) { run.Say(line); };
  if (run.quant_options.mode == quant::QuantMode::kStatic) {
    SEQTO_ASSIGN_OR_RETURN(const LoadedSet* calib, CalibrationSamples(run));
    list.num_batches = calib->batches.size();
    list.get = [calib](size_t i) -> Expected<runtime::TensorMap> { return calib->batches[i]; };
    ctx.calibration = &list;
  }
  return ctx;
}

namespace {

std::string RecipeName(const std::vector<quant::RecoverySpec>& recipe) {
  if (recipe.empty()) return "none";
  std::string name;
  for (const auto& t : quant::recover::Techniques())
    for (const auto& spec : recipe)
      if (spec.name == t.name) name += (name.empty() ? "" : "+") + spec.name;
  return name;
}

json RecipeJson(const std::vector<quant::RecoverySpec>& recipe) {
  json list = json::array();
  for (const auto& spec : recipe) list.push_back(quant::recover::RecoverySpecToJson(spec));
  return list;
}

Expected<std::vector<quant::RecoverySpec>> RecipeFromJson(const json& list) {
  std::vector<quant::RecoverySpec> recipe;
  for (size_t i = 0; i < list.size(); ++i) {
    SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec, quant::recover::ParseRecoverySpecJson(
                                                         list[i], "recipes.json chosen[" + std::to_string(i) + "]"));
    recipe.push_back(std::move(spec));
  }
  return recipe;
}

// The float-stage specs of a recipe: what its rewrite and calibration depend on.
std::string FloatStageKey(const std::vector<quant::RecoverySpec>& recipe) {
  json key = json::array();
  for (const auto& spec : recipe) {
    const quant::recover::Technique* t = quant::recover::FindTechnique(spec.name);
    if (t && t->rewrite_float) key.push_back(quant::recover::RecoverySpecToJson(spec));
  }
  return key.dump();
}

struct Tried {
  std::vector<quant::RecoverySpec> recipe;
  json record;       // what its techniques did (float and plan stage)
  json j;            // recipes.json's entry
  double objective;  // the run's first objective
  double sqnr_db;
  // Per ranking sample, whether it counts against the accuracy loss (wrong against
  // its label, or top-1 unlike the float model's, as search.loss says); empty when the
  // first objective is not accuracy loss.
  std::vector<bool> misses;
};

// Tries recipes on the ranking samples, one fully quantized model each.
class RecipeTrial {
 public:
  explicit RecipeTrial(TuneRun& run) : run_(run) {}

  Status Start() {
    const TuneConfig& config = run_.config;
    SEQTO_ASSIGN_OR_RETURN(ranking_, LoadSamples(run_.ranking_data, run_.split.ranking.indices,
                                                 run_.prepared.graph.inputs, config.batch_size, "ranking"));
    SEQTO_ASSIGN_OR_RETURN(ctx_, RecoveryContextOf(run_, samples_));
    SEQTO_ASSIGN_OR_RETURN(latency_batch_, LatencyBatch(ranking_, config.latency_batch));
    options_.warmup = config.latency_warmup;
    options_.runs = config.latency_runs;
    run_.Say("recipes: measuring the float model on " + std::to_string(ranking_.samples) + " ranking samples");
    SEQTO_ASSIGN_OR_RETURN(runners::Measurement m,
                           run_.runner->Measure(config.model, ranking_.batches, latency_batch_, options_));
    SEQTO_ASSIGN_OR_RETURN(float_output_, FirstOutput(m.outputs, run_.output_name));
    if (!ranking_.labels.empty()) {
      AccuracyAccumulator acc;
      SEQTO_RETURN_IF_ERROR(acc.Add(float_output_, ranking_.labels));
      SEQTO_ASSIGN_OR_RETURN(AccuracyMetrics am, acc.Result());
      float_top1_ = am.top1;
    }
    SEQTO_ASSIGN_OR_RETURN(float_classes_, Top1(float_output_));
    fs::create_directories(run_.dir / "recipes");
    return Status::Ok();
  }

  Expected<Tried> Try(const std::vector<quant::RecoverySpec>& recipe) {
    const auto start = std::chrono::steady_clock::now();
    const std::string name = RecipeName(recipe);
    quant::QuantOptions options = run_.quant_options;
    options.recovery = recipe;
    json record = json::array();
    SEQTO_ASSIGN_OR_RETURN(const Rewrite* rewritten, FloatStage(recipe, options, record));
    SEQTO_ASSIGN_OR_RETURN(
        quant::QuantPlan plan,
        quant::QuantPlan::Create(rewritten->model, options,
                                 options.mode == quant::QuantMode::kStatic ? &rewritten->ranges : nullptr));
    SEQTO_RETURN_IF_ERROR(quant::recover::RefinePlan(plan, ctx_, record));
    SEQTO_ASSIGN_OR_RETURN(ir::Model model, plan.Materialize());
    const std::string file = "recipes/" + name + ".onnx";
    SEQTO_RETURN_IF_ERROR(onnxio::SaveModel(model, (run_.dir / file).string()));
    SEQTO_ASSIGN_OR_RETURN(runners::Measurement m, run_.runner->Measure((run_.dir / file).string(), ranking_.batches,
                                                                        latency_batch_, options_));
    SEQTO_ASSIGN_OR_RETURN(Tensor out, FirstOutput(m.outputs, run_.output_name));
    AgreementAccumulator agree;
    SEQTO_RETURN_IF_ERROR(agree.Add(float_output_, out));
    SEQTO_ASSIGN_OR_RETURN(AgreementMetrics am, agree.Result());
    json metrics = {
        {"top1_disagreement", am.top1_disagreement}, {"sqnr_db", am.sqnr_db}, {"kl_divergence", am.kl_divergence}};
    if (!ranking_.labels.empty()) {
      AccuracyAccumulator acc;
      SEQTO_RETURN_IF_ERROR(acc.Add(out, ranking_.labels));
      SEQTO_ASSIGN_OR_RETURN(AccuracyMetrics acc_m, acc.Result());
      metrics["accuracy_top1"] = acc_m.top1;
    }
    // As the sweep measures it (search.loss), on the ranking samples.
    const bool from_labels = !ranking_.labels.empty() && run_.config.loss == "accuracy";
    metrics["accuracy_loss"] =
        from_labels ? float_top1_ - metrics["accuracy_top1"].get<double>() : am.top1_disagreement;
    Tried t;
    if (run_.config.objectives.front() == "accuracy_loss") {
      SEQTO_ASSIGN_OR_RETURN(std::vector<int64_t> classes, Top1(out));
      const std::vector<int64_t>& truth = from_labels ? ranking_.labels : float_classes_;
      for (size_t i = 0; i < classes.size(); ++i) t.misses.push_back(classes[i] != truth.at(i));
    }
    t.recipe = recipe;
    t.record = record;
    plans_.insert_or_assign(name, std::move(plan));
    t.sqnr_db = am.sqnr_db;
    const double size = static_cast<double>(fs::file_size(run_.dir / file));
    t.j = {{"name", name},
           {"recovery", RecipeJson(recipe)},
           {"model_file", file},
           {"metrics", metrics},
           {"size_bytes", static_cast<int64_t>(size)},
           {"latency_ms", {{"p50", m.latency.p50}, {"mean", m.latency.mean}, {"p95", m.latency.p95}}},
           {"techniques", record},
           {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
    const std::string& objective = run_.config.objectives.front();
    t.objective = objective == "size_bytes"   ? size
                  : objective == "latency_ms" ? m.latency.p50
                                              : metrics["accuracy_loss"].get<double>();
    std::ostringstream line;
    line << std::fixed << std::setprecision(2) << "recipes: " << name << ": accuracy loss "
         << metrics["accuracy_loss"].get<double>() << " pt, output SQNR " << am.sqnr_db << " dB, "
         << std::setprecision(3) << m.latency.p50 << " ms (" << std::setprecision(1) << t.j["seconds"].get<double>()
         << " s)";
    run_.Say(line.str());
    return t;
  }

  size_t samples() const { return ranking_.samples; }
  // The rewritten model and its ranges of a recipe tried.
  struct Rewrite {
    ir::Model model;
    quant::TensorRanges ranges;
  };
  const Rewrite& RewriteOf(const std::vector<quant::RecoverySpec>& recipe) const {
    return *rewrites_.at(FloatStageKey(recipe));
  }
  // The refined plan of a recipe tried (moved out).
  quant::QuantPlan TakePlan(const std::string& name) { return std::move(plans_.at(name)); }

 private:
  // The float stage of a recipe: its techniques applied one at a time, each prefix
  // kept, so recipes that start alike rewrite once; then the calibration, shared by
  // recipes whose rewritten models are equal (a technique whose float stage changed
  // nothing costs no calibration).
  Expected<const Rewrite*> FloatStage(const std::vector<quant::RecoverySpec>& recipe,
                                      const quant::QuantOptions& options, json& record) {
    const std::string key = FloatStageKey(recipe);
    if (auto it = rewrites_.find(key); it != rewrites_.end()) {
      record = records_.at(key);
      return it->second.get();
    }
    ir::Model model = run_.prepared;
    json prefix = json::array();
    for (const auto& t : quant::recover::Techniques()) {
      for (const auto& spec : recipe) {
        if (spec.name != t.name || !t.rewrite_float) continue;
        prefix.push_back(quant::recover::RecoverySpecToJson(spec));
        auto done = prefixes_.find(prefix.dump());
        if (done != prefixes_.end()) {
          model = done->second.first;
          record = done->second.second;
          continue;
        }
        quant::QuantOptions one = options;
        one.recovery = {spec};
        run_.Say("recipes: " + spec.name + ": rewriting the float model");
        SEQTO_ASSIGN_OR_RETURN(model, quant::recover::RewriteFloatModel(model, one, ctx_, record));
        prefixes_.emplace(prefix.dump(), std::make_pair(model, record));
      }
    }
    SEQTO_ASSIGN_OR_RETURN(std::string bytes, onnxio::SerializeModel(model));
    auto rewrite = std::make_shared<Rewrite>();
    rewrite->model = std::move(model);
    for (const auto& [other_bytes, other] : calibrated_)
      if (other_bytes == bytes) rewrite->ranges = other->ranges;
    if (rewrite->ranges.empty() && options.mode == quant::QuantMode::kStatic) {
      auto ranges = CalibrateModel(run_, rewrite->model, options);
      if (!ranges) return Status(ranges.error()).WithContext("recipe " + RecipeName(recipe));
      rewrite->ranges = std::move(*ranges);
      calibrated_.emplace_back(std::move(bytes), rewrite);
    }
    records_[key] = record;
    return (rewrites_[key] = rewrite).get();
  }

  TuneRun& run_;
  LoadedSet ranking_;
  quant::BatchList samples_;
  quant::recover::RecoveryContext ctx_;
  runtime::TensorMap latency_batch_;
  runners::LatencyOptions options_;
  Tensor float_output_;
  std::vector<int64_t> float_classes_;  // its top-1 per ranking sample
  double float_top1_ = 0;
  std::map<std::string, std::shared_ptr<Rewrite>> rewrites_;                  // by FloatStageKey
  std::map<std::string, json> records_;                                       // their float stages' records
  std::map<std::string, std::pair<ir::Model, json>> prefixes_;                // rewrites by technique prefix
  std::vector<std::pair<std::string, std::shared_ptr<Rewrite>>> calibrated_;  // serialized model -> ranges
  std::map<std::string, quant::QuantPlan> plans_;                             // by recipe name
};

// Lower objective first (accuracy loss: only where the difference is more than noise);
// otherwise the higher output SQNR.
bool Better(const Tried& a, const Tried& b) {
  const bool differ = a.misses.empty() ? a.objective != b.objective : MissesDiffer(a.misses, b.misses);
  if (differ) return a.objective < b.objective;
  return a.sqnr_db > b.sqnr_db;
}

// "auto": greedy forward selection over the techniques that apply to the run's mode
// and model and are not expensive (learned rounding takes minutes: a list asks for
// it). A technique with nothing to do on the model (no MatMul for SmoothQuant) costs
// no recipe.
Expected<std::vector<Tried>> SearchRecipes(RecipeTrial& trial, const ir::Model& prepared,
                                           const quant::QuantOptions& options) {
  std::vector<Tried> tried;
  SEQTO_ASSIGN_OR_RETURN(Tried best, trial.Try({}));
  tried.push_back(best);
  std::vector<std::string> left;
  for (const auto& t : quant::recover::Techniques())
    if ((!t.static_only || options.mode == quant::QuantMode::kStatic) && !t.expensive &&
        (!t.applies || t.applies(prepared, options)))
      left.push_back(t.name);
  while (!left.empty()) {
    std::optional<Tried> round_best;
    std::string added;
    for (const auto& name : left) {
      std::vector<quant::RecoverySpec> recipe = best.recipe;
      recipe.push_back(quant::RecoverySpec{name, {}});
      SEQTO_ASSIGN_OR_RETURN(Tried t, trial.Try(recipe));
      tried.push_back(t);
      if (!round_best || Better(t, *round_best)) round_best = t, added = name;
    }
    if (!Better(*round_best, best)) break;
    best = *round_best;
    left.erase(std::find(left.begin(), left.end(), added));
  }
  return tried;
}

}  // namespace

bool MissesDiffer(const std::vector<bool>& a, const std::vector<bool>& b) {
  int64_t only_a = 0, only_b = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    only_a += a[i] && !b[i];
    only_b += !a[i] && b[i];
  }
  const double diff = static_cast<double>(std::abs(only_a - only_b));
  return diff > 1.96 * std::sqrt(static_cast<double>(only_a + only_b));
}

Status Recipes(TuneRun& run) {
  const TuneConfig& config = run.config;
  const fs::path file = run.dir / "recipes.json";
  std::vector<quant::RecoverySpec> chosen = config.quantization.recovery;
  const bool search = config.recipes == "auto" || config.recipes == "list";
  run.recipes_reused = search && fs::exists(file);
  if (run.recipes_reused) {
    SEQTO_ASSIGN_OR_RETURN(run.recipes_json, ReadJsonFile(file.string()));
    SEQTO_ASSIGN_OR_RETURN(chosen, RecipeFromJson(run.recipes_json.at("chosen_recovery")));
    run.Say("recipes: " + run.recipes_json.at("chosen").get<std::string>() + " (from " + file.string() + ")");
  } else if (search && config.quantization.mode != quant::QuantMode::kStatic && config.recipes == "auto") {
    // Dynamic quantization has no calibration samples for the techniques to read.
    run.Say("recipes: none tried (dynamic quantization)");
  } else if (search) {
    RecipeTrial trial(run);
    SEQTO_RETURN_IF_ERROR(trial.Start());
    std::vector<Tried> tried;
    if (config.recipes == "auto") {
      SEQTO_ASSIGN_OR_RETURN(tried, SearchRecipes(trial, run.prepared, run.quant_options));
    } else {
      for (const auto& recipe : config.recipe_list) {
        SEQTO_ASSIGN_OR_RETURN(Tried t, trial.Try(recipe));
        tried.push_back(std::move(t));
      }
    }
    const Tried* best = &tried.front();
    for (const auto& t : tried)
      if (Better(t, *best)) best = &t;
    chosen = best->recipe;
    json list = json::array();
    for (const auto& t : tried) list.push_back(t.j);
    run.recipes_json = {
        {"mode", config.recipes}, {"samples", trial.samples()},   {"objective", config.objectives.front()},
        {"recipes", list},        {"chosen", best->j.at("name")}, {"chosen_recovery", RecipeJson(chosen)}};
    SEQTO_RETURN_IF_ERROR(WriteFileAtomic(file.string(), run.recipes_json.dump(2) + "\n"));
    run.Say("recipes: chose " + best->j.at("name").get<std::string>() + " of " + std::to_string(tried.size()) +
            " tried");
    // Its rewrite, calibration and refined plan are done: the later stages keep them.
    run.quant_options.recovery = chosen;
    const RecipeTrial::Rewrite& rewrite = trial.RewriteOf(chosen);
    run.prepared = rewrite.model;
    run.recovery_record = best->record;
    if (run.quant_options.mode == quant::QuantMode::kStatic) {
      run.ranges = rewrite.ranges;
      run.ranges_ready = true;
    }
    run.plan = trial.TakePlan(best->j.at("name").get<std::string>());
    return Status::Ok();
  }
  // The chosen float stage rewrites the model every later stage quantizes.
  run.quant_options.recovery = chosen;
  if (chosen.empty()) return Status::Ok();
  quant::BatchList samples;
  SEQTO_ASSIGN_OR_RETURN(quant::recover::RecoveryContext ctx, RecoveryContextOf(run, samples));
  run.recovery_record = json::array();
  SEQTO_ASSIGN_OR_RETURN(run.prepared,
                         quant::recover::RewriteFloatModel(run.prepared, run.quant_options, ctx, run.recovery_record));
  return Status::Ok();
}

}  // namespace seqto::tune
