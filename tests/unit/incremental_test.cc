// Incremental evaluation of edited plans (quant/analysis/incremental.h) on the
// bundled ResNet: the downstream part fed with the base's values computes what the
// whole edited plan computes.
//   - reference kernels, no graph optimization: bit-identical outputs;
//   - the engine's default sessions (fusion, int8 kernels): the output loss agrees
//     within 1e-6 of the full model's loss (relative), the tolerance the analysis
//     tests already allow between the analysis and plans run by hand.
#include "quant/analysis/incremental.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

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
  std::set<std::string> all;
};

Fixture& Get() {
  static Fixture* f = [] {
    const testing::CalibratedResnet& r = testing::DefaultResnetPlan();
    EXPECT_TRUE(r.plan) << "the bundled ResNet must quantize";
    auto* f = new Fixture{r.prepared, r.plan.get(), r.input, {}};
    if (f->plan)
      for (const auto& g : f->plan->groups()) f->all.insert(g.name);
    return f;
  }();
  return *f;
}

runtime::SessionOptions Reference() {
  runtime::SessionOptions so;
  so.threads = 1;
  so.optimize = false;
  so.reference_only = true;
  return so;
}

// The edits the analysis makes: revert one group of the full quantization, and
// quantize one group of the float model.
std::vector<std::pair<std::set<std::string>, std::set<std::string>>> Edits() {
  Fixture& f = Get();
  std::vector<std::pair<std::set<std::string>, std::set<std::string>>> edits;
  // Every third group (the reference kernels are slow): early, middle and late ones.
  for (size_t i = 0; i < f.plan->groups().size(); i += 3) {
    const QuantGroup& g = f.plan->groups()[i];
    edits.push_back({{}, {g.name}});
    std::set<std::string> others = f.all;
    others.erase(g.name);
    edits.push_back({f.all, others});
  }
  return edits;
}

TEST(Incremental, DownstreamPartGivesTheWholePlansOutputsBitIdentically) {
  Fixture& f = Get();
  const std::string out_name = f.prepared.graph.outputs[0].name;
  size_t smaller = 0;
  for (const auto& [base, trial] : Edits()) {
    auto base_model = f.plan->Materialize(base);
    auto trial_model = f.plan->Materialize(trial);
    ASSERT_TRUE(base_model.ok() && trial_model.ok());
    auto part = CutDownstream(*base_model, *trial_model);
    ASSERT_TRUE(part.ok()) << part.error().message;
    ASSERT_GT(part->nodes, 0u);
    if (part->nodes < trial_model->graph.nodes.size()) ++smaller;

    runtime::SessionOptions keep = Reference();
    keep.keep_values.insert(part->cut.begin(), part->cut.end());
    runtime::TensorMap kept;
    runtime::RunHooks hooks;
    hooks.observe = [&](const std::string& name, const Tensor& v) {
      if (keep.keep_values.count(name)) kept[name] = v;
    };
    auto base_out = (*runtime::Session::Create(*base_model, keep))->Run({{"input", f.input}}, &hooks);
    ASSERT_TRUE(base_out.ok());
    runtime::TensorMap feeds;
    for (const auto& c : part->cut) {
      ASSERT_TRUE(kept.count(c)) << c;
      feeds[c] = kept[c];
    }
    auto part_session = runtime::Session::Create(part->model, Reference());
    ASSERT_TRUE(part_session.ok()) << part_session.error().message;
    auto part_out = (*part_session)->Run(feeds);
    ASSERT_TRUE(part_out.ok()) << part_out.error().message;
    auto whole = (*runtime::Session::Create(*trial_model, Reference()))->Run({{"input", f.input}});
    ASSERT_TRUE(whole.ok());
    const Tensor& a = part_out->at(out_name);
    const Tensor& b = whole->at(out_name);
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "trial excluding " << trial.size() << " groups";
  }
  // Reverting a late group must leave the early layers out of the part.
  EXPECT_GT(smaller, Edits().size() / 4);
}

// The whole plan's output loss on the 8 samples, with `so`.
double WholeLoss(const std::set<std::string>& excluded, const runtime::SessionOptions& so) {
  Fixture& f = Get();
  const std::string out_name = f.prepared.graph.outputs[0].name;
  auto ref = (*runtime::Session::Create(f.prepared, so))->Run({{"input", f.input}});
  auto out = (*runtime::Session::Create(*f.plan->Materialize(excluded), so))->Run({{"input", f.input}});
  SqnrAccumulator acc;
  EXPECT_TRUE(acc.Add(ref->at(out_name), out->at(out_name)).ok());
  return OutputLoss(acc.signal_sumsq(), acc.noise_sumsq());
}

void ExpectLossesMatch(const runtime::SessionOptions& so, double rel_tol, int workers) {
  Fixture& f = Get();
  auto ref = (*runtime::Session::Create(f.prepared, so))->Run({{"input", f.input}});
  ASSERT_TRUE(ref.ok());
  // Chunks of 3 samples: 3 + 3 + 2.
  const std::vector<runtime::TensorMap> chunks = Rechunk({{{"input", f.input}}}, 3);
  const std::vector<runtime::TensorMap> refs = Rechunk({*ref}, 3);
  ASSERT_EQ(chunks.size(), 3u);
  for (const std::set<std::string>& base : {std::set<std::string>{}, f.all}) {
    std::vector<std::set<std::string>> trials;
    for (size_t k = 0; k < f.plan->groups().size(); k += so.reference_only ? 3 : 1) {
      const QuantGroup& g = f.plan->groups()[k];
      trials.push_back(base);
      if (base.count(g.name))
        trials.back().erase(g.name);
      else
        trials.back().insert(g.name);
    }
    IncrementalOptions io;
    io.session = so;
    io.workers = workers;
    size_t used = 0;
    auto losses = IncrementalLosses(*f.plan, base, trials, chunks, refs, io, &used);
    ASSERT_TRUE(losses.ok()) << losses.error().message;
    EXPECT_EQ(used, 3u);
    for (size_t i = 0; i < trials.size(); ++i) {
      const double whole = WholeLoss(trials[i], so);
      EXPECT_NEAR((*losses)[i], whole, rel_tol * whole)
          << "trial " << i << (base.empty() ? " (revert)" : " (isolated)");
    }
  }
}

TEST(Incremental, LossesEqualTheWholePlansWithReferenceKernels) {
  // Only the order of the double sums differs (per chunk, then over chunks).
  ExpectLossesMatch(Reference(), 1e-12, 2);
}

TEST(Incremental, LossesAgreeWithTheWholePlansWithTheEnginesKernels) {
  runtime::SessionOptions so;
  so.threads = 1;
  ExpectLossesMatch(so, 1e-6, 1);
}

TEST(Incremental, AfterChunkStopsEarly) {
  Fixture& f = Get();
  const std::vector<runtime::TensorMap> chunks = Rechunk({{{"input", f.input}}}, 2);
  auto ref = (*runtime::Session::Create(f.prepared, Reference()))->Run({{"input", f.input}});
  const std::vector<runtime::TensorMap> refs = Rechunk({*ref}, 2);
  ASSERT_EQ(chunks.size(), 4u);
  IncrementalOptions io;
  io.session = Reference();
  std::vector<size_t> seen;
  io.after_chunk = [&](size_t done, const std::vector<double>& l) {
    seen.push_back(done);
    EXPECT_EQ(l.size(), 1u);
    return done == 2;
  };
  size_t used = 0;
  const std::string g = f.plan->groups().front().name;
  auto losses = IncrementalLosses(*f.plan, {}, {{g}}, chunks, refs, io, &used);
  ASSERT_TRUE(losses.ok());
  EXPECT_EQ(used, 2u);
  EXPECT_EQ(seen, (std::vector<size_t>{1, 2}));
  // The loss of the first 4 samples only.
  const std::vector<runtime::TensorMap> first = {chunks[0], chunks[1]};
  const std::vector<runtime::TensorMap> first_refs = {refs[0], refs[1]};
  io.after_chunk = nullptr;
  auto again = IncrementalLosses(*f.plan, {}, {{g}}, first, first_refs, io);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*losses)[0], (*again)[0]);
}

// The analysis with and without the incremental path finds the same searches' orders
// (all samples: stable_chunks = 0) and the same losses up to the tolerance above.
TEST(Incremental, AnalysisOrdersEqualTheWholePlanAnalysis) {
  Fixture& f = Get();
  BatchList list;
  list.num_batches = 1;
  list.get = [&](size_t) -> Expected<runtime::TensorMap> { return runtime::TensorMap{{"input", Get().input}}; };
  AnalysisOptions o;
  o.threads = 2;
  o.greedy_steps = 3;
  o.stable_chunks = 0;
  o.chunk_samples = 3;
  auto inc = Analyze(*f.plan, list, o);
  ASSERT_TRUE(inc.ok()) << inc.error().message;
  o.incremental = false;
  auto whole = Analyze(*f.plan, list, o);
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(inc->sensitivity_samples, 8u);
  EXPECT_EQ(inc->plan_evaluations, whole->plan_evaluations);
  ASSERT_EQ(inc->greedy.size(), whole->greedy.size());
  for (size_t i = 0; i < inc->greedy.size(); ++i) {
    EXPECT_EQ(inc->greedy[i].group, whole->greedy[i].group) << i;
    EXPECT_NEAR(inc->greedy[i].loss, whole->greedy[i].loss, 1e-6 * whole->greedy[i].loss) << i;
  }
  ASSERT_EQ(inc->backward.size(), whole->backward.size());
  for (size_t i = 0; i < inc->backward.size(); ++i) EXPECT_EQ(inc->backward[i].group, whole->backward[i].group) << i;
  for (size_t g = 0; g < inc->groups.size(); ++g)
    EXPECT_NEAR(inc->groups[g].sensitivity_isolated, whole->groups[g].sensitivity_isolated,
                1e-6 * whole->groups[g].sensitivity_isolated);
}

// A forward step's base (one group reverted): the base runs as it would alone, so its
// fused kernels compute the values it hands over exactly as in the whole trial plan.
TEST(Incremental, LossesAgreeOnAForwardStepsBase) {
  Fixture& f = Get();
  runtime::SessionOptions so;
  so.threads = 1;
  auto ref = (*runtime::Session::Create(f.prepared, so))->Run({{"input", f.input}});
  const std::vector<runtime::TensorMap> chunks = Rechunk({{{"input", f.input}}}, 3);
  const std::vector<runtime::TensorMap> refs = Rechunk({*ref}, 3);
  for (size_t b = 0; b < f.plan->groups().size(); b += 5) {
    std::set<std::string> base = {f.plan->groups()[b].name};
    std::vector<std::set<std::string>> trials;
    for (const auto& g : f.plan->groups()) {
      trials.push_back(base);
      trials.back().insert(g.name);
    }
    IncrementalOptions io;
    io.session = so;
    auto losses = IncrementalLosses(*f.plan, base, trials, chunks, refs, io);
    ASSERT_TRUE(losses.ok()) << losses.error().message;
    for (size_t i = 0; i < trials.size(); ++i) {
      const double whole = WholeLoss(trials[i], so);
      EXPECT_NEAR((*losses)[i], whole, 1e-6 * whole) << "base " << b << " trial " << i;
    }
  }
}

}  // namespace
}  // namespace seqto::quant
