// The `seqto tune` configuration: a JSON file (documented in README.md, "Tuning").
// Every key is checked: an unknown key or a bad value is a user error that names the
// key by its path ("data.eval.samples: expected a positive integer").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/preprocess.h"
#include "quant/quantize.h"

namespace seqto::tune {

// One data set: where it is, its labels, preprocessing, how many samples to use.
struct DataSetConfig {
  std::string path;
  std::string labels;  // optional labels file
  data::PreprocessSpec preprocess;
  bool has_preprocess = false;  // else the data section's default applies
  size_t samples = 0;           // 0: all
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
  std::string ranker = "damage";
  size_t worst_samples = 0;  // sensitivity ranker: NNCF-style worst-sample subset
  std::string strategy = "linear";
  double threshold = 1.0;     // accuracy loss in points
  size_t max_candidates = 0;  // 0: no limit
  quant::Fallback fallback = quant::Fallback::kFloat;
  std::vector<std::string> objectives = {"accuracy_loss", "size_bytes", "latency_ms"};
  std::string runner = "engine";
  int threads = 0;
  int latency_batch = 1;  // samples per latency measurement
  int latency_warmup = 3;
  int latency_runs = 20;

  // The settings as JSON (report.json's "settings").
  nlohmann::json ToJson() const;
};

// The objectives a config may name.
const std::vector<std::string>& ObjectiveNames();

// Parses and checks a config. Relative paths become relative to the config's folder.
Expected<TuneConfig> ParseTuneConfig(const nlohmann::json& json, const std::string& config_path);
Expected<TuneConfig> LoadTuneConfig(const std::string& path);

// The `quantization` section (ORT's names, as `seqto quantize --config` takes them).
Expected<quant::QuantOptions> ParseQuantOptionsJson(const nlohmann::json& json, const std::string& where);

}  // namespace seqto::tune
