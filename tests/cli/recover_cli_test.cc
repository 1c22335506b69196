// Accuracy recovery from the command line (`seqto quantize --recover`, the config's
// quantization.recovery list): a technique runs, says what it did, and is recorded
// in the model's metadata; a bad technique name, option or value is one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kExamples = fs::path(SEQTO_SOURCE_DIR) / "examples/fashion-mnist";

// `seqto quantize` with `extra` flags fails with one error line holding `parts`, and
// writes no model.
void ExpectQuantizeError(const fs::path& out, const std::vector<std::string>& extra,
                         const std::vector<std::string>& parts) {
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  args.insert(args.end(), extra.begin(), extra.end());
  cli_test::ExpectUserError(args, parts, "seqto quantize: error: ");
  EXPECT_FALSE(fs::exists(out));
}

TEST(RecoverCli, EqualizationRunsAndIsRecordedInTheModel) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "cle.onnx", json = dir / "q.json";
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  for (const char* a : {"--recover", "cle:relu6=2,iterations=50", "--json"}) args.push_back(a);
  args.push_back(json.string());
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("recovery cle"), std::string::npos) << r.err;
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array()) << record;
  ASSERT_EQ(record.size(), 1u);
  EXPECT_EQ(record[0].value("name", ""), "cle");
  EXPECT_EQ(record[0].value("stage", ""), "float");
  EXPECT_EQ(record[0].value("iterations", 0), 50);  // every option, defaults filled in
  EXPECT_EQ(record[0].value("relu6", 0), 2);
  EXPECT_TRUE(record[0].contains("bias_absorption"));
  // The bundled MobileNetV2 has conv -> ReLU6 -> conv chains to equalize.
  EXPECT_GT(record[0]["result"].value("pairs", 0), 0) << record;
  EXPECT_GT(record[0]["result"].value("relu6_replaced", 0), 0) << record;
  // --json repeats it, with the time each technique took (the model has no times:
  // the same quantization always writes the same bytes).
  std::ifstream in(json);
  nlohmann::json listed = nlohmann::json::parse(in)["recovery"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(listed[0]["seconds"].is_number());
  EXPECT_FALSE(record[0].contains("seconds"));
  listed[0].erase("seconds");
  EXPECT_EQ(listed, record);
}

TEST(RecoverCli, WithoutTechniquesTheModelHasNoRecord) {
  const fs::path out = TempDir() / "plain.onnx";
  const std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_TRUE(RecoveryRecord(out).is_null());
}

TEST(RecoverCli, ConfigListRunsTheSameTechnique) {
  const fs::path dir = TempDir();
  const fs::path config = dir / "q.json", out = dir / "cle.onnx";
  std::ofstream(config) << R"({"recovery": [{"name": "cle", "relu6": 2}]})";
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  args.push_back("--config");
  args.push_back(config.string());
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array());
  EXPECT_EQ(record.at(0).value("relu6", 0), 2);
}

TEST(RecoverCli, BadSpecsAreOneClearError) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "bad.onnx";
  auto expect_error = [&](const std::vector<std::string>& extra, const std::vector<std::string>& parts) {
    ExpectQuantizeError(out, extra, parts);
  };
  expect_error({"--recover", "magic"}, {"unknown recovery technique 'magic'", "cle"});
  expect_error({"--recover", "cle:speed=3"}, {"unknown option 'speed'", "relu6"});
  expect_error({"--recover", "cle:relu6=3"}, {"relu6", "outside [0, 2]"});
  expect_error({"--recover", "cle:iterations=2.5"}, {"iterations", "integer"});
  expect_error({"--recover", "cle:bias_absorption=maybe"}, {"bias_absorption", "true or false"});
  expect_error({"--recover", "cle:relu6"}, {"key=value"});
  expect_error({"--recover", "cle", "--recover", "cle"}, {"'cle' is given twice"});
  const fs::path config = dir / "bad.json";
  std::ofstream(config) << R"({"recovery": [{"name": "cle", "relu6": true}]})";
  expect_error({"--config", config.string()}, {"recovery[0]", "relu6", "number"});
  std::ofstream(config) << R"({"recovery": "cle"})";
  expect_error({"--config", config.string()}, {"recovery", "list"});
}

TEST(RecoverCli, AdaRoundLearnsTheRoundingOfTheBundledModel) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "ada.onnx", plain = dir / "plain.onnx";
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  for (const char* a : {"--recover", "adaround:iterations=50,samples=4,positions=8"}) args.push_back(a);
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("recovery adaround"), std::string::npos) << r.err;
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array()) << record;
  ASSERT_EQ(record.size(), 1u);
  EXPECT_EQ(record[0].value("name", ""), "adaround");
  EXPECT_EQ(record[0].value("stage", ""), "plan");
  EXPECT_EQ(record[0].value("iterations", 0), 50);
  const nlohmann::json& result = record[0]["result"];
  EXPECT_GT(result.value("layers", 0), 10) << result;  // every conv and the classifier
  EXPECT_EQ(result.value("samples", 0), 4) << result;
  EXPECT_GT(result.value("flipped", 0.0), 0.0) << result;
  // The learned integers differ from round-to-nearest's, never by more than one.
  const std::vector<std::string> plain_args = FashionMobilenetQuantizeArgs(plain);
  ASSERT_EQ(RunSeqto(plain_args).exit_code, 0);
  auto a = onnxio::LoadModel(out.string());
  auto b = onnxio::LoadModel(plain.string());
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t differ = 0;
  for (const auto& [name, t] : b->graph.initializers) {
    if (name.size() < 10 || name.substr(name.size() - 10) != "_quantized" || t.dtype() != DType::kInt8) continue;
    const auto x = t.ToInt64s(), y = a->graph.initializers.at(name).ToInt64s();
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::abs(x[i] - y[i]), 1) << name << "[" << i << "]";
      differ += x[i] != y[i];
    }
  }
  EXPECT_GT(differ, 0);
}

TEST(RecoverCli, AdaRoundBadOptionsAreOneClearError) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "bad.onnx";
  auto expect_error = [&](const std::vector<std::string>& extra, const std::vector<std::string>& parts) {
    ExpectQuantizeError(out, extra, parts);
  };
  expect_error({"--recover", "adaround:iterations=0"}, {"adaround.iterations", "outside [1, "});
  expect_error({"--recover", "adaround:iterations=10.5"}, {"iterations", "integer"});
  expect_error({"--recover", "adaround:lr=fast"}, {"adaround.lr", "number"});
  expect_error({"--recover", "adaround:holdout=0.9"}, {"holdout", "outside [0, 0.5]"});
  expect_error({"--recover", "adaround:rounds=3"}, {"unknown option 'rounds'", "iterations"});
  expect_error({"--recover", "adaround", "--mode", "dynamic"}, {"'adaround' needs static quantization"});
}

}  // namespace
}  // namespace seqto

namespace seqto {
namespace {

// The dtype of the zero point of the DequantizeLinear that feeds `node`'s input `k`.
DType FeedingZeroPointType(const ir::Model& m, const std::string& node, size_t k) {
  std::map<std::string, const ir::Node*> producer;
  for (const auto& n : m.graph.nodes)
    for (const auto& o : n.outputs) producer[o] = &n;
  for (const auto& n : m.graph.nodes) {
    if (n.name != node || n.inputs.size() <= k) continue;
    auto p = producer.find(n.inputs[k]);
    if (p == producer.end() || p->second->op_type != "DequantizeLinear" || p->second->inputs.size() < 3) break;
    auto zp = m.graph.initializers.find(p->second->inputs[2]);
    if (zp != m.graph.initializers.end()) return zp->second.dtype();
  }
  return DType::kUndefined;
}

TEST(RecoverCli, Int16ActivationsWidenTheNamedGroupsOnly) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "a16.onnx";
  std::vector<std::string> args = {"quantize",
                                   (kExamples / "resnet.onnx").string(),
                                   "-o",
                                   out.string(),
                                   "--calib-data",
                                   (kExamples / "sample_input.npy").string(),
                                   "--int16-activations",
                                   "/layer1/conv1/Conv"};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  auto m = onnxio::LoadModel(out.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  // The named conv reads a 16-bit activation and keeps its 8-bit weight; its
  // neighbours downstream keep 8-bit activations where they do not share its tensors.
  EXPECT_EQ(FeedingZeroPointType(*m, "/layer1/conv1/Conv", 0), DType::kInt16);
  EXPECT_EQ(FeedingZeroPointType(*m, "/layer1/conv1/Conv", 1), DType::kInt8);
  EXPECT_EQ(FeedingZeroPointType(*m, "/layer3/conv1/Conv", 0), DType::kUInt8);
  EXPECT_TRUE(onnxio::CheckModel(*m).ok());
  // A pattern that matches no quantized node is one clear error.
  args.back() = "/nothing/*";
  cli_test::ExpectUserError(args, {"'/nothing/*' matches no node"}, "seqto quantize: error: ");
  args.back() = "/layer1/conv1/Conv";
  args.push_back("--mode");
  args.push_back("dynamic");
  cli_test::ExpectUserError(args, {"int16 activation nodes need static quantization"}, "seqto quantize: error: ");
}

}  // namespace
}  // namespace seqto
