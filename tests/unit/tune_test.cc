// The tuner's pure parts: search strategies on synthetic loss curves, and the config
// parser's checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/digest.h"
#include "core/dir_lock.h"
#include "core/json_util.h"
#include "quant/rank/ranker.h"
#include "runners/runner.h"
#include "tune/config.h"
#include "tune/data_split.h"
#include "tune/search.h"

namespace seqto::tune {
namespace {

using nlohmann::json;

// Runs a strategy to the end on a curve (loss as a function of k); returns the ks
// evaluated in order.
std::vector<size_t> Drive(const std::string& name, const SearchOptions& options,
                          const std::function<CandidateOutcome(size_t)>& curve) {
  auto strategy = MakeSearchStrategy(name, options);
  EXPECT_TRUE(strategy.ok());
  std::map<size_t, CandidateOutcome> done;
  std::vector<size_t> order;
  for (int guard = 0; guard < 10000; ++guard) {
    auto next = (*strategy)->Next(done);
    if (!next) break;
    EXPECT_FALSE(done.count(*next)) << "k " << *next << " evaluated twice";
    EXPECT_LE(*next, options.groups);
    done[*next] = curve(*next);
    order.push_back(*next);
  }
  return order;
}

// Loss falls from 10 points towards 0 as groups are excluded, and is 0 at k = n
// (nothing quantized: the float model); size grows linearly.
CandidateOutcome Falling(size_t k, size_t n) {
  CandidateOutcome o;
  o.accuracy_loss = k == n ? 0.0 : 10.0 * std::exp(-0.3 * double(k));
  o.size_bytes = 1000 + 100 * double(k);
  o.latency_ms = 1 + 0.01 * double(k);
  return o;
}

TEST(TuneSearch, LinearStopsAtThreshold) {
  SearchOptions o;
  o.groups = 40;
  o.threshold = 1.0;
  auto order = Drive("linear", o, [&](size_t k) { return Falling(k, 40); });
  // 10 e^{-0.3k} <= 1  <=>  k >= ln(10)/0.3 = 7.68: candidates 0..8.
  ASSERT_EQ(order.size(), 9u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
}

TEST(TuneSearch, LinearGoesToTheEndWhenTheThresholdIsNeverMet) {
  SearchOptions o;
  o.groups = 5;
  o.threshold = -1;  // never met
  auto order = Drive("linear", o, [&](size_t k) { return Falling(k, 5); });
  EXPECT_EQ(order.size(), 6u);
}

TEST(TuneSearch, BisectFindsTheSmallestPassingKInLogN) {
  for (size_t n : {1u, 2u, 7u, 40u, 200u}) {
    SearchOptions o;
    o.groups = n;
    o.threshold = 1.0;
    auto order = Drive("bisect", o, [&](size_t k) { return Falling(k, n); });
    size_t best = n + 1;
    for (size_t k : order)
      if (Falling(k, n).accuracy_loss <= 1.0) best = std::min(best, k);
    const size_t expected = std::min<size_t>(n, 8);  // first k with loss <= 1 (k = n, the float model, at worst)
    EXPECT_EQ(best, expected) << "n = " << n;
    EXPECT_LE(order.size(), 3 + size_t(std::ceil(std::log2(double(n) + 1)))) << "n = " << n;
  }
}

TEST(TuneSearch, BisectStopsAtOnceWhenFullQuantizationPasses) {
  SearchOptions o;
  o.groups = 30;
  o.threshold = 20;
  auto order = Drive("bisect", o, [&](size_t k) { return Falling(k, 30); });
  EXPECT_EQ(order, std::vector<size_t>{0});
}

TEST(TuneSearch, FrontSamplesWhereTheCurveChangesWithFewEvaluations) {
  const size_t n = 120;
  SearchOptions o;
  o.groups = n;
  // A step: loss is high until k = 37, then near zero. The front search must find
  // the step (evaluate k = 36 and 37) with far fewer than n evaluations.
  auto curve = [](size_t k) {
    CandidateOutcome c;
    c.accuracy_loss = k < 37 ? 8.0 : 0.1;
    c.size_bytes = 1000 + double(k);
    c.latency_ms = 1;
    return c;
  };
  auto order = Drive("front", o, curve);
  EXPECT_LT(order.size(), n / 4);
  EXPECT_NE(std::find(order.begin(), order.end(), 36), order.end());
  EXPECT_NE(std::find(order.begin(), order.end(), 37), order.end());
  EXPECT_EQ(order[0], 0u);
  EXPECT_EQ(order[1], n);
}

TEST(TuneSearch, FrontIgnoresNoiseOnAFlatCurve) {
  // A flat curve with +-0.2 point of measurement noise: no interval is worth
  // refining for its loss, only wide intervals are probed.
  const size_t n = 40;
  SearchOptions o;
  o.groups = n;
  auto order = Drive("front", o, [](size_t k) {
    CandidateOutcome c;
    c.accuracy_loss = (k * 7919 % 5) * 0.1 - 0.2;
    c.size_bytes = 1000 + double(k);
    return c;
  });
  EXPECT_LE(order.size(), 10u);
}

TEST(TuneSearch, MaxCandidatesBoundsEveryStrategy) {
  for (const auto& name : SearchStrategyNames()) {
    SearchOptions o;
    o.groups = 100;
    o.threshold = 0.5;  // first met at k = 10: every strategy wants more than 4 candidates
    o.max_candidates = 4;
    EXPECT_EQ(Drive(name, o, [](size_t k) { return Falling(k, 100); }).size(), 4u) << name;
  }
}

TEST(TuneSearch, UnknownStrategyIsAnError) {
  auto s = MakeSearchStrategy("zigzag", {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("zigzag"), std::string::npos);
  EXPECT_NE(s.error().message.find("bisect"), std::string::npos);
}

json MinimalConfig() {
  return json::parse(R"({"model": "m.onnx", "data": {"eval": {"path": "d.npy", "samples": 10}}})");
}

TEST(TuneConfig, DefaultsAndRelativePaths) {
  auto c = ParseTuneConfig(MinimalConfig(), "/cfg/dir/tune.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->model, "/cfg/dir/m.onnx");
  EXPECT_EQ(c->eval.path, "/cfg/dir/d.npy");
  EXPECT_EQ(c->calibration.path, "/cfg/dir/d.npy");  // defaults to the evaluation data
  EXPECT_EQ(c->ranker, "damage");
  EXPECT_EQ(c->strategy, "linear");
  EXPECT_EQ(c->runner, "engine");
  EXPECT_EQ(c->objectives.size(), 3u);
}

TEST(TuneConfig, ClassListPerSetAndAsDataDefault) {
  // data.classes goes to the evaluation set and the sets that default to its data;
  // a set's own key wins; paths are relative to the config.
  json j = json::parse(R"({"model": "m.onnx", "data": {"classes": "synsets.txt",
      "eval": "imgs", "ranking": {"path": "other", "classes": "other.txt"}}})");
  auto c = ParseTuneConfig(j, "/cfg/tune.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->eval.classes, "/cfg/synsets.txt");
  EXPECT_EQ(c->calibration.classes, "/cfg/synsets.txt");
  EXPECT_EQ(c->ranking.classes, "/cfg/other.txt");
  EXPECT_EQ(c->ToJson()["data"]["eval"]["classes"], "/cfg/synsets.txt");
  j["data"]["classes"] = 3;
  auto bad = ParseTuneConfig(j, "/cfg/tune.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("data.classes"), std::string::npos) << bad.error().message;
}

TEST(TuneConfig, ErrorsNameTheKey) {
  struct Case {
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["modle"] = "x"; }, "modle: unknown key"},
      {[](json& j) { j["data"]["eval"]["samples"] = -3; }, "data.eval.samples"},
      {[](json& j) { j["data"]["eval"]["sample"] = 3; }, "data.eval.sample: unknown key"},
      {[](json& j) { j["quantization"]["per_chanel"] = true; }, "quantization.per_chanel: unknown key"},
      {[](json& j) { j["quantization"]["activation_type"] = "uint7"; }, "quantization.activation_type"},
      {[](json& j) { j["quantization"]["extra_options"]["Foo"] = 1; }, "quantization.extra_options.Foo"},
      {[](json& j) { j["search"]["threshold"] = "low"; }, "search.threshold: expected a number"},
      {[](json& j) { j["search"]["fallback"] = "int3"; }, "search.fallback"},
      {[](json& j) {
         j["objectives"] = {"accuracy_loss", "speed"};
       },
       "objectives[1]: unknown value 'speed'"},
      {[](json& j) { j["data"]["preprocess"] = "resize=abc"; }, "data.preprocess"},
      {[](json& j) { j.erase("model"); }, "model: required"},
      {[](json& j) { j["data"].erase("eval"); }, "data.eval: required"},
  };
  for (const auto& c : cases) {
    json j = MinimalConfig();
    c.edit(j);
    auto parsed = ParseTuneConfig(j, "tune.json");
    ASSERT_FALSE(parsed.ok()) << c.expected;
    EXPECT_NE(parsed.error().message.find(c.expected), std::string::npos)
        << "message: " << parsed.error().message << "\nexpected: " << c.expected;
  }
}

TEST(TuneConfig, QuantizationSectionUsesOrtNames) {
  json j = MinimalConfig();
  j["quantization"] = json::parse(R"({"mode": "dynamic", "per_channel": true, "weight_type": "QUInt8",
      "nodes_to_exclude": ["conv1", "block*"], "calibrate_method": "Entropy",
      "extra_options": {"ActivationSymmetric": true, "CalibMovingAverage": true}})");
  auto c = ParseTuneConfig(j, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  const auto& q = c->quantization;
  EXPECT_EQ(q.mode, quant::QuantMode::kDynamic);
  EXPECT_TRUE(q.per_channel);
  EXPECT_EQ(q.weight_type, quant::QuantType::kUInt8);
  EXPECT_EQ(q.nodes_to_exclude, (std::vector<std::string>{"conv1", "block*"}));
  EXPECT_EQ(q.calibration, quant::CalibrationMethod::kEntropy);
  EXPECT_TRUE(q.activation_symmetric);
  EXPECT_TRUE(q.calibration_options.moving_average);
}

// ------------------------------------------------------------------ enumerated values

// A bad value of each enumerated key is an error naming the key and the values the
// registry behind it knows.
TEST(TuneConfig, EveryEnumeratedValueIsCheckedAgainstItsRegistry) {
  std::vector<std::string> rankers;
  for (const auto& r : quant::Rankers()) rankers.push_back(r.name);
  struct Case {
    std::function<void(json&)> edit;
    std::string key;
    std::vector<std::string> known;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["ranker"] = "bogus"; }, "ranker", rankers},
      {[](json& j) { j["search"]["strategy"] = "bogus"; }, "search.strategy", SearchStrategyNames()},
      {[](json& j) { j["search"]["fallback"] = "bogus"; }, "search.fallback", FallbackNames()},
      {[](json& j) { j["search"]["loss"] = "bogus"; }, "search.loss", {"accuracy", "disagreement"}},
      {[](json& j) { j["runner"] = "bogus"; }, "runner", runners::RunnerNames()},
      {[](json& j) {
         j["objectives"] = {"size_bytes", "bogus"};
       },
       "objectives[1]", ObjectiveNames()},
      {[](json& j) { j["quantization"]["calibrate_method"] = "bogus"; },
       "quantization.calibrate_method",
       {"minmax", "entropy", "percentile", "distribution", "mse"}},
      {[](json& j) { j["quantization"]["activation_type"] = "bogus"; },
       "quantization.activation_type",
       {"uint8", "int8", "uint16", "int16"}},
      {[](json& j) { j["quantization"]["weight_type"] = "bogus"; },
       "quantization.weight_type",
       {"uint8", "int8", "uint16", "int16"}},
      {[](json& j) {
         j["quantization"]["extra_options"]["TensorQuantOverrides"]["w"] = {{{"quant_type", "bogus"}}};
       },
       "quantization.extra_options.TensorQuantOverrides.w.quant_type",
       {"uint8", "int8"}},
      {[](json& j) { j["quantization"]["mode"] = "bogus"; }, "quantization.mode", {"static", "dynamic"}},
  };
  for (const auto& c : cases) {
    json j = MinimalConfig();
    c.edit(j);
    auto parsed = ParseTuneConfig(j, "tune.json");
    ASSERT_FALSE(parsed.ok()) << c.key;
    const std::string& m = parsed.error().message;
    EXPECT_EQ(m.rfind(c.key + ": ", 0), 0u) << m;
    EXPECT_NE(m.find("'bogus'"), std::string::npos) << m;
    for (const auto& k : c.known) EXPECT_NE(m.find(k), std::string::npos) << m << "\nshould list " << k;
  }
  // Every registered name is accepted.
  for (const auto& r : rankers) {
    json j = MinimalConfig();
    j["ranker"] = r;
    EXPECT_TRUE(ParseTuneConfig(j, "").ok()) << r;
  }
}

TEST(TuneConfig, DataSetMayBeAPathOrAnObject) {
  json j = MinimalConfig();
  j["data"]["eval"] = 42;
  auto parsed = ParseTuneConfig(j, "");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message, "data.eval: expected a path string or an object");
  j["data"]["eval"] = "d.npy";
  EXPECT_TRUE(ParseTuneConfig(j, "").ok());
}

TEST(TuneConfig, NegativeThresholdIsAcceptedWithAWarning) {
  json j = MinimalConfig();
  EXPECT_TRUE(ParseTuneConfig(j, "")->warnings.empty());
  j["search"]["threshold"] = -0.5;
  auto c = ParseTuneConfig(j, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->threshold, -0.5);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("search.threshold is negative"), std::string::npos) << c->warnings[0];
  EXPECT_NE(c->warnings[0].find("more accurate than the float model"), std::string::npos) << c->warnings[0];
}

TEST(TuneConfig, OverrideZeroPointMustFitItsType) {
  json j = MinimalConfig();
  j["quantization"]["extra_options"]["TensorQuantOverrides"]["x"] = {
      {{"quant_type", "uint8"}, {"scale", 0.1}, {"zero_point", 999}}};
  auto parsed = ParseTuneConfig(j, "");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().message,
            "quantization.extra_options.TensorQuantOverrides.x.zero_point: 999 is outside the range of uint8 [0, 255]");
  j["quantization"]["extra_options"]["TensorQuantOverrides"]["x"][0]["zero_point"] = 255;
  EXPECT_TRUE(ParseTuneConfig(j, "").ok());
  j["quantization"]["extra_options"]["TensorQuantOverrides"]["x"][0]["scale"] = 0;
  parsed = ParseTuneConfig(j, "");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("TensorQuantOverrides.x.scale"), std::string::npos) << parsed.error().message;
}

// ------------------------------------------------------------------ one serializer

// Options with every field away from its default.
quant::QuantOptions EveryOption() {
  quant::QuantOptions o;
  o.mode = quant::QuantMode::kStatic;
  o.per_channel = true;
  o.reduce_range = true;
  o.activation_type = quant::QuantType::kInt16;
  o.weight_type = quant::QuantType::kUInt16;
  o.op_types_to_quantize = {"Conv", "MatMul"};
  o.nodes_to_quantize = {"conv*", "fc,1"};  // a comma inside a name survives as a list element
  o.nodes_to_exclude = {"conv1"};
  o.activation_symmetric = true;
  o.weight_symmetric = false;
  o.quantize_bias = false;
  o.power_of_two = true;
  o.calibration = quant::CalibrationMethod::kPercentile;
  o.calibration_options.moving_average = true;
  o.calibration_options.averaging_constant = 0.125;
  o.calibration_options.percentile = 99.99;
  o.calibration_options.percentile_num_bins = 4096;
  quant::TensorOverride full;
  full.quant_type = quant::QuantType::kInt8;
  full.scale = 0.0123f;
  full.zero_point = -3;
  full.axis = 1;
  full.symmetric = true;
  full.reduce_range = false;
  full.rmin = -1.5;
  full.rmax = 2.25;
  o.tensor_overrides["w1"] = full;
  quant::TensorOverride partial;
  partial.rmax = 6.0;
  o.tensor_overrides["act"] = partial;
  o.tensor_overrides["empty"] = quant::TensorOverride();
  quant::SyncCalibrationOptions(o);
  return o;
}

TEST(TuneConfig, QuantOptionsSerializerIsTheParsersInverse) {
  std::vector<quant::QuantOptions> all = {quant::QuantOptions(), EveryOption()};
  quant::SyncCalibrationOptions(all[0]);
  quant::QuantOptions dynamic = EveryOption();
  dynamic.mode = quant::QuantMode::kDynamic;
  dynamic.weight_symmetric.reset();
  dynamic.calibration = quant::CalibrationMethod::kMse;
  quant::SyncCalibrationOptions(dynamic);
  all.push_back(dynamic);
  for (const auto& o : all) {
    const json j = QuantOptionsToJson(o);
    auto parsed = ParseQuantOptionsJson(j, "quantization");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message << "\n" << j.dump(1);
    EXPECT_TRUE(*parsed == o) << j.dump(1);
    EXPECT_EQ(QuantOptionsToJson(*parsed), j);
    // Through text too (numbers keep every bit).
    auto reparsed = ParseQuantOptionsJson(json::parse(j.dump()), "quantization");
    ASSERT_TRUE(reparsed.ok());
    EXPECT_TRUE(*reparsed == o);
  }
  // Every option is written, defaults included.
  const json j = QuantOptionsToJson(quant::QuantOptions());
  for (const char* key : {"CalibPercentile", "CalibNumBins", "CalibMovingAverageConstant", "TensorQuantOverrides"})
    EXPECT_TRUE(j["extra_options"].contains(key)) << key;
}

// The resume check names the first setting that differs, for every setting that
// changes results, and lets `out` differ.
TEST(TuneConfig, ResumeCheckNamesEachChangedSetting) {
  json base = MinimalConfig();
  base["quantization"] = QuantOptionsToJson(EveryOption());
  auto parsed = ParseTuneConfig(base, "/cfg/tune.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const json run = parsed->ToJson();
  // config.json is itself a config that gives the same settings.
  auto again = ParseTuneConfig(run, "");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->ToJson(), run);

  struct Case {
    std::function<void(json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model"] = "other.onnx"; }, "model: "},
      {[](json& j) { j["data"]["eval"]["samples"] = 11; }, "data.eval.samples: 10 in the run, 11 now"},
      {[](json& j) {
         j["data"]["calibration"] = {{"path", "c.npy"}};
       },
       "data.calibration.path: not set in the run"},
      {[](json& j) { j["data"]["ranking"]["samples"] = 5; }, "data.ranking.samples: 256 in the run, 5 now"},
      {[](json& j) { j["data"]["seed"] = 3; }, "data.seed: 0 in the run, 3 now"},
      {[](json& j) { j["data"]["batch_size"] = 3; }, "data.batch_size"},
      {[](json& j) { j["data"]["preprocess"] = "scale=0.5"; }, "data.calibration.preprocess: not set in the run"},
      {[](json& j) { j["quantization"]["mode"] = "dynamic"; }, "quantization.mode"},
      {[](json& j) { j["quantization"]["per_channel"] = false; },
       "quantization.per_channel: true in the run, false now"},
      {[](json& j) { j["quantization"]["reduce_range"] = false; }, "quantization.reduce_range"},
      {[](json& j) { j["quantization"]["activation_type"] = "uint8"; }, "quantization.activation_type"},
      {[](json& j) { j["quantization"]["weight_type"] = "int8"; }, "quantization.weight_type"},
      {[](json& j) { j["quantization"]["calibrate_method"] = "minmax"; }, "quantization.calibrate_method"},
      {[](json& j) { j["quantization"]["op_types_to_quantize"] = {"Conv"}; }, "quantization.op_types_to_quantize"},
      {[](json& j) { j["quantization"]["nodes_to_quantize"] = json::array(); }, "quantization.nodes_to_quantize"},
      {[](json& j) { j["quantization"]["nodes_to_exclude"] = {"conv2"}; }, "quantization.nodes_to_exclude[0]"},
      {[](json& j) { j["quantization"]["power_of_two"] = false; }, "quantization.power_of_two"},
      {[](json& j) { j["quantization"]["extra_options"]["ActivationSymmetric"] = false; },
       "quantization.extra_options.ActivationSymmetric"},
      {[](json& j) { j["quantization"]["extra_options"].erase("WeightSymmetric"); },
       "quantization.extra_options.WeightSymmetric: false in the run, not set now"},
      {[](json& j) { j["quantization"]["extra_options"]["QuantizeBias"] = true; },
       "quantization.extra_options.QuantizeBias"},
      {[](json& j) { j["quantization"]["extra_options"]["CalibMovingAverage"] = false; },
       "quantization.extra_options.CalibMovingAverage"},
      {[](json& j) { j["quantization"]["extra_options"]["CalibMovingAverageConstant"] = 0.5; },
       "quantization.extra_options.CalibMovingAverageConstant: 0.125 in the run, 0.5 now"},
      {[](json& j) { j["quantization"]["extra_options"]["CalibPercentile"] = 99.9; },
       "quantization.extra_options.CalibPercentile: 99.99 in the run, 99.9 now"},
      {[](json& j) { j["quantization"]["extra_options"]["CalibNumBins"] = 2048; },
       "quantization.extra_options.CalibNumBins: 4096 in the run, 2048 now"},
      {[](json& j) {
         j["quantization"]["extra_options"]["TensorQuantOverrides"]["w1"] = {{{"zero_point", -4}}};
       },
       "quantization.extra_options.TensorQuantOverrides.w1[0].axis"},
      {[](json& j) { j["quantization"]["extra_options"]["TensorQuantOverrides"]["act"][0]["rmax"] = 6.5; },
       "quantization.extra_options.TensorQuantOverrides.act[0].rmax: 6.0 in the run, 6.5 now"},
      {[](json& j) { j["quantization"]["extra_options"]["TensorQuantOverrides"]["new"] = json::object(); },
       "quantization.extra_options.TensorQuantOverrides.new: not set in the run"},
      {[](json& j) { j["ranker"] = "weights"; }, "ranker: \"damage\" in the run, \"weights\" now"},
      {[](json& j) { j["worst_samples"] = 4; }, "worst_samples"},
      {[](json& j) { j["search"]["strategy"] = "front"; }, "search.strategy"},
      {[](json& j) { j["search"]["threshold"] = 0.5; }, "search.threshold"},
      {[](json& j) { j["search"]["max_candidates"] = 3; }, "search.max_candidates"},
      {[](json& j) { j["search"]["fallback"] = "int16"; }, "search.fallback"},
      {[](json& j) { j["search"]["loss"] = "disagreement"; }, "search.loss"},
      {[](json& j) { j["objectives"] = {"accuracy_loss"}; }, "objectives: "},
      {[](json& j) { j["runner"] = "ort"; }, "runner"},
      {[](json& j) { j["threads"] = 2; }, "threads"},
      {[](json& j) { j["latency"]["runs"] = 5; }, "latency.runs"},
      {[](json& j) { j["latency"]["warmup"] = 5; }, "latency.warmup"},
      {[](json& j) { j["latency"]["batch"] = 5; }, "latency.batch"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.edit(j);
    auto now = ParseTuneConfig(j, "/cfg/tune.json");
    ASSERT_TRUE(now.ok()) << c.expected << ": " << now.error().message;
    auto diff = FirstSettingsDifference(run, now->ToJson());
    ASSERT_TRUE(diff.has_value()) << c.expected;
    EXPECT_EQ(diff->rfind(c.expected, 0), 0u) << "difference: " << *diff << "\nexpected: " << c.expected;
  }
  // Where the run directory is does not change results.
  json moved = base;
  moved["out"] = "/elsewhere/run";
  EXPECT_FALSE(FirstSettingsDifference(run, ParseTuneConfig(moved, "/cfg/tune.json")->ToJson()).has_value());
}

// ------------------------------------------------------------------ data split

TEST(TuneDataSplit, DefaultSetsAreHeldOutOfEvaluation) {
  SetRequest cal{.from_eval = true, .samples = 64}, rank{.from_eval = true, .samples = 32};
  // Evaluation asks for all samples: the held-out ones are taken from it.
  auto all = SplitData(1000, 0, cal, rank, 7);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->held_out, 64u);
  EXPECT_EQ(all->eval.size(), 936u);
  EXPECT_EQ(all->calibration.indices.size(), 64u);
  EXPECT_EQ(all->ranking.indices.size(), 32u);
  // Evaluation asks for a subset: it keeps its size, from the other samples.
  auto some = SplitData(1000, 200, cal, rank, 7);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->eval.size(), 200u);
  for (const auto* split : {&*all, &*some}) {
    const std::set<int64_t> eval(split->eval.begin(), split->eval.end());
    for (const auto* part : {&split->calibration, &split->ranking}) {
      EXPECT_TRUE(part->held_out);
      EXPECT_EQ(part->overlap, 0u);
      for (int64_t i : part->indices) EXPECT_FALSE(eval.count(i)) << "sample " << i << " is in both";
    }
    EXPECT_NE(split->Describe(1000, 0).find("held out"), std::string::npos);
  }
  // The same request gives the same split; another seed another one.
  EXPECT_EQ(SplitData(1000, 200, cal, rank, 7)->calibration.indices, some->calibration.indices);
  EXPECT_NE(SplitData(1000, 200, cal, rank, 8)->calibration.indices, some->calibration.indices);
  // At most half the data is held out.
  auto small = SplitData(10, 0, SetRequest{.from_eval = true, .samples = 256}, rank, 0);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->held_out, 5u);
  EXPECT_EQ(small->eval.size(), 5u);
  EXPECT_FALSE(SplitData(1, 0, cal, rank, 0).ok());
}

TEST(TuneDataSplit, ExplicitSetsAreSampledAsGivenAndOverlapIsCounted) {
  SetRequest own{.from_eval = false, .size = 500, .samples = 50, .same_file_as_eval = false};
  SetRequest same = own;
  same.same_file_as_eval = true;
  same.size = 100;
  same.samples = 0;  // all of it: every evaluation sample is in it
  auto split = SplitData(100, 40, own, same, 3);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->held_out, 0u);
  EXPECT_EQ(split->eval.size(), 40u);
  EXPECT_EQ(split->calibration.indices.size(), 50u);
  EXPECT_EQ(split->calibration.overlap, 0u);  // another file: never counted
  EXPECT_EQ(split->ranking.overlap, 40u);
  EXPECT_TRUE(split->Describe(100, 40).empty());
}

// ------------------------------------------------------------------ files

TEST(TuneFiles, JsonNumbersOutOfRangeAreUserErrorsWithThePlace) {
  auto j = ParseJson("{\n  \"search\": {\"threshold\": 1e999}\n}\n", "tune.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().kind, ErrorKind::kUser);
  const std::string& m = j.error().message;
  EXPECT_EQ(m.rfind("tune.json: line 2, ", 0), 0u) << m;
  EXPECT_NE(m.find("(search.threshold)"), std::string::npos) << m;
  EXPECT_NE(m.find("1e999"), std::string::npos) << m;
  auto a = ParseJson("[1, 2, -1e400]", "x.json");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("([2])"), std::string::npos) << a.error().message;
  auto syntax = ParseJson("{\"a\": }", "y.json");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.error().message.rfind("y.json: invalid JSON: parse error at line 1, column 7", 0), 0u)
      << syntax.error().message;
  EXPECT_TRUE(ParseJson("{\"a\": [1e300]}", "z.json").ok());
}

TEST(TuneFiles, Sha256OfKnownContent) {
  const auto dir = std::filesystem::temp_directory_path() / ("seqto_sha_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "abc") << "abc";
  std::ofstream(dir / "empty");
  auto h = Sha256Files({(dir / "abc").string(), (dir / "empty").string()});
  ASSERT_TRUE(h.ok()) << h.error().message;
  EXPECT_EQ((*h)[0], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ((*h)[1], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  auto missing = Sha256File((dir / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(TuneFiles, DirLockIsExclusive) {
  const auto dir = std::filesystem::temp_directory_path() / ("seqto_lock_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto first = DirLock::Acquire(dir.string(), "tune.lock");
    ASSERT_TRUE(first.ok()) << first.error().message;
    // flock locks belong to the open file: a second open conflicts even in one process.
    auto second = DirLock::Acquire(dir.string(), "tune.lock");
    ASSERT_FALSE(second.ok());
    EXPECT_NE(
        second.error().message.find("another process is using this directory (pid " + std::to_string(::getpid()) + ")"),
        std::string::npos)
        << second.error().message;
  }
  EXPECT_TRUE(DirLock::Acquire(dir.string(), "tune.lock").ok());  // released with the first
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace seqto::tune
