// `seqto quantize --recover bias_correction` end to end on the bundled Fashion-MNIST
// ResNet: the model is written with its record (--json and the model's metadata),
// the config's recovery list does the same, and bad options are one error line.
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

// The bias_correction entry of the plan stage in a recovery record.
nlohmann::json PlanEntry(const nlohmann::json& record) {
  for (const auto& e : record)
    if (e.value("name", "") == "bias_correction" && e.value("stage", "") == "plan") return e;
  ADD_FAILURE() << "no bias_correction plan entry in " << record.dump();
  return {};
}

TEST(BiasCorrectionCli, QuantizeRecordsTheCorrection) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "q.onnx", json = dir / "q.json";
  const std::vector<std::string> args = {
      "quantize",     (kExamples / "resnet.onnx").string(),      "-o",      out.string(),
      "--calib-data", (kExamples / "sample_input.npy").string(), "--batch", "4",
      "--recover",    "bias_correction:passes=2,samples=6",      "--json",  json.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("bias correction pass 2/2"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(json));
  const nlohmann::json entry = PlanEntry(j["recovery"]);
  EXPECT_EQ(entry.value("passes", 0), 2);
  EXPECT_EQ(entry["result"].value("samples", 0), 6);
  // Every Conv and the Gemm of the ResNet.
  EXPECT_EQ(entry["result"].value("corrected", 0), 12);
  EXPECT_EQ(j["options"]["recovery"][0].value("name", ""), "bias_correction");
  auto m = onnxio::LoadModel(out.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_TRUE(onnxio::CheckModel(*m).ok());
  ASSERT_TRUE(m->metadata.count("seqto.recovery"));
  const nlohmann::json meta = nlohmann::json::parse(m->metadata.at("seqto.recovery"));
  EXPECT_EQ(PlanEntry(meta)["result"], entry["result"]);
}

TEST(BiasCorrectionCli, FromTheConfig) {
  const fs::path dir = TempDir();
  const fs::path config = dir / "config.json", out = dir / "q.onnx", json = dir / "q.json";
  std::ofstream(config) << R"({"per_channel": true, "recovery": [{"name": "bias_correction", "samples": 4}]})";
  const std::vector<std::string> args = {"quantize",     (kExamples / "resnet.onnx").string(),
                                         "-o",           out.string(),
                                         "--calib-data", (kExamples / "sample_input.npy").string(),
                                         "--config",     config.string(),
                                         "--json",       json.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const nlohmann::json entry = PlanEntry(nlohmann::json::parse(ReadFile(json))["recovery"]);
  EXPECT_EQ(entry.value("passes", 0), 1);  // the default
  EXPECT_EQ(entry["result"].value("samples", 0), 4);
}

TEST(BiasCorrectionCli, BadOptionsAreOneErrorLine) {
  const fs::path dir = TempDir();
  const std::string model = (kExamples / "resnet.onnx").string(), npy = (kExamples / "sample_input.npy").string();
  const std::string out = (dir / "q.onnx").string();
  const std::string marker = "seqto quantize: error: ";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--recover", "bias_correction:passes=-1"},
                  {"bias_correction", "passes", "-1"}, marker);
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--recover", "bias_correction:rounds=2"},
                  {"bias_correction", "'rounds'", "passes"}, marker);
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--recover", "bias_correction:samples=x"},
                  {"samples", "'x'"}, marker);
  ExpectUserError({"quantize", model, "-o", out, "--mode", "dynamic", "--recover", "bias_correction"},
                  {"bias_correction", "static"}, marker);
  const fs::path bad = dir / "bad.json";
  std::ofstream(bad) << R"({"recovery": [{"name": "bias_correction", "passes": 0}]})";
  ExpectUserError({"quantize", model, "-o", out, "--calib-data", npy, "--config", bad.string()}, {"bad.json", "passes"},
                  marker);
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace seqto
