// Layer analysis on the bundled ResNet: each metric equals an independent
// computation, and streaming over batches gives the same result as one batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/npy.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/analysis/analyze.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "runtime/session.h"

namespace seqto::quant {
namespace {

const std::string kExample = std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/";

struct Fixture {
  ir::Model prepared;
  std::unique_ptr<QuantPlan> plan;
  Tensor input;  // [8,1,28,28]
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    auto model = onnxio::LoadModel(kExample + "resnet.onnx");
    EXPECT_TRUE(model.ok());
    f->prepared = *QuantPlan::Prepare(*model);
    f->input = *ReadNpy(kExample + "sample_input.npy");
    QuantOptions o;
    auto tensors = QuantPlan::TensorsToCalibrate(f->prepared, o);
    bool done = false;
    BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
      if (done) return false;
      feeds = {{"input", f->input}};
      done = true;
      return true;
    };
    auto stats = Calibrate(f->prepared, *tensors, source, o.calibration_options, 1);
    auto ranges = stats->Ranges(o.calibration);
    f->plan = std::make_unique<QuantPlan>(*QuantPlan::Create(f->prepared, o, &*ranges));
    return f;
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

}  // namespace
}  // namespace seqto::quant
