// `seqto quantize` end to end: the bundled Fashion-MNIST models quantized from the
// command line (static with calibration data, dynamic, a config file with ONNX
// Runtime's option names, exclusions), and bad input: exit code 1 with exactly one
// error line naming what is wrong.
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

// `seqto quantize` errors start with the command name.
void ExpectUserError(const std::vector<std::string>& args, const std::vector<std::string>& parts) {
  cli_test::ExpectUserError(args, parts, "seqto quantize: error: ");
}

nlohmann::json ReadJson(const fs::path& p) {
  try {
    return nlohmann::json::parse(ReadFile(p));
  } catch (const std::exception& e) {
    ADD_FAILURE() << p << ": " << e.what();
    return {};
  }
}

// The written model loads, passes the checker and the JSON describes it.
void CheckOutput(const fs::path& model, const nlohmann::json& j, const std::string& mode) {
  auto m = onnxio::LoadModel(model.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  Status s = onnxio::CheckModel(*m);
  EXPECT_TRUE(s.ok()) << s.message();
  for (const char* key :
       {"output", "mode", "size_bytes", "groups", "quantized_nodes", "excluded_nodes", "calibration", "options"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j.value("output", ""), model.string());
  EXPECT_EQ(j.value("mode", ""), mode);
  EXPECT_EQ(j.value("size_bytes", int64_t{0}), static_cast<int64_t>(fs::file_size(model)));
  ASSERT_TRUE(j["groups"].is_array());
  EXPECT_FALSE(j["groups"].empty());
  std::set<std::string> nodes;
  for (const auto& n : m->graph.nodes) nodes.insert(n.name);
  size_t grouped = 0;
  for (const auto& g : j["groups"]) {
    for (const char* key : {"name", "op_type", "nodes", "weights", "activations", "owned_qdq_nodes"})
      EXPECT_TRUE(g.contains(key)) << key;
    grouped += g["nodes"].size();
    // Every owned Q/DQ node is in the written model.
    for (const auto& q : g["owned_qdq_nodes"]) EXPECT_TRUE(nodes.count(q.get<std::string>())) << q;
  }
  EXPECT_EQ(j["quantized_nodes"].size(), grouped);
  // MACs at batch 1 (the unit tests check the counts by hand): every group of these
  // models has a count, and the groups hold at most the model's.
  ASSERT_TRUE(j.contains("macs"));
  EXPECT_GT(j["macs"].get<int64_t>(), 0);
  EXPECT_TRUE(j["macs_unknown_nodes"].empty());
  int64_t group_macs = 0;
  for (const auto& g : j["groups"]) {
    ASSERT_TRUE(g["macs"].is_number_integer()) << g["name"];
    // Add and pooling groups do no multiply-accumulates.
    const std::string op = g.value("op_type", "");
    if (op == "Conv" || op == "Gemm" || op == "MatMul")
      EXPECT_GT(g["macs"].get<int64_t>(), 0) << g["name"];
    else
      EXPECT_EQ(g["macs"].get<int64_t>(), 0) << g["name"];
    group_macs += g["macs"].get<int64_t>();
  }
  EXPECT_LE(group_macs, j["macs"].get<int64_t>());
}

TEST(QuantizeCli, StaticWithCalibrationData) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "resnet_q.onnx", json = dir / "q.json";
  const std::vector<std::string> args = {"quantize",
                                         (kExamples / "resnet.onnx").string(),
                                         "-o",
                                         out.string(),
                                         "--calib-data",
                                         (kExamples / "sample_input.npy").string(),
                                         "--per-channel",
                                         "--json",
                                         json.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("calibrat"), std::string::npos) << "progress lines on stderr: " << r.err;
  const nlohmann::json j = ReadJson(json);
  CheckOutput(out, j, "static");
  EXPECT_EQ(j["calibration"].value("samples", 0), 8);
  EXPECT_EQ(j["calibration"].value("method", ""), "minmax");
  EXPECT_EQ(j["options"].value("per_channel", false), true);
  EXPECT_TRUE(j["excluded_nodes"].empty());
  // The first group is the stem conv with its folded Relu.
  EXPECT_EQ(j["groups"][0].value("name", ""), "/stem/stem.0/Conv");
  EXPECT_EQ(j["groups"][0].value("op_type", ""), "Conv");
}

TEST(QuantizeCli, DynamicNeedsNoCalibrationData) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "m_dyn.onnx", json = dir / "q.json";
  const std::vector<std::string> args = {
      "quantize",   (kExamples / "mobilenetv2.onnx").string(), "-o", out.string(), "--mode", "dynamic", "--json",
      json.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const nlohmann::json j = ReadJson(json);
  CheckOutput(out, j, "dynamic");
  EXPECT_TRUE(j["calibration"].is_null());
  auto m = onnxio::LoadModel(out.string());
  ASSERT_TRUE(m.ok());
  size_t conv_integer = 0;
  for (const auto& n : m->graph.nodes) conv_integer += n.op_type == "ConvInteger";
  EXPECT_EQ(conv_integer, 25u);
}

TEST(QuantizeCli, ConfigFileAndExclusions) {
  const fs::path dir = TempDir();
  const fs::path config = dir / "config.json", out = dir / "q.onnx", json = dir / "q.json";
  std::ofstream(config) << R"({
    "per_channel": true,
    "activation_type": "QUInt8",
    "weight_type": "QInt8",
    "calibrate_method": "Percentile",
    "nodes_to_exclude": ["/layer4/*"],
    "extra_options": {"ActivationSymmetric": false, "WeightSymmetric": true, "QuantizeBias": true,
                      "CalibMovingAverage": false,
                      "TensorQuantOverrides": {"input": [{"scale": 0.0625, "zero_point": 128}]}}
  })";
  const std::vector<std::string> args = {"quantize",     (kExamples / "resnet.onnx").string(),
                                         "-o",           out.string(),
                                         "--calib-data", (kExamples / "sample_input.npy").string(),
                                         "--config",     config.string(),
                                         "--exclude",    "/layer4/*,/fc/Gemm",
                                         "--json",       json.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const nlohmann::json j = ReadJson(json);
  CheckOutput(out, j, "static");
  EXPECT_EQ(j["options"].value("calibrate_method", ""), "percentile");
  EXPECT_EQ(j["calibration"].value("method", ""), "percentile");
  std::set<std::string> excluded;
  for (const auto& n : j["excluded_nodes"]) excluded.insert(n.get<std::string>());
  EXPECT_TRUE(excluded.count("/fc/Gemm"));
  EXPECT_TRUE(excluded.count("/layer4/conv1/Conv"));
  for (const auto& g : j["groups"])
    for (const auto& n : g["nodes"]) EXPECT_FALSE(excluded.count(n.get<std::string>())) << n;
  // The override is in the model.
  auto m = onnxio::LoadModel(out.string());
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->graph.initializers.count("input_scale"));
  EXPECT_EQ(m->graph.initializers.at("input_scale").ToDoubles()[0], 0.0625);
}

TEST(QuantizeCli, BadInputIsOneErrorLine) {
  const fs::path dir = TempDir();
  const std::string model = (kExamples / "resnet.onnx").string(), npy = (kExamples / "sample_input.npy").string();
  const std::string out = (dir / "q.onnx").string();
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--exclude", "/layer9/Conv"},
                  {"'/layer9/Conv'", "nodes_to_exclude"});
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--exclude", "/nothing/*"}, {"'/nothing/*'"});
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--op-types", "Conv,LSTM"}, {"'LSTM'"});
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", (dir / "missing.npy").string()}, {"missing.npy"});
  ExpectUserError({"quantize", model, "-o", out}, {"--calib-data"});
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--activation-type", "int7"}, {"int7"});
  ExpectUserError({"quantize", model, "-o", out, "--mode", "dynamic", "--activation-type", "int8"}, {"uint8"});
  const fs::path bad_key = dir / "bad_key.json";
  std::ofstream(bad_key) << R"({"per_channel": true, "bogus_option": 1})";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", bad_key.string()},
                  {"bad_key.json", "bogus_option"});
  const fs::path bad_extra = dir / "bad_extra.json";
  std::ofstream(bad_extra) << R"({"extra_options": {"WeightSymetric": true}})";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", bad_extra.string()},
                  {"WeightSymetric"});
  const fs::path bad_type = dir / "bad_type.json";
  std::ofstream(bad_type) << R"({"per_channel": "yes"})";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", bad_type.string()},
                  {"bad_type.json", "per_channel"});
  const fs::path not_json = dir / "not.json";
  std::ofstream(not_json) << "{per_channel: true";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", not_json.string()},
                  {"not.json", "JSON"});
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", (dir / "none.json").string()},
                  {"none.json"});
  ExpectUserError({"quantize", (dir / "no_model.onnx").string(), "-o", out, "--calib-data", npy}, {"no_model.onnx"});
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace seqto
