// Rankers on hand-made analysis results: each order follows its definition.
#include <gtest/gtest.h>

#include <cmath>

#include "quant/rank/ranker.h"

namespace seqto::quant {
namespace {

GroupAnalysis Group(std::string name, size_t order, double score, double iso, double revert, int64_t weights,
                    int64_t channels) {
  GroupAnalysis g;
  g.name = std::move(name);
  g.order = order;
  g.seqto_score = score;
  g.sensitivity_isolated = iso;
  g.sensitivity_revert_one = revert;
  g.weight_elements = weights;
  g.output_channels = channels;
  return g;
}

AnalysisResult Example() {
  AnalysisResult a;
  //                      name  order score  iso   revert weights channels
  a.groups.push_back(Group("a", 0, 0.90, 0.50, 0.40, 100, 10));  // amplified: best score, most damage
  a.groups.push_back(Group("b", 1, 0.10, 0.05, 0.01, 400, 10));  // worst score, little damage
  a.groups.push_back(Group("c", 2, 0.50, 0.20, 0.30, 400, 20));
  a.groups.push_back(Group("d", 3, NAN, 0.05, 0.00, 0, 0));  // no activation metric, no weights
  return a;
}

std::vector<std::string> Rank(const std::string& name, const AnalysisResult& a, uint64_t seed = 0) {
  auto ranker = GetRanker(name);
  EXPECT_TRUE(ranker.ok());
  RankOptions o;
  o.seed = seed;
  auto order = (*ranker)->rank(a, o);
  EXPECT_TRUE(order.ok()) << order.error().message;
  return *order;
}

TEST(Rankers, PublishedSortsTheScoreDescendingAndNaNLast) {
  EXPECT_EQ(Rank("seqto-published", Example()), (std::vector<std::string>{"a", "c", "b", "d"}));
}

TEST(Rankers, DamageIsMeasuredIsolatedLossThenTheScore) {
  // Isolated loss descending: a (0.50), c (0.20), then b and d tie at 0.05 and the
  // lower (worse) score goes first; d has none and comes last.
  EXPECT_EQ(Rank("damage", Example()), (std::vector<std::string>{"a", "c", "b", "d"}));
}

std::vector<SearchStep> Steps(std::vector<std::pair<std::string, double>> steps) {
  std::vector<SearchStep> out;
  for (auto& [name, loss] : steps) out.push_back({name, loss});
  return out;
}

TEST(Rankers, DamageTakesTheSearchWithTheLowerMeanLoss) {
  AnalysisResult a = Example();
  // Backward leaves less over the 2 positions both measured ((0.20 + 0.05) / 2
  // against (0.30 + 0.10) / 2): its whole order.
  a.greedy = Steps({{"c", 0.30}, {"a", 0.10}});
  a.backward = Steps({{"d", 0.20}, {"b", 0.05}, {"c", NAN}, {"a", 0.0}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"d", "b", "c", "a"}));
  // Forward leaves less: its steps, then the rest by isolated loss (a 0.50, d 0.05).
  a.greedy = Steps({{"c", 0.10}, {"b", 0.05}});
  a.backward = Steps({{"a", 0.30}, {"c", 0.20}, {"b", NAN}, {"d", 0.0}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"c", "b", "a", "d"}));
  // A tie goes to forward.
  a.backward = Steps({{"d", 0.10}, {"a", 0.05}, {"c", NAN}, {"b", 0.0}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"c", "b", "a", "d"}));
}

TEST(Rankers, DamageComparesOnlyThePositionsBothSearchesMeasured) {
  AnalysisResult a = Example();
  // Backward did not measure its second plan: only position 1 counts, 0.25 < 0.30.
  a.greedy = Steps({{"c", 0.30}, {"a", 0.01}});
  a.backward = Steps({{"b", 0.25}, {"c", NAN}, {"a", NAN}, {"d", 0.0}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"b", "c", "a", "d"}));
  // Nothing in common: forward.
  a.backward[0].loss = NAN;
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"c", "a", "b", "d"}));
}

TEST(Rankers, DamageWithOneSearchTakesIt) {
  AnalysisResult a = Example();
  a.greedy = Steps({{"d", 0.4}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"d", "a", "c", "b"}));
  a.greedy.clear();
  a.backward = Steps({{"b", 0.4}, {"d", 0.3}, {"a", NAN}, {"c", 0.0}});
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"b", "d", "a", "c"}));
}

TEST(Rankers, DamageRejectsASearchThatIsNotOfTheGroups) {
  auto r = GetRanker("damage");
  ASSERT_TRUE(r.ok());
  AnalysisResult a = Example();
  a.greedy = Steps({{"zz", 0.1}});
  auto order = (*r)->rank(a, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("'zz'"), std::string::npos) << order.error().message;
  a.greedy = Steps({{"a", 0.1}, {"a", 0.05}});
  order = (*r)->rank(a, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("twice"), std::string::npos) << order.error().message;
}

TEST(Rankers, DamageWithoutSensitivityIsTheScoreAscending) {
  AnalysisResult a = Example();
  for (auto& g : a.groups) g.sensitivity_isolated = g.sensitivity_revert_one = NAN;
  EXPECT_EQ(Rank("damage", a), (std::vector<std::string>{"b", "c", "a", "d"}));
}

TEST(Rankers, SensitivityIsRevertOneDescendingAndNeedsThePass) {
  EXPECT_EQ(Rank("sensitivity", Example()), (std::vector<std::string>{"a", "c", "b", "d"}));
  AnalysisResult a = Example();
  a.groups[1].sensitivity_revert_one = NAN;
  auto r = GetRanker("sensitivity");
  ASSERT_TRUE(r.ok());
  auto order = (*r)->rank(a, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.error().message.find("sensitivity"), std::string::npos);
}

TEST(Rankers, WeightsIsStm32sStaticOrder) {
  // Most weights first (b, c: 400); tie broken by fewer weights per channel (c: 20
  // per channel < b: 40); then a (100); d (0) last.
  EXPECT_EQ(Rank("weights", Example()), (std::vector<std::string>{"c", "b", "a", "d"}));
  // Equal totals and equal per-channel counts: the later group first.
  AnalysisResult a;
  a.groups.push_back(Group("early", 0, 0, 0, 0, 64, 8));
  a.groups.push_back(Group("late", 5, 0, 0, 0, 64, 8));
  EXPECT_EQ(Rank("weights", a), (std::vector<std::string>{"late", "early"}));
}

TEST(Rankers, RandomIsASeededPermutation) {
  AnalysisResult a;
  for (int i = 0; i < 20; ++i) a.groups.push_back(Group("g" + std::to_string(i), i, 0, 0, 0, 0, 0));
  const auto first = Rank("random", a, 7);
  EXPECT_EQ(first, Rank("random", a, 7));  // same seed, same order
  EXPECT_NE(first, Rank("random", a, 8));
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> names;
  for (const auto& g : a.groups) names.push_back(g.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(sorted, names);  // a permutation of all groups
}

TEST(Rankers, UnknownNameListsTheKnownOnes) {
  auto r = GetRanker("best");
  ASSERT_FALSE(r.ok());
  for (const char* name : {"damage", "seqto-published", "sensitivity", "weights", "random"})
    EXPECT_NE(r.error().message.find(name), std::string::npos) << name;
  EXPECT_EQ(std::string(kDefaultRanker), "damage");
}

}  // namespace
}  // namespace seqto::quant
