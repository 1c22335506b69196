// Pareto selection of src/eval/pareto.h on hand-drawn examples (the arithmetic is in
// the comments), with duplicates, dominated points and a constant objective.
#include "eval/pareto.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace seqto {
namespace {

std::vector<size_t> Candidates(const std::vector<ParetoEntry>& e) {
  std::vector<size_t> out;
  for (const auto& x : e) out.push_back(x.candidate);
  return out;
}

TEST(Pareto, Dominates) {
  EXPECT_TRUE(Dominates({1, 2}, {1, 3}));  // equal, then strictly better
  EXPECT_TRUE(Dominates({0, 0}, {1, 1}));
  EXPECT_FALSE(Dominates({1, 3}, {1, 2}));
  EXPECT_FALSE(Dominates({1, 3}, {2, 2}));  // a trade-off: neither dominates
  EXPECT_FALSE(Dominates({2, 2}, {1, 3}));
  EXPECT_FALSE(Dominates({1, 2}, {1, 2}));  // identical: no
}

// 2-D (accuracy loss, size), drawn:
//
//  size 10 | 0
//        7 |     2
//        6 |   1,4
//        2 |           3  5
//          +----------------- loss
//            1 2 3     5  6
//
// 2 (3, 7) is dominated by 1 (2, 6); 5 (6, 2) by 3 (5, 2) (equal size, larger loss);
// 4 duplicates 1, so neither dominates the other. Front {0, 1, 3, 4}.
const std::vector<std::vector<double>> k2d = {{1, 10}, {2, 6}, {3, 7}, {5, 2}, {2, 6}, {6, 2}};

TEST(Pareto, FrontIn2DWithDuplicatesAndDominatedPoints) {
  auto f = ParetoFront(k2d);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(*f, (std::vector<size_t>{0, 1, 3, 4}));
}

TEST(Pareto, RankIn2D) {
  // Normalization over all 6 candidates: loss min 1, max 6 (range 5); size min 2, max 10 (range 8).
  //   0: (0, 100)                 distance 100
  //   1: (20, 50)                 distance sqrt(400 + 2500) = sqrt(2900) = 53.85...
  //   3: (80, 0)                  distance 80
  //   4: = 1                      distance sqrt(2900), tie with 1, later index
  // Order: 1, 4, 3, 0; top-3 is 1, 4, 3.
  auto r = RankPareto(k2d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Candidates(*r), (std::vector<size_t>{1, 4, 3}));
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].rank, 1);
  EXPECT_EQ((*r)[1].rank, 2);
  EXPECT_EQ((*r)[2].rank, 3);
  EXPECT_DOUBLE_EQ((*r)[0].normalized[0], 20);
  EXPECT_DOUBLE_EQ((*r)[0].normalized[1], 50);
  EXPECT_DOUBLE_EQ((*r)[0].distance, std::sqrt(2900.0));
  EXPECT_EQ((*r)[1].distance, (*r)[0].distance);
  EXPECT_DOUBLE_EQ((*r)[2].normalized[0], 80);
  EXPECT_DOUBLE_EQ((*r)[2].normalized[1], 0);
  EXPECT_DOUBLE_EQ((*r)[2].distance, 80);

  auto all = RankPareto(k2d, 0);  // 0 = whole front
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Candidates(*all), (std::vector<size_t>{1, 4, 3, 0}));
  EXPECT_EQ(all->back().rank, 4);
  EXPECT_DOUBLE_EQ(all->back().normalized[1], 100);
  EXPECT_DOUBLE_EQ(all->back().distance, 100);
  EXPECT_EQ(Candidates(*RankPareto(k2d, 1)), (std::vector<size_t>{1}));
}

TEST(Pareto, RankIn3D) {
  // (loss, size, latency):
  //   0 (1, 1, 5)   1 (1, 1, 5) duplicate of 0
  //   2 (2, 2, 1)   on the front only through latency
  //   3 (2, 2, 6)   dominated by 0
  //   4 (0, 3, 5)   on the front through loss
  // Ranges: loss [0, 2], size [1, 3], latency [1, 6].
  //   0: (50, 0, 80)   distance sqrt(2500 + 6400)  = sqrt(8900)  = 94.34
  //   1: same as 0
  //   2: (100, 50, 0)  distance sqrt(10000 + 2500) = sqrt(12500) = 111.80
  //   4: (0, 100, 80)  distance sqrt(10000 + 6400) = sqrt(16400) = 128.06
  const std::vector<std::vector<double>> o = {{1, 1, 5}, {1, 1, 5}, {2, 2, 1}, {2, 2, 6}, {0, 3, 5}};
  EXPECT_EQ(*ParetoFront(o), (std::vector<size_t>{0, 1, 2, 4}));
  auto r = RankPareto(o, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Candidates(*r), (std::vector<size_t>{0, 1, 2, 4}));
  EXPECT_EQ((*r)[0].normalized, (std::vector<double>{50, 0, 80}));
  EXPECT_DOUBLE_EQ((*r)[0].distance, std::sqrt(8900.0));
  EXPECT_EQ((*r)[2].normalized, (std::vector<double>{100, 50, 0}));
  EXPECT_DOUBLE_EQ((*r)[2].distance, std::sqrt(12500.0));
  EXPECT_EQ((*r)[3].normalized, (std::vector<double>{0, 100, 80}));
  EXPECT_DOUBLE_EQ((*r)[3].distance, std::sqrt(16400.0));
}

TEST(Pareto, ConstantObjectiveNormalizesToZero) {
  // Latency 7 everywhere. (loss, size): 0 (0, 4), 1 (1, 1), 2 (2, 2) dominated by 1, 3 (4, 0).
  // Loss and size both range over [0, 4]:
  //   0: (0, 100, 0)   distance 100
  //   1: (25, 25, 0)   distance sqrt(625 + 625) = 35.36
  //   3: (100, 0, 0)   distance 100, tie with 0 -> index order
  const std::vector<std::vector<double>> o = {{0, 4, 7}, {1, 1, 7}, {2, 2, 7}, {4, 0, 7}};
  auto r = RankPareto(o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Candidates(*r), (std::vector<size_t>{1, 0, 3}));
  for (const auto& e : *r) EXPECT_EQ(e.normalized[2], 0.0);
  EXPECT_DOUBLE_EQ((*r)[0].distance, std::sqrt(1250.0));
  EXPECT_DOUBLE_EQ((*r)[1].distance, 100);
  EXPECT_DOUBLE_EQ((*r)[2].distance, 100);

  // Every objective constant: all candidates are duplicates, all on the front at distance 0.
  auto same = RankPareto({{3, 3}, {3, 3}, {3, 3}, {3, 3}}, 0);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(Candidates(*same), (std::vector<size_t>{0, 1, 2, 3}));
  for (const auto& e : *same) EXPECT_EQ(e.distance, 0.0);
}

TEST(Pareto, SingleAndNoCandidates) {
  auto one = RankPareto({{0.5, 1e6}});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].rank, 1);
  EXPECT_EQ((*one)[0].normalized, (std::vector<double>{0, 0}));
  EXPECT_EQ((*one)[0].distance, 0.0);
  EXPECT_TRUE(ParetoFront({})->empty());
  EXPECT_TRUE(RankPareto({})->empty());
}

TEST(Pareto, RejectsBadObjectives) {
  auto r = ParetoFront({{1, 2}, {1}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "Pareto: candidate 1 has 1 objectives, candidate 0 has 2");
  auto n = RankPareto({{1, 2}, {std::numeric_limits<double>::quiet_NaN(), 0}});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().message, "Pareto: objective 0 of candidate 1 is not finite");
  EXPECT_FALSE(ParetoFront({{1}, {std::numeric_limits<double>::infinity()}}).ok());
  EXPECT_FALSE(ParetoFront({{}, {}}).ok());
}

TEST(Pareto, FrontIsExactlyTheNonDominatedSetOnRandomData) {
  // Property check on random integer grids (many ties and duplicates): every front
  // member is dominated by nobody, every other candidate by some front member.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> d(0, 4);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::vector<double>> o(12, std::vector<double>(3));
    for (auto& v : o)
      for (double& x : v) x = d(rng);
    auto f = ParetoFront(o);
    ASSERT_TRUE(f.ok());
    std::vector<bool> on(o.size(), false);
    for (size_t i : *f) on[i] = true;
    for (size_t i = 0; i < o.size(); ++i) {
      bool dominated_by_front = false, dominated = false;
      for (size_t j = 0; j < o.size(); ++j) {
        dominated |= Dominates(o[j], o[i]);
        dominated_by_front |= on[j] && Dominates(o[j], o[i]);
      }
      EXPECT_EQ(on[i], !dominated) << "trial " << trial << " candidate " << i;
      if (!on[i]) {
        EXPECT_TRUE(dominated_by_front);
      }
    }
    auto r = RankPareto(o, 0);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->size(), f->size());
    for (size_t k = 1; k < r->size(); ++k) {
      const auto& a = (*r)[k - 1];
      const auto& b = (*r)[k];
      EXPECT_TRUE(a.distance < b.distance || (a.distance == b.distance && a.candidate < b.candidate));
    }
  }
}

}  // namespace
}  // namespace seqto
