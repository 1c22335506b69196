// The `seqto tune` configuration: a JSON file (documented in README.md, "Tuning").
// Every key is checked: an unknown key or a bad value is a user error that names the
// key by its path ("data.eval.samples: expected a positive integer").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/preprocess.h"
#include "quant/quantize.h"

namespace seqto::tune {

// One data set: where it is, its labels, preprocessing, how many samples to use.
struct DataSetConfig {
  std::string path;
  std::string labels;   // optional labels file
  std::string classes;  // optional class list (image class folders -> labels)
  data::PreprocessSpec preprocess;
  bool has_preprocess = false;  // else the data section's default applies
  size_t samples = 0;           // 0: all
  // Calibration and ranking only: no path of its own, so it draws from the evaluation
  // data's samples held out of evaluation (tune/data_split.h).
  bool from_eval = false;

  // The files the set reads that the config names (their content digests guard a
  // resumed run; files a format finds by itself are added by the tuner).
  std::vector<std::string> files() const {
    std::vector<std::string> f;
    for (const std::string* p : {&path, &labels, &classes})
      if (!p->empty()) f.push_back(*p);
    return f;
  }
};

struct TuneConfig {
  std::string config_path;  // the file it came from; relative paths resolve against its folder
  std::string model;
  std::string out;  // run directory; default runs/<model stem>
  // Data: evaluation set (required), calibration and ranking sets (default: the
  // evaluation set's data, with their own default sample counts).
  DataSetConfig eval, calibration, ranking;
  uint64_t seed = 0;
  size_t batch_size = 64;  // chunk size: samples per batch
  quant::QuantOptions quantization;
  // The recipes stage (tune/recipes.cc): which accuracy-recovery techniques the full
  // quantization is tried with before the sweep. "auto": a greedy search over the
  // techniques (each added while it helps); "list": each of `recipe_list`; "none":
  // no stage; "forced": quantization.recovery is not empty and is the one recipe.
  std::string recipes = "auto";
  std::vector<std::vector<quant::RecoverySpec>> recipe_list;
  std::string ranker = "damage";
  size_t worst_samples = 0;  // sensitivity ranker: NNCF-style worst-sample subset
  std::string strategy = "linear";
  double threshold = 1.0;  // accuracy loss in points
  // search.loss, what "accuracy loss" measures: "accuracy" (the drop of top-1 accuracy
  // against the labels; top-1 disagreement with the float model where there are no
  // labels) or "disagreement" (top-1 disagreement with the float model, labels or not:
  // for users who need the quantized model to predict what the float one does).
  std::string loss = "accuracy";
  size_t max_candidates = 0;  // 0: no limit
  quant::Fallback fallback = quant::Fallback::kFloat;
  // search.cost (ranker `pareto` only): weights of the latency and size costs of
  // leaving a group unquantized. Default: 1 for each of latency_ms and size_bytes
  // that is an objective (both when neither is).
  double cost_latency = 1.0, cost_size = 1.0;
  // search.cost's timing of those latency costs on the runner (tune/measured_cost.h):
  // the groups timed (0: no timing, MAC shares instead), the groups re-timed per step,
  // interleaved rounds, and timed runs per model.
  size_t cost_groups = 12, cost_lookahead = 3;
  int cost_rounds = 3, cost_runs = 10;
  std::vector<std::string> objectives = {"accuracy_loss", "size_bytes", "latency_ms"};
  std::string runner = "engine";
  int threads = 0;
  int latency_batch = 1;  // samples per latency measurement
  int latency_warmup = 3;
  int latency_runs = 20;
  // Lines for the user that do not stop the run ("search.threshold is negative: ...").
  std::vector<std::string> warnings;

  // The settings as a config (config.json, report.json's settings.config): parsing it
  // gives the same run. Paths are absolute.
  nlohmann::json ToJson() const;
};

// The objectives a config may name.
const std::vector<std::string>& ObjectiveNames();
// The values of search.fallback.
const std::vector<std::string>& FallbackNames();

// The keys of the settings (ToJson) that may differ when a run is resumed because
// they do not change its results: "out" (where the run directory is).
const std::vector<std::string>& SettingsThatMayDiffer();
// The first difference between the settings a run was made with and those of now,
// ignoring SettingsThatMayDiffer(): "quantization.extra_options.CalibPercentile:
// 99.9 in the run, 99.99 now"; nullopt if they agree.
std::optional<std::string> FirstSettingsDifference(const nlohmann::json& run, const nlohmann::json& now);

// Parses and checks a config. Relative paths become relative to the config's folder.
Expected<TuneConfig> ParseTuneConfig(const nlohmann::json& json, const std::string& config_path);
Expected<TuneConfig> LoadTuneConfig(const std::string& path);

// The `quantization` section (ORT's names, as `seqto quantize --config` takes them).
Expected<quant::QuantOptions> ParseQuantOptionsJson(const nlohmann::json& json, const std::string& where);
// Its exact inverse: ParseQuantOptionsJson(QuantOptionsToJson(o)) == o for every
// options the parser can give. Every option is written, defaults included. The one
// shape of config.json, report.json's settings and `seqto quantize --json`.
nlohmann::json QuantOptionsToJson(const quant::QuantOptions& options);

}  // namespace seqto::tune
