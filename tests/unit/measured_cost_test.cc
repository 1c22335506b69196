// pareto's timed exclusion costs (tune/measured_cost.h): a fake timer stands in for
// the runner, so the orders below are worked out by hand and no timing is asserted.
#include "tune/measured_cost.h"

#include <gtest/gtest.h>

#include <map>

namespace seqto {
namespace {

using tune::MeasuredCostOptions;
using tune::MeasuredParetoOrder;
using Set = std::set<std::string>;

// Three convs in a row, a -> b -> c, and d elsewhere. The fully quantized model takes
// 10 ms, float 20 ms. Each group alone left float costs its island: a 1.0, b 1.0,
// c 0.9 ms, d 5 ms; b next to a float a only adds 0.1 ms (the borders between them go
// away), so {a, b} costs 1.1, not 2.0. Costs of sets not listed add.
double FakeMs(const Set& s) {
  static const std::map<std::string, double> alone = {{"a", 1.0}, {"b", 1.0}, {"c", 0.9}, {"d", 5.0}};
  if (s.size() == 4) return 20.0;
  double ms = 10.0;
  for (const auto& g : s) ms += alone.at(g);
  if (s.count("a") && s.count("b")) ms -= 0.9;
  return ms;
}

struct Recorder {
  std::vector<Set> calls;
  std::map<size_t, double> spikes;  // call index -> ms added (a slow spell)
  tune::TimeExcluded Timer() {
    return [this](const Set& s) -> Expected<double> {
      const double extra = spikes.count(calls.size()) ? spikes[calls.size()] : 0;
      calls.push_back(s);
      return FakeMs(s) + extra;
    };
  }
};

const std::vector<std::string> kNames = {"a", "b", "c", "d"};
const std::vector<double> kSize = {0.25, 0.25, 0.25, 0.25};
const std::vector<std::string> kFallback = {"d", "c", "b", "a"};

MeasuredCostOptions LatencyOnly() {
  MeasuredCostOptions o;
  o.cost_size = 0;
  return o;
}

TEST(MeasuredCost, MarginalCostOfAGroupNextToAnIslandReordersTheSteps) {
  // Recovered: a 1.0, c 0.85, b 0.8, d 2.0. Isolated ratios (per ms): a 1.0, c 0.94,
  // b 0.8, d 0.4. After a, b's marginal cost is 0.1 ms, so b (8.0) comes before c
  // (0.94), and d last.
  Recorder rec;
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, kFallback, rec.Timer(), LatencyOnly());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->order, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_DOUBLE_EQ(r->int8_ms, 10.0);
  EXPECT_DOUBLE_EQ(r->float_ms, 20.0);
  ASSERT_EQ(r->steps.size(), 4u);
  EXPECT_EQ(r->steps[0].group, "a");
  EXPECT_NEAR(r->steps[0].isolated_ms, 1.0, 1e-12);
  EXPECT_NEAR(r->steps[0].marginal_ms, 1.0, 1e-12);
  EXPECT_EQ(r->steps[1].group, "b");
  EXPECT_NEAR(r->steps[1].isolated_ms, 1.0, 1e-12);
  EXPECT_NEAR(r->steps[1].marginal_ms, 0.1, 1e-12);
  EXPECT_NEAR(r->steps[2].marginal_ms, 0.9, 1e-12);
  EXPECT_EQ(r->steps[3].group, "d");
  EXPECT_DOUBLE_EQ(r->steps[3].recovered, 2.0);
  EXPECT_DOUBLE_EQ(r->steps[3].size_share, 0.25);
  // 6 sets x 3 rounds, then steps 2..4 re-time the chosen set and min(3, left) on top:
  // 4 + 3 + 2 sets, 3 rounds each.
  EXPECT_EQ(r->timings, 18u + 27u);
  EXPECT_EQ(rec.calls.size(), r->timings);
}

TEST(MeasuredCost, WithoutLookaheadTheStaleIsolatedCostHidesTheCheapNeighbour) {
  // Lookahead 1: after a, only c (the best by isolated cost) is re-timed, so it goes
  // before b: the ablation that shows what re-timing buys.
  Recorder rec;
  MeasuredCostOptions o = LatencyOnly();
  o.lookahead = 1;
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, kFallback, rec.Timer(), o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->order, (std::vector<std::string>{"a", "c", "b", "d"}));
}

TEST(MeasuredCost, RoundsAreInterleavedAndTheMedianIgnoresASlowSpell) {
  Recorder rec;
  rec.spikes[3] = 50.0;  // the first round's timing of {a}: far off
  MeasuredCostOptions o = LatencyOnly();
  o.groups = 3;  // the three that recover most: d, a, c
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, kFallback, rec.Timer(), o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  // The first 15 calls: {}, all, then the shortlist by recovered loss, in rounds.
  const std::vector<Set> round = {{}, {"a", "b", "c", "d"}, {"d"}, {"a"}, {"c"}};
  ASSERT_GE(rec.calls.size(), 15u);
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(rec.calls[i], round[i % 5]) << "call " << i;
  // The spike hit {a}'s first timing; its median is still 11 ms.
  EXPECT_NEAR(r->steps[0].isolated_ms, 1.0, 1e-12);
  // b recovers the least and is not timed: it follows in the fallback order.
  EXPECT_EQ(r->order, (std::vector<std::string>{"a", "c", "d", "b"}));
  for (const auto& s : rec.calls) EXPECT_FALSE(s.count("b") && s.size() < 4) << "b was timed";
}

TEST(MeasuredCost, SizeWeightAndFreeGroups) {
  // Size only: latency is ignored, a is the ratio 1.0 / 0.5 = 2, c 0.9 / 0.1 = 9.
  MeasuredCostOptions o;
  o.cost_latency = 0;
  Recorder rec;
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.0, 0.9, 0.0}, {0.5, 0.2, 0.1, 0.2}, kFallback, rec.Timer(), o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->order, (std::vector<std::string>{"c", "a", "d", "b"}));
  // A group whose timed delta is below 0 (noise, or borders removed) is not free: it
  // costs the resolution, here 1% of float - int8 = 0.1 ms (the fake timer has no
  // spread). So c (recovers 0.05 for 0.1 ms) stays behind a (1.0 for 1.0 ms); free, it
  // would have come first.
  auto neg = [](const Set& s) -> Expected<double> { return s == Set{"c"} ? 9.5 : FakeMs(s); };
  r = MeasuredParetoOrder(kNames, {1.0, 0.0, 0.05, 0.0}, kSize, kFallback, neg, LatencyOnly());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NEAR(r->resolution_ms, 0.1, 1e-12);
  EXPECT_EQ(r->order, (std::vector<std::string>{"a", "c", "d", "b"}));
  // With twice c's recovered loss it ties a per unit of cost and the groups' order decides.
  r = MeasuredParetoOrder(kNames, {1.0, 0.0, 0.2, 0.0}, kSize, kFallback, neg, LatencyOnly());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->order.front(), "c");
}

TEST(MeasuredCost, ResolutionIsTheFullyQuantizedModelsSpread) {
  // The fully quantized model's first timing runs 2 ms slow: the timings resolve no
  // better than 2 ms, so every group's cost is at least that, and the order is the
  // order of recovered loss (a 1.0, c 0.85, b 0.8), d (1.5 for 5 ms) last.
  Recorder rec;
  rec.spikes[0] = 2.0;
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 1.5}, kSize, kFallback, rec.Timer(), LatencyOnly());
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NEAR(r->resolution_ms, 2.0, 1e-12);
  EXPECT_EQ(r->order, (std::vector<std::string>{"a", "c", "b", "d"}));
}

TEST(MeasuredCost, NoTimingWhenNothingIsShortlisted) {
  Recorder rec;
  MeasuredCostOptions o;
  o.groups = 0;
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, kFallback, rec.Timer(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->order, kFallback);
  EXPECT_TRUE(rec.calls.empty());
  r = MeasuredParetoOrder(kNames, {0, 0, 0, 0}, kSize, kFallback, rec.Timer(), MeasuredCostOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->order, kFallback);
  EXPECT_TRUE(rec.calls.empty());
}

TEST(MeasuredCost, ErrorsAreReturned) {
  auto failing = [](const Set&) -> Expected<double> { return UserError("runner 'ort': model failed"); };
  auto r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, kFallback, failing, MeasuredCostOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "runner 'ort': model failed");
  Recorder rec;
  r = MeasuredParetoOrder(kNames, {1.0, 0.8}, kSize, kFallback, rec.Timer(), MeasuredCostOptions{});
  EXPECT_FALSE(r.ok());
  r = MeasuredParetoOrder(kNames, {1.0, 0.8, 0.85, 2.0}, kSize, {"a", "b"}, rec.Timer(), MeasuredCostOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("fallback order"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace seqto
