// Layer analysis on the bundled ResNet: each metric equals an independent
// computation, and streaming over batches gives the same result as one batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/npy.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/analysis/analyze.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "quantized_examples.h"
#include "runtime/session.h"

namespace seqto::quant {
namespace {

struct Fixture {
  const ir::Model& prepared;
  const QuantPlan* plan;
  const Tensor& input;  // [8,1,28,28]
};

Fixture& Get() {
  static Fixture* f = [] {
    const testing::CalibratedResnet& r = testing::DefaultResnetPlan();
    EXPECT_TRUE(r.plan) << "the bundled ResNet must quantize";
    return new Fixture{r.prepared, r.plan.get(), r.input};
  }();
  return *f;
}

// Rows [begin, end) of the sample input.
runtime::TensorMap Rows(const Tensor& t, int64_t begin, int64_t end) {
  Shape s = t.shape();
  s[0] = end - begin;
  Tensor out(t.dtype(), s);
  const size_t row = t.nbytes() / t.dim(0);
  std::memcpy(out.raw(), static_cast<const std::byte*>(t.raw()) + begin * row, out.nbytes());
  return {{"input", out}};
}

BatchList Batches(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  BatchList list;
  list.num_batches = ranges.size();
  list.get = [ranges](size_t i) -> Expected<runtime::TensorMap> {
    return Rows(Get().input, ranges[i].first, ranges[i].second);
  };
  return list;
}

TEST(Analysis, WeightSqnrEqualsTheSchemeComputedIndependently) {
  Fixture& f = Get();
  AnalysisOptions o;
  o.sensitivity = false;
  o.threads = 1;
  auto a = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  int checked = 0;
  for (size_t g = 0; g < a->groups.size(); ++g) {
    const QuantGroup& group = f.plan->groups()[g];
    if (group.op_type != "Conv" || group.weights.empty()) continue;
    // The weight as the scheme quantizes it: per-tensor symmetric int8 (ORT's default).
    const Tensor& w = f.prepared.graph.initializers.at(group.weights[0]);
    RangeOptions ro;
    ro.type = QuantType::kInt8;
    ro.symmetric = true;
    auto params = ComputeWeightParams(w, ro, std::nullopt, group.weights[0]);
    ASSERT_TRUE(params.ok());
    const Tensor deq = *DequantizeTensor(*QuantizeTensor(w, *params), *params);
    const double expected = SqnrDb(w.data<float>(), deq.data<float>(), static_cast<size_t>(w.numel()));
    // The analysis dequantizes in double, DequantizeTensor in float32: equal to ~1e-5 dB.
    EXPECT_NEAR(a->groups[g].weight_sqnr_db, expected, 1e-4) << group.name;
    // Quantization noise is real but small: 8-bit weights give roughly 35-50 dB.
    EXPECT_GT(a->groups[g].weight_sqnr_db, 30);
    EXPECT_LT(a->groups[g].weight_sqnr_db, 60);
    ++checked;
  }
  EXPECT_GE(checked, 10);
  for (const auto& g : a->groups) {
    // Every group of ResNet has a quantized activation; xmodel error includes the
    // group's own qdq error plus everything upstream, so it is never better by much.
    ASSERT_TRUE(std::isfinite(g.qdq_sqnr_db)) << g.name;
    ASSERT_TRUE(std::isfinite(g.xmodel_sqnr_db)) << g.name;
    EXPECT_LE(g.xmodel_sqnr_db, g.qdq_sqnr_db + 3) << g.name;
    EXPECT_GE(g.seqto_score, 0);
    EXPECT_LE(g.seqto_score, 1);
  }
}

TEST(Analysis, StreamingOverBatchesEqualsOneBatch) {
  Fixture& f = Get();
  AnalysisOptions o;
  o.sensitivity = false;
  o.threads = 1;
  auto whole = Analyze(*f.plan, Batches({{0, 8}}), o);
  auto split = Analyze(*f.plan, Batches({{0, 3}, {3, 8}}), o);
  ASSERT_TRUE(whole.ok() && split.ok());
  ASSERT_EQ(whole->groups.size(), split->groups.size());
  for (size_t g = 0; g < whole->groups.size(); ++g) {
    EXPECT_NEAR(whole->groups[g].qdq_sqnr_db, split->groups[g].qdq_sqnr_db, 1e-6) << whole->groups[g].name;
    EXPECT_NEAR(whole->groups[g].xmodel_sqnr_db, split->groups[g].xmodel_sqnr_db, 1e-6) << whole->groups[g].name;
  }
  EXPECT_EQ(split->samples, 8u);
}

TEST(Analysis, SensitivityMatchesTheEditedPlansRunByHand) {
  Fixture& f = Get();
  AnalysisOptions o;
  o.threads = 2;
  auto a = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto ref = (*runtime::Session::Create(f.prepared))->Run({{"input", f.input}});
  ASSERT_TRUE(ref.ok());
  const Tensor& y = ref->at(f.prepared.graph.outputs[0].name);
  auto loss_of = [&](const std::set<std::string>& excluded) {
    auto model = f.plan->Materialize(excluded);
    auto out = (*runtime::Session::Create(*model))->Run({{"input", f.input}});
    SqnrAccumulator acc;
    EXPECT_TRUE(acc.Add(y, out->at(f.prepared.graph.outputs[0].name)).ok());
    return OutputLoss(acc.signal_sumsq(), acc.noise_sumsq());
  };
  std::set<std::string> all;
  for (const auto& g : f.plan->groups()) all.insert(g.name);
  const double full = loss_of({});
  for (size_t g : {size_t{0}, a->groups.size() / 2, a->groups.size() - 1}) {
    const std::string& name = a->groups[g].name;
    std::set<std::string> others = all;
    others.erase(name);
    EXPECT_NEAR(a->groups[g].sensitivity_isolated, loss_of(others), 1e-9 + 1e-6 * full) << name;
    EXPECT_NEAR(a->groups[g].sensitivity_revert_one, full - loss_of({name}), 1e-9 + 1e-6 * full) << name;
  }
}

// Output loss of the plan with `excluded` reverted to float, run by hand on the 8
// samples (multi-threaded sessions: equal to the analysis's up to rounding).
double HandLoss(const std::set<std::string>& excluded) {
  Fixture& f = Get();
  static const Tensor y =
      (*(*runtime::Session::Create(f.prepared))->Run({{"input", f.input}})).at(f.prepared.graph.outputs[0].name);
  auto model = f.plan->Materialize(excluded);
  EXPECT_TRUE(model.ok());
  auto out = (*runtime::Session::Create(*model))->Run({{"input", f.input}});
  SqnrAccumulator acc;
  EXPECT_TRUE(acc.Add(y, out->at(f.prepared.graph.outputs[0].name)).ok());
  return OutputLoss(acc.signal_sumsq(), acc.noise_sumsq());
}

// One step of a search redone by hand: the loss of every candidate plan; the search's
// choice must be the hand minimum up to rounding (and the very group when the
// runner-up is clearly worse), and its recorded loss that of its plan.
void ExpectHandMinimum(const std::map<std::string, double>& hand, const std::string& chosen, double recorded,
                       double tol, const std::string& what) {
  ASSERT_TRUE(hand.count(chosen)) << what << ": '" << chosen << "' was not a candidate";
  double best = std::numeric_limits<double>::infinity(), second = best;
  std::string best_name;
  for (const auto& [name, l] : hand) {
    if (l < best) {
      second = best, best = l, best_name = name;
    } else if (l < second) {
      second = l;
    }
  }
  EXPECT_NEAR(recorded, hand.at(chosen), tol) << what;
  EXPECT_NEAR(recorded, best, tol) << what << ": chose " << chosen << ", by hand " << best_name;
  if (second - best > 2 * tol) {
    EXPECT_EQ(chosen, best_name) << what;
  }
}

// Greedy forward selection redone by hand with Materialize: at each step every group
// not yet reverted is reverted in turn, the lowest output loss wins.
TEST(Analysis, GreedyOrderMatchesABruteForceGreedyByHand) {
  Fixture& f = Get();
  const double full = HandLoss({});
  ASSERT_GT(full, 0);
  const double tol = 1e-9 + 1e-6 * full;
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 3;
  o.backward = false;
  o.search_candidates = 0;  // every group is a candidate
  auto a = Analyze(*f.plan, Batches({{0, 3}, {3, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->greedy.size(), 3u);
  EXPECT_TRUE(a->backward.empty());
  EXPECT_NEAR(a->sensitivity_full_loss, full, tol);
  std::set<std::string> reverted;
  for (size_t step = 0; step < a->greedy.size(); ++step) {
    std::map<std::string, double> hand;
    for (const auto& g : f.plan->groups()) {
      if (reverted.count(g.name)) continue;
      std::set<std::string> trial = reverted;
      trial.insert(g.name);
      hand[g.name] = HandLoss(trial);
    }
    ExpectHandMinimum(hand, a->greedy[step].group, a->greedy[step].loss, tol, "step " + std::to_string(step + 1));
    reverted.insert(a->greedy[step].group);  // follow the analysis's path
  }
  EXPECT_EQ(reverted.size(), 3u);
  // The first step is the revert-one maximum (the same edited plans).
  double max_revert = -1;
  for (const auto& g : a->groups) max_revert = std::max(max_revert, g.sensitivity_revert_one);
  EXPECT_NEAR(a->greedy[0].loss, full - max_revert, tol);
}

// Backward elimination redone by hand with Materialize: every round quantizes in turn
// each group still float, the lowest output loss goes. With 12 steps the exact phase
// starts at 13 groups left, so on ResNet's 13 every round takes one group.
TEST(Analysis, BackwardOrderMatchesABruteForceEliminationByHand) {
  Fixture& f = Get();
  const size_t n = f.plan->groups().size();
  ASSERT_EQ(n, 13u);
  const double tol = 1e-9 + 1e-6 * HandLoss({});
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 12;
  o.search_candidates = 0;
  auto a = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->backward.size(), n);
  std::set<std::string> floating;  // still float
  for (const auto& g : f.plan->groups()) floating.insert(g.name);
  // Round r quantizes the group at position n - r (1-based); the loss after it, with
  // n - r - 1 groups float, is recorded at position n - r - 1.
  for (size_t r = 0; r + 1 < n; ++r) {
    std::map<std::string, double> hand;
    for (const auto& name : floating) {
      std::set<std::string> trial = floating;
      trial.erase(name);
      hand[name] = HandLoss(trial);
    }
    const SearchStep& chosen = a->backward[n - 1 - r];
    ExpectHandMinimum(hand, chosen.group, a->backward[n - 2 - r].loss, tol, "round " + std::to_string(r + 1));
    ASSERT_TRUE(floating.count(chosen.group));
    floating.erase(chosen.group);
  }
  ASSERT_EQ(floating.size(), 1u);
  EXPECT_EQ(a->backward[0].group, *floating.begin());
  EXPECT_EQ(a->backward[n - 1].loss, 0.0);  // everything reverted: the float model
  // The first round is the isolated pass: the least damaging group goes last.
  size_t least = 0;
  for (size_t g = 1; g < n; ++g)
    if (a->groups[g].sensitivity_isolated < a->groups[least].sensitivity_isolated) least = g;
  EXPECT_EQ(a->backward[n - 1].group, a->groups[least].name);
}

TEST(Analysis, BackwardTakesHalvesFarFromTheFront) {
  Fixture& f = Get();
  const size_t n = f.plan->groups().size();
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 2;  // exact phase from 3 groups left: 13 -> 7 -> 4 -> 3 -> 2 -> 1
  o.search_candidates = 0;
  auto a = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->backward.size(), n);
  std::set<std::string> names;
  for (const auto& s : a->backward) names.insert(s.group);
  EXPECT_EQ(names.size(), n);  // a permutation
  // Measured: the plans with 1, 2 and 3 groups float; not the halves' plans.
  for (size_t k = 1; k <= n; ++k) {
    const double l = a->backward[k - 1].loss;
    if (k <= 3)
      EXPECT_TRUE(std::isfinite(l)) << k;
    else if (k < n)
      EXPECT_TRUE(std::isnan(l)) << k;
    else
      EXPECT_EQ(l, 0.0);
  }
  // The first half taken (6 of 13) is the 6 lowest isolated losses, the lowest last.
  std::vector<std::pair<double, std::string>> iso;
  for (const auto& g : a->groups) iso.push_back({g.sensitivity_isolated, g.name});
  std::sort(iso.begin(), iso.end());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a->backward[n - 1 - i].group, iso[i].second) << i;
  // The hand minimum of the exact phase's first round (4 groups float).
  std::set<std::string> floating;
  for (size_t k = 0; k < 4; ++k) floating.insert(a->backward[k].group);
  std::map<std::string, double> hand;
  for (const auto& name : floating) {
    std::set<std::string> trial = floating;
    trial.erase(name);
    hand[name] = HandLoss(trial);
  }
  ExpectHandMinimum(hand, a->backward[3].group, a->backward[2].loss, 1e-9 + 1e-6 * HandLoss({}), "exact round 1");
}

// The searches choose among the groups with the largest isolated loss only: forward
// selection is the brute-force greedy over those candidates, and backward
// elimination quantizes every other group in its first round (least damaging
// last in the order), then eliminates the candidates one by one.
TEST(Analysis, SearchesChooseAmongTheCandidates) {
  Fixture& f = Get();
  const size_t n = f.plan->groups().size();
  ASSERT_EQ(n, 13u);
  const double tol = 1e-9 + 1e-6 * HandLoss({});
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 3;
  o.search_candidates = 5;
  auto a = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(a.ok()) << a.error().message;
  std::vector<std::pair<double, std::string>> iso;
  for (const auto& g : a->groups) iso.push_back({g.sensitivity_isolated, g.name});
  std::sort(iso.rbegin(), iso.rend());  // most damaging first
  std::set<std::string> candidates;
  for (size_t i = 0; i < 5; ++i) candidates.insert(iso[i].second);

  ASSERT_EQ(a->greedy.size(), 3u);
  std::set<std::string> reverted;
  for (size_t step = 0; step < a->greedy.size(); ++step) {
    std::map<std::string, double> hand;
    for (const auto& name : candidates) {
      if (reverted.count(name)) continue;
      std::set<std::string> trial = reverted;
      trial.insert(name);
      hand[name] = HandLoss(trial);
    }
    ExpectHandMinimum(hand, a->greedy[step].group, a->greedy[step].loss, tol, "step " + std::to_string(step + 1));
    reverted.insert(a->greedy[step].group);
  }

  ASSERT_EQ(a->backward.size(), n);
  std::set<std::string> front;
  for (size_t k = 0; k < 5; ++k) front.insert(a->backward[k].group);
  EXPECT_EQ(front, candidates);
  for (size_t k = 6; k <= n; ++k) {
    EXPECT_EQ(a->backward[k - 1].group, iso[k - 1].second) << k;  // by isolated loss
    if (k < n) {
      EXPECT_TRUE(std::isnan(a->backward[k - 1].loss)) << k;
    }
  }
  // One candidate per round from 4 float (greedy_steps + 1): positions 1-4 measured.
  for (size_t k = 1; k <= 4; ++k) EXPECT_TRUE(std::isfinite(a->backward[k - 1].loss)) << k;
  std::map<std::string, double> hand;
  for (const auto& name : candidates) {
    std::set<std::string> trial = candidates;
    trial.erase(name);
    hand[name] = HandLoss(trial);
  }
  ExpectHandMinimum(hand, a->backward[4].group, a->backward[3].loss, tol, "backward round 2");

  // Isolated 13 + revert-one 13 + forward steps 2-3 (4 + 3) + backward 5 + 4 + 3 + 2.
  EXPECT_EQ(a->plan_evaluations, 47u);
}

TEST(Analysis, SearchProgressCountsEveryRun) {
  Fixture& f = Get();
  for (const auto& [steps, revert_one, pool] : std::vector<std::tuple<size_t, bool, size_t>>{
           {8, true, 12}, {2, false, 12}, {0, true, 12}, {3, false, 5}, {8, true, 0}}) {
    AnalysisOptions o;
    o.threads = 2;
    o.greedy_steps = steps;
    o.revert_one = revert_one;
    o.search_candidates = pool;
    size_t last_done = 0, last_total = 0, calls = 0;
    o.progress = [&](size_t done, size_t total) {
      EXPECT_LE(done, total);
      last_done = done, last_total = total, ++calls;
    };
    auto a = Analyze(*f.plan, Batches({{0, 4}, {4, 8}}), o);
    ASSERT_TRUE(a.ok()) << a.error().message;
    EXPECT_EQ(last_done, last_total) << steps;
    EXPECT_EQ(calls, last_total) << steps;  // one call per batch or plan run
  }
}

TEST(Analysis, GreedyWithoutRevertOneAndToTheEnd) {
  Fixture& f = Get();
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 4;
  auto with = Analyze(*f.plan, Batches({{0, 8}}), o);
  o.revert_one = false;  // the first step is then measured by the forward pass itself
  auto without = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(with.ok() && without.ok());
  ASSERT_EQ(with->greedy.size(), without->greedy.size());
  for (size_t i = 0; i < with->greedy.size(); ++i) {
    EXPECT_EQ(with->greedy[i].group, without->greedy[i].group) << i;
    EXPECT_DOUBLE_EQ(with->greedy[i].loss, without->greedy[i].loss) << i;  // single-threaded sessions: exact
  }
  EXPECT_TRUE(std::isnan(without->groups[0].sensitivity_revert_one));

  // More steps than groups: every group once, ending at the float model (loss 0).
  o.greedy_steps = 1000;
  o.search_candidates = 0;
  auto all = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->greedy.size(), f.plan->groups().size());
  std::set<std::string> names;
  for (const auto& step : all->greedy) names.insert(step.group);
  EXPECT_EQ(names.size(), f.plan->groups().size());
  EXPECT_NEAR(all->greedy.back().loss, 0.0, 1e-12);
  ASSERT_EQ(all->backward.size(), f.plan->groups().size());
  EXPECT_EQ(all->backward.back().loss, 0.0);

  // No steps, no backward, or no sensitivity: no search.
  o.greedy_steps = 0;
  auto none = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->greedy.empty());
  EXPECT_TRUE(none->backward.empty());
  o.greedy_steps = 8;
  o.backward = false;
  auto forward_only = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(forward_only.ok());
  EXPECT_EQ(forward_only->greedy.size(), 8u);
  EXPECT_TRUE(forward_only->backward.empty());
  o.sensitivity = false;
  auto off = Analyze(*f.plan, Batches({{0, 8}}), o);
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->greedy.empty());
  EXPECT_TRUE(off->backward.empty());
  EXPECT_TRUE(std::isnan(off->sensitivity_full_loss));
}

}  // namespace
}  // namespace seqto::quant
