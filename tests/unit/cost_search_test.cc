// The cost-aware ranker (`pareto`, rank/pareto.cc) and its config key (search.cost):
// orders worked out by hand from accuracy recovered per unit of cost.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "quant/rank/ranker.h"
#include "tune/config.h"

namespace seqto {
namespace {

using nlohmann::json;
using quant::AnalysisResult;
using quant::GroupAnalysis;
using quant::RankOptions;

GroupAnalysis Group(std::string name, size_t order, double isolated, int64_t macs, int64_t weights) {
  GroupAnalysis g;
  g.name = std::move(name);
  g.order = order;
  g.sensitivity_isolated = isolated;
  g.macs = macs;
  g.weight_elements = weights;
  return g;
}

// A big conv (most damage, most MACs), a depthwise conv (little damage, almost no
// cost), a classifier (few MACs, most weights) and an Add (no damage, no cost).
AnalysisResult Example() {
  AnalysisResult a;
  //                      name   order isolated macs weights
  a.groups.push_back(Group("big", 0, 0.40, 900, 300));
  a.groups.push_back(Group("dw", 1, 0.10, 10, 10));
  a.groups.push_back(Group("fc", 2, 0.20, 10, 600));
  a.groups.push_back(Group("add", 3, 0.00, 0, 0));
  return a;
}

std::vector<std::string> Rank(const AnalysisResult& a, double latency, double size) {
  auto ranker = quant::GetRanker("pareto");
  EXPECT_TRUE(ranker.ok());
  RankOptions o;
  o.cost_latency = latency;
  o.cost_size = size;
  auto order = (*ranker)->rank(a, o);
  EXPECT_TRUE(order.ok()) << order.error().message;
  return order.ok() ? *order : std::vector<std::string>{};
}

TEST(ParetoRanker, CostsAreMacAndWeightSharesPlusABorderCost) {
  RankOptions o;  // both weights 1
  const std::vector<double> c = quant::ExclusionCosts(Example().groups, o);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_NEAR(c[0], 900.0 / 920 + 0.01 + 300.0 / 910, 1e-12);
  EXPECT_NEAR(c[1], 10.0 / 920 + 0.01 + 10.0 / 910, 1e-12);
  EXPECT_NEAR(c[2], 10.0 / 920 + 0.01 + 600.0 / 910, 1e-12);
  EXPECT_NEAR(c[3], 0.01, 1e-12);
  // A group whose MACs are unknown counts as the average of the known ones.
  AnalysisResult a = Example();
  a.groups[3].macs = -1;
  const double mean = 920.0 / 3;
  EXPECT_NEAR(quant::ExclusionCosts(a.groups, o)[3], mean / (920 + mean) + 0.01, 1e-12);
}

TEST(ParetoRanker, OrdersByRecoveredLossPerCost) {
  // Latency only: fc 0.2 / 0.0209, dw 0.1 / 0.0209, big 0.4 / 0.988; add recovers
  // nothing. Damage alone would take big first.
  EXPECT_EQ(Rank(Example(), 1, 0), (std::vector<std::string>{"fc", "dw", "big", "add"}));
  // Size only: dw 0.1 / 0.011, big 0.4 / 0.330, fc 0.2 / 0.659.
  EXPECT_EQ(Rank(Example(), 0, 1), (std::vector<std::string>{"dw", "big", "fc", "add"}));
  // Both: dw 3.13, big 0.3035, fc 0.294.
  EXPECT_EQ(Rank(Example(), 1, 1), (std::vector<std::string>{"dw", "big", "fc", "add"}));
}

TEST(ParetoRanker, FreeGroupsThatHelpComeFirstAndNegativeDamageCountsAsNone) {
  AnalysisResult a = Example();
  a.groups[3].sensitivity_isolated = 0.01;  // the Add: no weights, so free by size
  a.groups[0].sensitivity_isolated = -0.5;  // reverting big alone would not help
  EXPECT_EQ(Rank(a, 0, 1), (std::vector<std::string>{"add", "dw", "fc", "big"}));
}

TEST(ParetoRanker, SearchStepsGiveTheirMeasuredLossDrop) {
  // The better search (only the forward one ran) reverted big, then fc: big removed
  // 0.5 of the full loss 1.0, fc only 0.05 more (its isolated 0.2 overstated it);
  // dw and add keep their isolated losses. Latency only: dw 0.1 / 0.0209 first,
  // then fc 0.05 / 0.0209, big 0.5 / 0.988.
  AnalysisResult a = Example();
  a.sensitivity_full_loss = 1.0;
  a.greedy = {{"big", 0.5}, {"fc", 0.45}};
  EXPECT_EQ(Rank(a, 1, 0), (std::vector<std::string>{"dw", "fc", "big", "add"}));
  // A step the search did not measure keeps the isolated loss (fc first again).
  a.greedy = {{"big", 0.5}, {"fc", NAN}};
  EXPECT_EQ(Rank(a, 1, 0), (std::vector<std::string>{"fc", "dw", "big", "add"}));
  // The backward search is taken when it leaves the lower mean loss: fc then big.
  a.greedy = {{"big", 0.5}, {"fc", 0.45}};
  a.backward = {{"fc", 0.3}, {"big", 0.2}};
  // fc removed 0.7 (cost 0.0209), big 0.1 (0.988), dw 0.1 (0.0209).
  EXPECT_EQ(Rank(a, 1, 0), (std::vector<std::string>{"fc", "dw", "big", "add"}));
  a.backward = {{"nope", 0.3}};
  auto ranker = quant::GetRanker("pareto");
  ASSERT_TRUE(ranker.ok());
  EXPECT_FALSE((*ranker)->rank(a, {}).ok());
}

TEST(ParetoRanker, NeedsTheSensitivityPass) {
  AnalysisResult a = Example();
  a.groups[1].sensitivity_isolated = NAN;
  auto ranker = quant::GetRanker("pareto");
  ASSERT_TRUE(ranker.ok());
  EXPECT_TRUE((*ranker)->needs_sensitivity);
  EXPECT_TRUE((*ranker)->needs_search);
  auto order = (*ranker)->rank(a, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("sensitivity"), std::string::npos) << order.error().message;
}

json Config() {
  return json::parse(R"({"model": "m.onnx", "data": {"eval": {"path": "d.npy", "samples": 10}},
                         "ranker": "pareto"})");
}

TEST(ParetoConfig, CostWeightsFollowTheObjectivesUnlessGiven) {
  auto c = tune::ParseTuneConfig(Config(), "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->cost_latency, 1.0);
  EXPECT_EQ(c->cost_size, 1.0);
  EXPECT_EQ(
      c->ToJson()["search"]["cost"],
      (json{{"latency", 1.0}, {"size", 1.0}, {"measure_groups", 12}, {"lookahead", 3}, {"rounds", 3}, {"runs", 10}}));
  json j = Config();
  j["objectives"] = {"accuracy_loss", "latency_ms"};
  c = tune::ParseTuneConfig(j, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->cost_latency, 1.0);
  EXPECT_EQ(c->cost_size, 0.0);
  j["objectives"] = {"accuracy_loss"};
  c = tune::ParseTuneConfig(j, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->cost_latency + c->cost_size, 2.0);
  j["search"]["cost"] = {{"size", 2.5}};
  c = tune::ParseTuneConfig(j, "");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->cost_latency, 0.0);
  EXPECT_EQ(c->cost_size, 2.5);
  // The settings parse back to the same run.
  auto again = tune::ParseTuneConfig(c->ToJson(), "");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->ToJson(), c->ToJson());
  // Other rankers write no search.cost.
  EXPECT_FALSE(tune::ParseTuneConfig(json::parse(R"({"model": "m.onnx", "data": {"eval": "d.npy"}})"), "")
                   ->ToJson()["search"]
                   .contains("cost"));
}

TEST(ParetoConfig, BadCostsNameTheKey) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"latency", -1}}, "search.cost.latency"},
      {{{"latency", "fast"}}, "search.cost.latency: expected a number"},
      {{{"speed", 1}}, "search.cost.speed: unknown key"},
      {{{"latency", 0}, {"size", 0}}, "search.cost: give 'latency' or 'size' a weight above 0"},
      {json::array({1}), "search.cost"},
      {{{"measure_groups", -1}}, "search.cost.measure_groups"},
      {{{"lookahead", 0}}, "search.cost.lookahead"},
      {{{"rounds", 0}}, "search.cost.rounds"},
      {{{"rounds", 1.5}}, "search.cost.rounds: expected an integer"},
      {{{"runs", 0}}, "search.cost.runs"},
  };
  for (const auto& [cost, expected] : cases) {
    json j = Config();
    j["search"]["cost"] = cost;
    auto parsed = tune::ParseTuneConfig(j, "tune.json");
    ASSERT_FALSE(parsed.ok()) << expected;
    EXPECT_NE(parsed.error().message.find(expected), std::string::npos)
        << "message: " << parsed.error().message << "\nexpected: " << expected;
  }
  json j = Config();
  j["ranker"] = "damage";
  j["search"]["cost"] = {{"latency", 1}};
  auto parsed = tune::ParseTuneConfig(j, "tune.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.error().message.find("search.cost: only ranker 'pareto'"), std::string::npos)
      << parsed.error().message;
}

}  // namespace
}  // namespace seqto
