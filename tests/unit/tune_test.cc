// The tuner's pure parts: search strategies on synthetic loss curves, and the config
// parser's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tune/config.h"
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
       "objectives: unknown objective 'speed'"},
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

}  // namespace
}  // namespace seqto::tune
