// seqto's runtime against ONNX Runtime (the oracle, through tools/ort/ort_run.js):
// every model of ONNX's pytorch-converted test data (on its test_data_set_0 inputs)
// and the two benchmark CNNs (random input, batch 2) must give the same outputs,
// within max|seqto - ort| <= 1e-4 * max|ort| + 1e-5 per output.
//
// A model that uses an op seqto does not have yet is skipped with the op's name.
// ONNX Runtime has dropped the kernels of a few opset-6 ops that some pytorch-converted
// models use; for those models (and only when ORT says so) the reference is the
// expected outputs shipped with the test data instead (see PytorchConverted below).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "onnxio/model_io.h"
#include "ops/registry.h"
#include "runtime/session.h"
#include "support/ort_oracle.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;

constexpr double kRelTol = 1e-4;
constexpr double kAbsTol = 1e-5;

// "Conv", "Foo (opset 6)", ...: the model's ops that seqto's registry cannot run.
std::vector<std::string> MissingOps(const ir::Model& model) {
  const auto& registry = ops::OpRegistry::Global();
  std::set<std::string> missing;
  for (const ir::Node& node : model.graph.nodes) {
    const std::string domain = node.domain == "ai.onnx" ? "" : node.domain;
    auto it = model.opsets.find(domain);
    if (it == model.opsets.end() && domain.empty()) it = model.opsets.find("ai.onnx");
    const int64_t opset = it == model.opsets.end() ? 0 : it->second;
    if (registry.Find(node.domain, node.op_type, opset)) continue;
    const std::string name = (domain.empty() ? "" : domain + ".") + node.op_type;
    missing.insert(registry.Has(node.domain, node.op_type) ? name + " (opset " + std::to_string(opset) + ")" : name);
  }
  return {missing.begin(), missing.end()};
}

std::string Join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

// True if a session creation error says that an op is missing (the session names
// the node and the op: "unsupported op ai.onnx.Tanh", "op X is not supported at opset N").
bool IsUnsupportedOpError(const std::string& message) {
  return message.find("unsupported op ") != std::string::npos ||
         message.find(" is not supported at opset ") != std::string::npos;
}

// Compares seqto's outputs with a reference's: same names, types and shapes, and
// max |seqto - reference| <= kRelTol * max |reference| + kAbsTol per output.
void ExpectClose(const runtime::TensorMap& ours, const runtime::TensorMap& ref, const std::string& ref_name) {
  ASSERT_EQ(ours.size(), ref.size()) << "number of outputs (seqto vs " << ref_name << ")";
  for (const auto& [name, expected] : ref) {
    SCOPED_TRACE("output '" + name + "'");
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << "seqto did not produce output '" << name << "'";
    const Tensor& got = it->second;
    EXPECT_EQ(DTypeName(got.dtype()), DTypeName(expected.dtype()));
    ASSERT_EQ(ShapeToString(got.shape()), ShapeToString(expected.shape()));
    const std::vector<double> a = got.ToDoubles(), b = expected.ToDoubles();
    double max_ref = 0, max_diff = 0;
    size_t worst = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      if (std::isfinite(b[i])) max_ref = std::max(max_ref, std::abs(b[i]));
      double diff;
      if (std::isnan(a[i]) || std::isnan(b[i]))
        diff = std::isnan(a[i]) && std::isnan(b[i]) ? 0 : INFINITY;
      else if (std::isinf(a[i]) || std::isinf(b[i]))
        diff = a[i] == b[i] ? 0 : INFINITY;
      else
        diff = std::abs(a[i] - b[i]);
      if (diff > max_diff) {
        max_diff = diff;
        worst = i;
      }
    }
    if (b.empty()) continue;
    const double tol = kRelTol * max_ref + kAbsTol;
    EXPECT_LE(max_diff, tol) << got.Describe() << ": max |seqto - " << ref_name << "| = " << max_diff
                             << " at flat index " << worst << " (seqto " << a[worst] << ", " << ref_name << " "
                             << b[worst] << "), max |" << ref_name << "| = " << max_ref;
  }
}

// seqto's outputs for a model, or why there are none.
struct SeqtoResult {
  runtime::TensorMap outputs;
  std::string skip;   // set if seqto lacks one of the model's ops
  std::string error;  // set on any other error
};

// Runs `model` with seqto. A missing op (after the runtime's own graph optimizations,
// e.g. BatchNormalization folded into Conv) asks to skip the test, naming the op.
SeqtoResult RunSeqto(const std::string& path, const ir::Model& model, const runtime::TensorMap& inputs) {
  SeqtoResult result;
  auto session = runtime::Session::Create(model);
  if (!session) {
    if (IsUnsupportedOpError(session.error().message))
      result.skip = "unsupported op: " + session.error().message +
                    " (ops not in seqto's registry: " + Join(MissingOps(model)) + ")";
    else
      result.error = path + ": " + session.error().message;
    return result;
  }
  auto ours = (*session)->Run(inputs);
  if (!ours)
    result.error = path + ": " + ours.error().message;
  else
    result.outputs = std::move(*ours);
  return result;
}

// True if ONNX Runtime refused the model because it has no kernel for one of its
// (old) op versions, e.g. "Could not find an implementation for PRelu(6) node".
bool OrtLacksKernel(const std::string& message) {
  return message.find("Could not find an implementation for") != std::string::npos;
}

// ---------------------------------------------------------------------------
// The oracle itself

// A model whose outputs out_<i> are Identity copies of inputs in_<i> of the given types.
ir::Model IdentityModel(const std::vector<DType>& dtypes) {
  ir::Model model;
  model.opsets[""] = 13;
  model.graph.name = "identity";
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const std::string in = "in_" + std::to_string(i), out = "out/" + std::to_string(i);
    ir::ValueInfo in_info, out_info;
    in_info.name = in;
    in_info.dtype = dtypes[i];
    in_info.shape = std::vector<ir::Dim>{{-1, "N"}, {3, ""}};
    out_info.name = out;
    out_info.dtype = dtypes[i];
    model.graph.inputs.push_back(in_info);
    model.graph.outputs.push_back(out_info);
    ir::Node node;
    node.name = "identity_" + std::to_string(i);
    node.op_type = "Identity";
    node.inputs = {in};
    node.outputs = {out};
    model.graph.nodes.push_back(node);
  }
  return model;
}

// A per-process path in the temporary folder (ctest may run tests and builds side by side).
fs::path TempModelPath(const std::string& stem) {
  return fs::path(::testing::TempDir()) / ("seqto_ort_" + stem + "_" + std::to_string(::getpid()) + ".onnx");
}

TEST(OrtOracle, RoundTripsEveryNpyType) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32,
                                     DType::kUInt8,   DType::kInt8,    DType::kBool};
  const fs::path path = TempModelPath("identity");
  ASSERT_TRUE(onnxio::SaveModel(IdentityModel(dtypes), path.string()).ok());
  runtime::TensorMap inputs;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    Tensor t(dtypes[i], {2, 3});
    VisitNumeric(dtypes[i], [&](auto zero) {
      using T = decltype(zero);
      for (int64_t k = 0; k < 6; ++k) t.data<T>()[k] = static_cast<T>(k * 7 - 20);
    });
    if (dtypes[i] == DType::kBool)
      for (int64_t k = 0; k < 6; ++k) t.data<bool>()[k] = k % 2;
    inputs["in_" + std::to_string(i)] = t;
  }
  auto outputs = testing::OrtRun(path.string(), inputs);
  ASSERT_TRUE(outputs) << outputs.error().message;
  ASSERT_EQ(outputs->size(), dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const std::string name = "out/" + std::to_string(i);
    ASSERT_TRUE(outputs->count(name)) << name;
    const Tensor& got = outputs->at(name);
    const Tensor& want = inputs.at("in_" + std::to_string(i));
    EXPECT_EQ(got.Describe(), want.Describe()) << name;
    EXPECT_EQ(got.ToDoubles(), want.ToDoubles()) << name;
  }
  auto latency = testing::OrtBenchmark(path.string(), inputs, 3, 1);
  ASSERT_TRUE(latency) << latency.error().message;
  EXPECT_EQ(latency->runs, 3);
  EXPECT_GE(latency->p50, latency->min);
  EXPECT_LE(latency->p50, latency->max);
  fs::remove(path);
}

TEST(OrtOracle, ReportsOrtErrorsOnOneLine) {
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  const fs::path path = TempModelPath("identity_err");
  ASSERT_TRUE(onnxio::SaveModel(IdentityModel({DType::kFloat32}), path.string()).ok());
  auto wrong_type = testing::OrtRun(path.string(), {{"in_0", Tensor(DType::kInt64, {2, 3})}});
  ASSERT_FALSE(wrong_type);
  EXPECT_EQ(wrong_type.error().message.find('\n'), std::string::npos) << wrong_type.error().message;
  EXPECT_NE(wrong_type.error().message.find("ONNX Runtime"), std::string::npos) << wrong_type.error().message;
  auto wrong_name = testing::OrtRun(path.string(), {{"nope", Tensor(DType::kFloat32, {2, 3})}});
  ASSERT_FALSE(wrong_name);
  EXPECT_NE(wrong_name.error().message.find("'nope' is not an input"), std::string::npos) << wrong_name.error().message;
  auto no_model = testing::OrtRun((fs::path(::testing::TempDir()) / "no_such_model.onnx").string(), {});
  ASSERT_FALSE(no_model);
  EXPECT_NE(no_model.error().message.find("no such file"), std::string::npos) << no_model.error().message;
  fs::remove(path);
}

// ---------------------------------------------------------------------------
// ONNX's pytorch-converted models

fs::path PytorchConvertedDir() { return fs::path(SEQTO_ONNX_TESTDATA) / "pytorch-converted"; }

std::vector<std::string> PytorchConvertedModels() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(PytorchConvertedDir(), ec))
    if (fs::exists(entry.path() / "model.onnx")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// input_0.pb, input_1.pb, ... of a test data set, by graph-input name.
Expected<runtime::TensorMap> ReadTestInputs(const fs::path& dir, const ir::Model& model) {
  runtime::TensorMap inputs;
  for (size_t i = 0;; ++i) {
    const fs::path file = dir / ("input_" + std::to_string(i) + ".pb");
    if (!fs::exists(file)) break;
    SEQTO_ASSIGN_OR_RETURN(auto named, onnxio::LoadTensorFile(file.string()));
    std::string name = named.first;
    const bool known = std::any_of(model.graph.inputs.begin(), model.graph.inputs.end(),
                                   [&](const ir::ValueInfo& v) { return v.name == name; });
    if (!known) {
      if (i >= model.graph.inputs.size())
        return UserError(file.string() + ": more input files than the model has inputs");
      name = model.graph.inputs[i].name;
    }
    inputs[name] = std::move(named.second);
  }
  return inputs;
}

// The expected outputs output_0.pb, ... of a test data set, by graph-output name.
Expected<runtime::TensorMap> ReadTestOutputs(const fs::path& dir, const ir::Model& model) {
  runtime::TensorMap outputs;
  for (size_t i = 0;; ++i) {
    const fs::path file = dir / ("output_" + std::to_string(i) + ".pb");
    if (!fs::exists(file)) break;
    SEQTO_ASSIGN_OR_RETURN(auto named, onnxio::LoadTensorFile(file.string()));
    std::string name = named.first;
    const bool known = std::any_of(model.graph.outputs.begin(), model.graph.outputs.end(),
                                   [&](const ir::ValueInfo& v) { return v.name == name; });
    if (!known) {
      if (i >= model.graph.outputs.size())
        return UserError(file.string() + ": more output files than the model has outputs");
      name = model.graph.outputs[i].name;
    }
    outputs[name] = std::move(named.second);
  }
  return outputs;
}

class PytorchConverted : public ::testing::TestWithParam<std::string> {};

// The reference is ONNX Runtime. ONNX Runtime no longer has kernels for some opset-6
// ops these models use (AveragePool-1, BatchNormalization-6, PRelu-6, Add/Mul-6,
// Gemm-6); for those models only, the reference is the expected outputs that ship
// with the test data (test_data_set_0/output_*.pb, computed by PyTorch), with the
// same tolerance, and the test records property reference=onnx-test-data.
TEST_P(PytorchConverted, MatchesOrt) {
  const fs::path dir = PytorchConvertedDir() / GetParam();
  const std::string path = (dir / "model.onnx").string();
  auto model = onnxio::LoadModel(path);
  ASSERT_TRUE(model) << model.error().message;
  auto inputs = ReadTestInputs(dir / "test_data_set_0", *model);
  ASSERT_TRUE(inputs) << inputs.error().message;
  SeqtoResult ours = RunSeqto(path, *model, *inputs);
  if (!ours.skip.empty()) GTEST_SKIP() << ours.skip;
  ASSERT_TRUE(ours.error.empty()) << ours.error;

  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  auto ref = testing::OrtRun(path, *inputs);
  if (!ref && OrtLacksKernel(ref.error().message)) {
    RecordProperty("reference", "onnx-test-data");
    std::printf("note: %s: %s; comparing with the test data's expected outputs instead\n", GetParam().c_str(),
                ref.error().message.c_str());
    auto expected = ReadTestOutputs(dir / "test_data_set_0", *model);
    ASSERT_TRUE(expected) << expected.error().message;
    ASSERT_FALSE(expected->empty()) << dir << ": no expected outputs";
    ExpectClose(ours.outputs, *expected, "expected");
    return;
  }
  ASSERT_TRUE(ref) << path << ": " << ref.error().message;
  RecordProperty("reference", "onnxruntime");
  ExpectClose(ours.outputs, *ref, "ort");
}

INSTANTIATE_TEST_SUITE_P(Onnx, PytorchConverted, ::testing::ValuesIn(PytorchConvertedModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PytorchConverted);

// ---------------------------------------------------------------------------
// The benchmark models (bench/models.cmake generates them at build time)

class BenchCnn : public ::testing::TestWithParam<std::string> {};

TEST_P(BenchCnn, MatchesOrtBatch2) {
  const std::string path = (fs::path(SEQTO_BENCH_MODELS_DIR) / (GetParam() + ".onnx")).string();
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: build the target seqto_bench_models";
  auto model = onnxio::LoadModel(path);
  ASSERT_TRUE(model) << model.error().message;
  Tensor input(DType::kFloat32, {2, 3, 224, 224});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < input.numel(); ++i) input.data<float>()[i] = dist(rng);
  const runtime::TensorMap inputs = {{"input", input}};
  SeqtoResult ours = RunSeqto(path, *model, inputs);
  if (!ours.skip.empty()) GTEST_SKIP() << ours.skip;
  ASSERT_TRUE(ours.error.empty()) << ours.error;
  const Status ort = testing::OrtAvailable();
  ASSERT_TRUE(ort.ok()) << ort.message();
  auto ref = testing::OrtRun(path, inputs);
  ASSERT_TRUE(ref) << path << ": " << ref.error().message;
  ExpectClose(ours.outputs, *ref, "ort");
}

INSTANTIATE_TEST_SUITE_P(Bench, BenchCnn, ::testing::Values("resnet50", "mobilenetv2", "squeezenet", "vit"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A QOperator int8 model as the ONNX Model Zoo's int8 CNNs are written: ONNX's
// QuantizeLinear and QLinearConv with ONNX Runtime's contrib QLinearAdd and
// QLinearGlobalAveragePool (domain com.microsoft). seqto runs it channels-last;
// the result must be ORT's within one quantum (ORT's QLinearAdd rounds through
// precomputed scale ratios, so a value near a tie may land one step apart).
TEST(QOperator, ContribOpsMatchOrtWithinOneQuantum) {
  if (Status st = testing::OrtAvailable(); !st.ok()) GTEST_FAIL() << st.message();
  std::mt19937 rng(21);
  ir::Model m;
  m.opsets[""] = 13;
  m.opsets["com.microsoft"] = 1;
  ir::Graph& g = m.graph;
  g.inputs.push_back({"x", DType::kFloat32, std::vector<ir::Dim>{{-1, "N"}, {3}, {12}, {10}}});
  g.outputs.push_back({"y", DType::kFloat32, std::nullopt});
  auto scalar_u8 = [](uint8_t v) {
    Tensor t(DType::kUInt8, {});
    t.data<uint8_t>()[0] = v;
    return t;
  };
  g.initializers["x_s"] = Tensor::Scalar<float>(0.02f);
  g.initializers["x_zp"] = scalar_u8(128);
  g.initializers["a_s"] = Tensor::Scalar<float>(0.05f);
  g.initializers["a_zp"] = scalar_u8(120);
  g.initializers["b_s"] = Tensor::Scalar<float>(0.04f);
  g.initializers["b_zp"] = scalar_u8(130);
  g.initializers["c_s"] = Tensor::Scalar<float>(0.07f);
  g.initializers["c_zp"] = scalar_u8(125);
  g.initializers["p_s"] = Tensor::Scalar<float>(0.03f);
  g.initializers["p_zp"] = scalar_u8(127);
  std::uniform_int_distribution<int> w(-60, 60);
  for (const char* name : {"wa", "wb"}) {
    Tensor t(DType::kInt8, {8, 3, 3, 3});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(w(rng));
    g.initializers[name] = t;
    g.initializers[std::string(name) + "_s"] = Tensor::Scalar<float>(0.01f);
    Tensor zp(DType::kInt8, {});
    g.initializers[std::string(name) + "_zp"] = zp;
  }
  auto node = [&](const std::string& name, const std::string& op, const std::string& domain,
                  std::vector<std::string> in, std::vector<std::string> out) {
    ir::Node n;
    n.name = name;
    n.op_type = op;
    n.domain = domain;
    n.inputs = std::move(in);
    n.outputs = std::move(out);
    return n;
  };
  g.nodes.push_back(node("q", "QuantizeLinear", "", {"x", "x_s", "x_zp"}, {"xq"}));
  for (const char* c : {"a", "b"}) {
    const std::string w = std::string("w") + c;
    ir::Node conv = node(std::string("conv_") + c, "QLinearConv", "",
                         {"xq", "x_s", "x_zp", w, w + "_s", w + "_zp", std::string(c) + "_s", std::string(c) + "_zp"},
                         {std::string(c) + "q"});
    conv.attributes["pads"].type = ir::Attribute::Type::kInts;
    conv.attributes["pads"].ints = {1, 1, 1, 1};
    g.nodes.push_back(conv);
  }
  g.nodes.push_back(
      node("add", "QLinearAdd", "com.microsoft", {"aq", "a_s", "a_zp", "bq", "b_s", "b_zp", "c_s", "c_zp"}, {"cq"}));
  g.nodes.push_back(
      node("gap", "QLinearGlobalAveragePool", "com.microsoft", {"cq", "c_s", "c_zp", "p_s", "p_zp"}, {"pq"}));
  g.nodes.push_back(node("dq", "DequantizeLinear", "", {"pq", "p_s", "p_zp"}, {"y"}));
  const fs::path path = TempModelPath("qoperator");
  ASSERT_TRUE(onnxio::SaveModel(m, path.string()).ok());
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  Tensor x(DType::kFloat32, {2, 3, 12, 10});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = dist(rng);
  auto ort = testing::OrtRun(path.string(), {{"x", x}});
  ASSERT_TRUE(ort.ok()) << ort.error().message;
  auto session = runtime::Session::Create(m);
  ASSERT_TRUE(session.ok()) << session.error().message;
  auto ours = (*session)->Run({{"x", x}});
  ASSERT_TRUE(ours.ok()) << ours.error().message;
  const auto a = ours->at("y").ToDoubles(), b = ort->at("y").ToDoubles();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(std::fabs(a[i] - b[i]), 0.03 + 1e-6) << "at " << i;
  fs::remove(path);
}

}  // namespace
}  // namespace seqto
