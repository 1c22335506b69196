// `seqto tune` with the cost-aware ranker (`pareto`) on the bundled Fashion-MNIST
// ResNet: the candidates are prefixes of an order by recovered loss per cost,
// recomputed here from what analysis.json stores (the search steps' losses, isolated
// output losses and MACs), and
// report.json carries the MACs the report's latency bound needs. A bad search.cost
// is one error line naming the key, before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli_util.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

json ParetoConfig(const fs::path& out) {
  json c = FashionResnetTuneConfig(out);
  c["data"]["seed"] = 7;
  c["quantization"] = {{"mode", "static"}, {"calibrate_method", "minmax"}};
  c["ranker"] = "pareto";
  c["search"] = {{"strategy", "linear"},
                 {"threshold", -1},
                 {"max_candidates", 4},
                 {"cost", {{"latency", 1}, {"measure_groups", 4}, {"rounds", 1}, {"runs", 2}}}};
  c["objectives"] = {"accuracy_loss", "latency_ms"};
  c["latency"] = {{"runs", 3}, {"warmup", 1}};
  c["threads"] = 1;
  return c;
}

TEST(TuneParetoCli, CandidatesFollowRecoveredLossPerMacShare) {
  const fs::path dir = TempDir(), run = dir / "run";
  std::ofstream(dir / "tune.json") << ParetoConfig(run).dump(2);
  const std::vector<std::string> args = {"tune", (dir / "tune.json").string(), "--no-report"};
  const Result r = RunSeqto(args, std::chrono::seconds(600));
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const json report = json::parse(ReadFile(run / "report.json"));
  const json analysis = json::parse(ReadFile(run / "analysis.json"));
  EXPECT_EQ(
      report["settings"]["config"]["search"]["cost"],
      (json{{"latency", 1.0}, {"size", 0.0}, {"measure_groups", 4}, {"lookahead", 3}, {"rounds", 1}, {"runs", 2}}));

  // MACs: the model's, and every group's (the ResNet's shapes are all known).
  const int64_t model_macs = report.at("macs").get<int64_t>();
  EXPECT_EQ(analysis.at("macs").get<int64_t>(), model_macs);
  int64_t group_macs = 0;
  for (const auto& g : report["groups"]) group_macs += g.at("macs").get<int64_t>();
  EXPECT_GT(group_macs, 0);
  EXPECT_LE(group_macs, model_macs);

  // The order, recomputed: loss removed / (MAC share + 0.01), descending; ties by
  // cost, then execution order. Loss removed: each step of the search `damage`
  // follows (the one with the lower mean loss over the positions both measured) the
  // loss before it less the loss after it; the other groups their isolated loss.
  const json& groups = analysis["groups"];
  std::map<std::string, double> removed;
  for (const auto& g : groups)
    removed[g["name"].get<std::string>()] = std::max(g["sensitivity_isolated"].get<double>(), 0.0);
  const json &fwd = analysis["greedy_order"], &bwd = analysis["backward_order"];
  ASSERT_FALSE(fwd.empty());
  double sum_f = 0, sum_b = 0;
  for (size_t i = 0;
       i < fwd.size() && i < bwd.size() && fwd[i]["output_loss"].is_number() && bwd[i]["output_loss"].is_number(); ++i)
    sum_f += fwd[i]["output_loss"].get<double>(), sum_b += bwd[i]["output_loss"].get<double>();
  const json& search = sum_b < sum_f ? bwd : fwd;
  double before = analysis.at("sensitivity_full_loss").get<double>();
  for (const auto& step : search) {
    if (!step["output_loss"].is_number()) break;
    removed[step["name"].get<std::string>()] = std::max(before - step["output_loss"].get<double>(), 0.0);
    before = step["output_loss"].get<double>();
  }
  std::vector<size_t> idx(groups.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto ratio = [&](size_t i) {
    const double cost = groups[i]["macs"].get<double>() / double(group_macs) + 0.01;
    return removed[groups[i]["name"].get<std::string>()] / cost;
  };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    if (ratio(x) != ratio(y)) return ratio(x) > ratio(y);
    if (groups[x]["macs"] != groups[y]["macs"])
      return groups[x]["macs"].get<double>() < groups[y]["macs"].get<double>();
    return groups[x]["order"].get<size_t>() < groups[y]["order"].get<size_t>();
  });
  std::vector<std::string> expected;
  for (size_t i : idx) expected.push_back(groups[i]["name"].get<std::string>());
  const auto mac_ranking = analysis["rankings"]["pareto_mac"].get<std::vector<std::string>>();
  EXPECT_EQ(mac_ranking, expected);

  // The order the candidates follow: the timed steps (groups that recover loss, at
  // most measure_groups of them), then the MAC-share order for the rest.
  const json& measured = analysis.at("measured_cost");
  EXPECT_EQ(report.at("measured_cost"), measured);
  EXPECT_EQ(measured["runner"], "engine");
  EXPECT_GT(measured["int8_ms"].get<double>(), 0);
  EXPECT_GT(measured["float_ms"].get<double>(), 0);
  const json& steps = measured.at("steps");
  ASSERT_FALSE(steps.empty());
  ASSERT_LE(steps.size(), 4u);
  // Shortlist (n + 2 models, one round), then per step after the first the chosen set
  // and up to 3 candidates on top of it.
  EXPECT_GE(measured["models_timed"].get<size_t>(), steps.size() + 2);
  EXPECT_LE(measured["models_timed"].get<size_t>(), steps.size() + 2 + (steps.size() - 1) * 4);
  const auto ranking = analysis["rankings"]["pareto"].get<std::vector<std::string>>();
  std::vector<std::string> measured_expected;
  for (const auto& st : steps) {
    EXPECT_GT(st["recovered"].get<double>(), 0) << st.dump();
    EXPECT_EQ(st["recovered"].get<double>(), removed[st["group"].get<std::string>()]) << st.dump();
    measured_expected.push_back(st["group"].get<std::string>());
  }
  EXPECT_EQ(steps[0]["marginal_ms"], steps[0]["isolated_ms"]);
  for (const auto& g : mac_ranking)
    if (std::find(measured_expected.begin(), measured_expected.end(), g) == measured_expected.end())
      measured_expected.push_back(g);
  EXPECT_EQ(ranking, measured_expected);
  EXPECT_EQ(measured["order"].get<std::vector<std::string>>(), ranking);
  EXPECT_EQ(report["ranking"].get<std::vector<std::string>>(), ranking);
  EXPECT_FALSE(fs::exists(run / "cost"));  // the timed models are removed
  // Cost changes the order: by isolated loss alone it differs on this model.
  // (MAC shares; the timed order depends on the machine.)
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {
    return groups[x]["sensitivity_isolated"].get<double>() > groups[y]["sensitivity_isolated"].get<double>();
  });
  std::vector<std::string> by_loss;
  for (size_t i : idx) by_loss.push_back(groups[i]["name"].get<std::string>());
  EXPECT_NE(by_loss, mac_ranking);

  ASSERT_EQ(report["cycles"].size(), 4u);
  for (const auto& c : report["cycles"]) {
    const size_t k = c["index"].get<size_t>();
    EXPECT_EQ(c["excluded"].get<std::vector<std::string>>(),
              std::vector<std::string>(ranking.begin(), ranking.begin() + static_cast<long>(k)));
  }
  // The report renders it (chart (d) reads the MACs).
  const Result rep = RunSeqto({"report", run.string()}, std::chrono::seconds(300));
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_TRUE(fs::exists(run / "figures" / "latency.svg"));
}

TEST(TuneParetoCli, BadCostIsOneErrorLineBeforeAnythingIsWritten) {
  const fs::path dir = TempDir(), run = dir / "run";
  json c = ParetoConfig(run);
  c["search"]["cost"] = {{"latency", 0}, {"size", 0}};
  std::ofstream(dir / "bad.json") << c.dump(2);
  ExpectUserError({"tune", (dir / "bad.json").string()}, {"search.cost: give 'latency' or 'size' a weight above 0"});
  c["ranker"] = "damage";
  c["search"]["cost"] = {{"size", 1}};
  std::ofstream(dir / "other.json") << c.dump(2);
  ExpectUserError({"tune", (dir / "other.json").string()}, {"search.cost: only ranker 'pareto'", "'damage'"});
  EXPECT_FALSE(fs::exists(run));
}

}  // namespace
}  // namespace seqto
