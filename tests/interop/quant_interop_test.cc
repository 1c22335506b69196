// Quantized models against ONNX Runtime: the bundled Fashion-MNIST models quantized
// by seqto (static per tensor, static per channel, dynamic, int16 activations, some
// groups excluded or widened to int16/float16) must pass the ONNX checker, run in
// ONNX Runtime, and ONNX Runtime's and seqto's top-1 must agree on >= 99.5% of the
// samples. Accuracy against the labels is printed (the numbers of the table).
//
// Data: calibration on 256 training images, evaluation on a seeded subset of the test
// set (SEQTO_QUANT_EVAL_SAMPLES, default 2000; 10000 for the full test set), with the
// models' preprocessing (examples/fashion-mnist/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "data/open_dataset.h"
#include "data/sampling.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "runners/runner.h"
#include "runtime/session.h"
#include "support/fashion_data.h"
#include "support/ort_oracle.h"
#include "support/test_models.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;

const char* kDataDir = "/usr/share/datasets/fashion-mnist/";
using Data = testing::FashionSamples;

Expected<Data> Load(const std::string& images, int64_t samples, uint64_t seed) {
  return testing::LoadFashionSamples(images, samples, seed);
}

const Data& EvalData() {
  static const Data d = [] {
    int64_t n = 2000;
    if (const char* env = std::getenv("SEQTO_QUANT_EVAL_SAMPLES")) n = std::atoll(env);
    auto r = Load("t10k-images-idx3-ubyte.gz", n, 1);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : Data{};
  }();
  return d;
}

const Data& CalibData() {
  static const Data d = [] {
    auto r = Load("train-images-idx3-ubyte.gz", 256, 2);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? *r : Data{};
  }();
  return d;
}

Tensor Rows(const Tensor& x, int64_t begin, int64_t end) {
  Shape shape = x.shape();
  shape[0] = end - begin;
  Tensor out(x.dtype(), shape);
  const size_t row = x.nbytes() / static_cast<size_t>(x.dim(0));
  std::memcpy(out.raw(), static_cast<const std::byte*>(x.raw()) + row * begin, row * (end - begin));
  return out;
}

std::vector<int64_t> Top1(const Tensor& logits) {
  std::vector<int64_t> out;
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const float* p = logits.data<float>();
  for (int64_t i = 0; i < n; ++i) out.push_back(std::max_element(p + i * c, p + (i + 1) * c) - (p + i * c));
  return out;
}

double Accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& labels) {
  size_t ok = 0;
  for (size_t i = 0; i < pred.size(); ++i) ok += pred[i] == labels[i];
  return 100.0 * ok / std::max<size_t>(pred.size(), 1);
}

// The evaluation data in batches of 250: both runtimes see the same batches (dynamic
// quantization's scales depend on the batch).
std::vector<runtime::TensorMap> Batches(const Tensor& x) {
  std::vector<runtime::TensorMap> batches;
  for (int64_t b = 0; b < x.dim(0); b += 250) batches.push_back({{"input", Rows(x, b, std::min(x.dim(0), b + 250))}});
  return batches;
}

Expected<Tensor> RunOn(const std::string& runner, const std::string& path, const Tensor& x) {
  runners::RunnerOptions options;
  options.threads = 1;
  SEQTO_ASSIGN_OR_RETURN(auto r, runners::MakeRunner(runner, options));
  SEQTO_ASSIGN_OR_RETURN(auto out, r->Run(path, Batches(x)));
  auto it = out.find("logits");
  if (it == out.end()) return UserError(runner + ": no output 'logits'");
  return it->second;
}

struct Variant {
  std::string name;
  quant::QuantOptions options;
  size_t exclude_first = 0;  // exclude the first k groups
  quant::Fallback fallback = quant::Fallback::kFloat;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  v.push_back({"static per-tensor", {}, 0, quant::Fallback::kFloat});
  quant::QuantOptions pc;
  pc.per_channel = true;
  v.push_back({"static per-channel", pc, 0, quant::Fallback::kFloat});
  quant::QuantOptions dyn;
  dyn.mode = quant::QuantMode::kDynamic;
  v.push_back({"dynamic", dyn, 0, quant::Fallback::kFloat});
  quant::QuantOptions a16;
  a16.activation_type = quant::QuantType::kInt16;
  v.push_back({"int16 activations", a16, 0, quant::Fallback::kFloat});
  quant::QuantOptions s8;
  s8.activation_type = quant::QuantType::kInt8;
  s8.per_channel = true;
  s8.reduce_range = true;
  s8.calibration = quant::CalibrationMethod::kPercentile;
  v.push_back({"int8 act, per-channel, reduce_range, percentile", s8, 0, quant::Fallback::kFloat});
  v.push_back({"per-channel, 3 groups float", pc, 3, quant::Fallback::kFloat});
  v.push_back({"per-channel, 3 groups int16", pc, 3, quant::Fallback::kInt16});
  v.push_back({"per-channel, 3 groups float16", pc, 3, quant::Fallback::kFloat16});
  return v;
}

class QuantInterop : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantInterop, OnnxRuntimeAgreesWithSeqto) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  if (!fs::exists(std::string(kDataDir) + "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  const std::string name = GetParam();
  const Data& eval = EvalData();
  const Data& calib = CalibData();
  ASSERT_GT(eval.x.numel(), 0);
  ASSERT_GT(calib.x.numel(), 0);

  auto model = onnxio::LoadModel(std::string(SEQTO_SOURCE_DIR) + "/examples/fashion-mnist/" + name + ".onnx");
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto prepared = quant::QuantPlan::Prepare(*model);
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  const fs::path float_path =
      fs::path(::testing::TempDir()) / ("seqto_quant_" + name + "_float_" + std::to_string(::getpid()) + ".onnx");
  ASSERT_TRUE(onnxio::SaveModel(*prepared, float_path.string()).ok());
  auto float_logits = RunOn("engine", float_path.string(), eval.x);
  fs::remove(float_path);
  ASSERT_TRUE(float_logits.ok()) << float_logits.error().message;
  const std::vector<int64_t> float_top1 = Top1(*float_logits);
  std::printf("[%s] float: %.2f%% top-1 on %lld test images\n", name.c_str(), Accuracy(float_top1, eval.labels),
              static_cast<long long>(eval.x.dim(0)));

  // One calibration pass; every variant's ranges come from its statistics.
  std::set<std::string> tensors;
  for (const auto& v : Variants()) {
    auto t = quant::QuantPlan::TensorsToCalibrate(*prepared, v.options);
    ASSERT_TRUE(t.ok()) << t.error().message;
    tensors.insert(t->begin(), t->end());
  }
  int64_t next = 0;
  quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
    if (next >= calib.x.dim(0)) return false;
    feeds["input"] = Rows(calib.x, next, std::min(calib.x.dim(0), next + 16));
    next += 16;
    return true;
  };
  auto stats = quant::Calibrate(*prepared, tensors, source, quant::CalibrationOptions{});
  ASSERT_TRUE(stats.ok()) << stats.error().message;

  for (const Variant& v : Variants()) {
    SCOPED_TRACE(name + ": " + v.name);
    std::optional<quant::TensorRanges> ranges;
    if (v.options.mode == quant::QuantMode::kStatic) {
      auto r = stats->Ranges(v.options.calibration, v.options.calibration_options);
      ASSERT_TRUE(r.ok()) << r.error().message;
      ranges = std::move(*r);
    }
    auto plan = quant::QuantPlan::Create(*prepared, v.options, ranges ? &*ranges : nullptr);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    std::set<std::string> excluded;
    for (size_t g = 0; g < v.exclude_first && g < plan->groups().size(); ++g) excluded.insert(plan->groups()[g].name);
    auto q = plan->Materialize(excluded, v.fallback);
    ASSERT_TRUE(q.ok()) << q.error().message;
    Status check = onnxio::CheckModel(*q);
    ASSERT_TRUE(check.ok()) << check.message();
    const fs::path path =
        fs::path(::testing::TempDir()) / ("seqto_quant_" + name + "_" + std::to_string(::getpid()) + ".onnx");
    ASSERT_TRUE(onnxio::SaveModel(*q, path.string()).ok());
    auto ort_out = RunOn("ort", path.string(), eval.x);
    auto ours = RunOn("engine", path.string(), eval.x);
    fs::remove(path);
    ASSERT_TRUE(ort_out.ok()) << ort_out.error().message;
    ASSERT_TRUE(ours.ok()) << ours.error().message;
    const Tensor& theirs = *ort_out;
    ASSERT_EQ(theirs.shape(), ours->shape());
    const std::vector<int64_t> a = Top1(theirs), b = Top1(*ours);
    size_t agree = 0;
    for (size_t i = 0; i < a.size(); ++i) agree += a[i] == b[i];
    double max_diff = 0;
    const auto ta = theirs.ToDoubles(), tb = ours->ToDoubles();
    for (size_t i = 0; i < ta.size(); ++i) max_diff = std::max(max_diff, std::fabs(ta[i] - tb[i]));
    const double agreement = 100.0 * agree / a.size();
    size_t qdq = 0;
    for (const auto& n : q->graph.nodes)
      qdq += n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "DynamicQuantizeLinear";
    std::printf(
        "[%s] %-48s groups %2zu, Q/DQ %3zu: seqto %.2f%%, ORT %.2f%% top-1; agreement %.2f%%, max |logit diff| %.3g\n",
        name.c_str(), v.name.c_str(), plan->groups().size(), qdq, Accuracy(b, eval.labels), Accuracy(a, eval.labels),
        agreement, max_diff);
    EXPECT_GE(agreement, 99.5);
    // Quantization costs little accuracy on these models.
    EXPECT_GT(Accuracy(b, eval.labels), Accuracy(float_top1, eval.labels) - 3.0);
  }
}

INSTANTIATE_TEST_SUITE_P(FashionMnist, QuantInterop, ::testing::Values("mobilenetv2", "resnet"));

}  // namespace
}  // namespace seqto

namespace seqto {
namespace {

using testing::Int;
using testing::Ints;
using testing::MakeNode;
using testing::RandomTensor;

// Every op type the static quantizer supports, in one model with two outputs.
ir::Model OpZoo() {
  std::mt19937 rng(21);
  ir::Model m;
  m.opsets[""] = 13;
  auto& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {8}, {8}}});
  g.inputs.push_back({"idx", DType::kInt64, std::vector<ir::Dim>{{-1, "N"}}});
  g.outputs.push_back({"y1", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {6}}});
  g.outputs.push_back({"y2", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {6}}});
  auto init = [&](const std::string& name, Tensor t) { g.initializers[name] = std::move(t); };
  init("w1", RandomTensor({4, 3, 3, 3}, rng));
  init("b1", RandomTensor({4}, rng));
  init("lo", Tensor::Scalar<float>(0.0f));
  init("hi", Tensor::Scalar<float>(6.0f));
  init("wt", RandomTensor({8, 4, 2, 2}, rng));
  init("bt", RandomTensor({4}, rng));
  init("scales", Tensor::FromVector<float>({4}, {1, 1, 2, 2}));
  init("axes23", Tensor::FromVector<int64_t>({2}, {2, 3}));
  init("axes1", Tensor::FromVector<int64_t>({1}, {1}));
  init("shape", Tensor::FromVector<int64_t>({3}, {-1, 4, 1}));
  init("wg", RandomTensor({6, 4}, rng));
  init("bg", RandomTensor({6}, rng));
  init("addc", RandomTensor({6}, rng));
  init("emb", RandomTensor({10, 4}, rng));
  init("wm", RandomTensor({4, 6}, rng));
  ir::Node conv = MakeNode("conv1", "Conv", {"x", "w1", "b1"}, {"c1"});
  conv.attributes["pads"] = Ints({1, 1, 1, 1});
  g.nodes.push_back(conv);
  g.nodes.push_back(MakeNode("clip", "Clip", {"c1", "lo", "hi"}, {"a1"}));
  ir::Node mp = MakeNode("maxpool", "MaxPool", {"a1"}, {"p1"});
  mp.attributes["kernel_shape"] = Ints({2, 2});
  mp.attributes["strides"] = Ints({2, 2});
  g.nodes.push_back(mp);
  ir::Node ap = mp;
  ap.name = "avgpool";
  ap.op_type = "AveragePool";
  ap.outputs = {"p2"};
  g.nodes.push_back(ap);
  ir::Node cat = MakeNode("concat", "Concat", {"p1", "p2"}, {"k"});
  cat.attributes["axis"] = Int(1);
  g.nodes.push_back(cat);
  g.nodes.push_back(MakeNode("sigmoid", "Sigmoid", {"k"}, {"s"}));
  g.nodes.push_back(MakeNode("mul", "Mul", {"k", "s"}, {"m"}));
  g.nodes.push_back(MakeNode("resize", "Resize", {"m", "", "scales"}, {"r"}));
  ir::Node ct = MakeNode("convt", "ConvTranspose", {"r", "wt", "bt"}, {"t"});
  ct.attributes["strides"] = Ints({2, 2});
  g.nodes.push_back(ct);
  g.nodes.push_back(MakeNode("gap", "GlobalAveragePool", {"t"}, {"gp"}));
  g.nodes.push_back(MakeNode("squeeze", "Squeeze", {"gp", "axes23"}, {"sq"}));
  g.nodes.push_back(MakeNode("unsqueeze", "Unsqueeze", {"sq", "axes1"}, {"u"}));
  ir::Node tr = MakeNode("transpose", "Transpose", {"u"}, {"tt"});
  tr.attributes["perm"] = Ints({0, 2, 1});
  g.nodes.push_back(tr);
  g.nodes.push_back(MakeNode("reshape", "Reshape", {"tt", "shape"}, {"rr"}));
  g.nodes.push_back(MakeNode("flatten", "Flatten", {"rr"}, {"f"}));
  ir::Node gemm = MakeNode("gemm", "Gemm", {"f", "wg", "bg"}, {"gm"});
  gemm.attributes["transB"] = Int(1);
  g.nodes.push_back(gemm);
  g.nodes.push_back(MakeNode("add", "Add", {"gm", "addc"}, {"ad"}));
  g.nodes.push_back(MakeNode("softmax", "Softmax", {"ad"}, {"y1"}));
  g.nodes.push_back(MakeNode("gather", "Gather", {"emb", "idx"}, {"ge"}));
  g.nodes.push_back(MakeNode("matmul", "MatMul", {"ge", "wm"}, {"mmo"}));
  g.nodes.push_back(MakeNode("relu", "Relu", {"mmo"}, {"y2"}));
  return m;
}

runtime::TensorMap ZooBatch(std::mt19937& rng, int64_t n) {
  Tensor idx(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) idx.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return {{"x", RandomTensor({n, 3, 8, 8}, rng, -2, 2)}, {"idx", idx}};
}

TEST(QuantInteropOps, EveryOpTypeRunsInOnnxRuntime) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  auto prepared = quant::QuantPlan::Prepare(OpZoo());
  ASSERT_TRUE(prepared.ok()) << prepared.error().message;
  ASSERT_TRUE(onnxio::CheckModel(*prepared).ok());
  std::mt19937 rng(3);
  std::vector<runtime::TensorMap> calib;
  for (int b = 0; b < 4; ++b) calib.push_back(ZooBatch(rng, 8));
  const runtime::TensorMap eval = ZooBatch(rng, 16);
  for (bool per_channel : {false, true}) {
    SCOPED_TRACE(per_channel ? "per-channel" : "per-tensor");
    quant::QuantOptions o;
    o.per_channel = per_channel;
    auto tensors = quant::QuantPlan::TensorsToCalibrate(*prepared, o);
    ASSERT_TRUE(tensors.ok()) << tensors.error().message;
    size_t next = 0;
    quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
      if (next >= calib.size()) return false;
      feeds = calib[next++];
      return true;
    };
    auto stats = quant::Calibrate(*prepared, *tensors, source, o.calibration_options);
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    auto ranges = stats->Ranges(o.calibration);
    ASSERT_TRUE(ranges.ok()) << ranges.error().message;
    auto plan = quant::QuantPlan::Create(*prepared, o, &*ranges);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    // Every supported op type is quantized (in some group).
    std::set<std::string> ops;
    for (const auto& grp : plan->groups())
      for (const auto& n : grp.nodes)
        for (const auto& node : prepared->graph.nodes)
          if (node.name == n) ops.insert(node.op_type);
    for (const auto& op : quant::QuantPlan::SupportedOpTypes(quant::QuantMode::kStatic))
      EXPECT_TRUE(ops.count(op)) << op << " is in no group";

    std::vector<std::pair<std::set<std::string>, quant::Fallback>> candidates = {{{}, quant::Fallback::kFloat}};
    for (const auto& grp : plan->groups()) candidates.push_back({{grp.name}, quant::Fallback::kFloat});
    candidates.push_back({{plan->groups()[0].name, plan->groups()[1].name}, quant::Fallback::kInt16});
    candidates.push_back({{plan->groups()[0].name, plan->groups()[1].name}, quant::Fallback::kFloat16});
    for (const auto& [excluded, fallback] : candidates) {
      std::string what = "excluded:";
      for (const auto& e : excluded) what += " " + e;
      SCOPED_TRACE(what + " fallback " + std::to_string(static_cast<int>(fallback)));
      auto q = plan->Materialize(excluded, fallback);
      ASSERT_TRUE(q.ok()) << q.error().message;
      Status check = onnxio::CheckModel(*q);
      ASSERT_TRUE(check.ok()) << check.message();
      const fs::path path =
          fs::path(::testing::TempDir()) / ("seqto_quant_zoo_" + std::to_string(::getpid()) + ".onnx");
      ASSERT_TRUE(onnxio::SaveModel(*q, path.string()).ok());
      auto theirs = testing::OrtRun(path.string(), eval);
      fs::remove(path);
      ASSERT_TRUE(theirs.ok()) << theirs.error().message;
      auto session = runtime::Session::Create(*q);
      ASSERT_TRUE(session.ok()) << session.error().message;
      auto ours = (*session)->Run(eval);
      ASSERT_TRUE(ours.ok()) << ours.error().message;
      for (const char* out : {"y1", "y2"}) {
        const auto a = theirs->at(out).ToDoubles(), b = ours->at(out).ToDoubles();
        ASSERT_EQ(a.size(), b.size());
        double max_ref = 0, max_diff = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          max_ref = std::max(max_ref, std::fabs(a[i]));
          max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
        }
        // The same QDQ model: at most a quantum or two apart (ORT computes the
        // quantized ops in integers).
        EXPECT_LE(max_diff, 0.03 * max_ref + 1e-4) << out;
      }
    }
  }
}

}  // namespace
}  // namespace seqto
