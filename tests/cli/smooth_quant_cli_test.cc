// SmoothQuant from the command line: `seqto quantize --recover smooth_quant` smooths
// the bundled model's classifier input and records it; on a model without a MatMul it
// says it found nothing and still quantizes; ORT's extra options SmoothQuant,
// SmoothQuantAlpha, SmoothQuantFolding in --config mean the same technique and are
// written back that way; bad values and a conflict with quantization.recovery are
// one clear error naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/npy.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;

TEST(SmoothQuantCli, SmoothsTheClassifierInputAndRecordsIt) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "sq.onnx", json = dir / "q.json";
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  for (const char* a : {"--recover", "smooth_quant:alpha=0.6,folding=false", "--json"}) args.push_back(a);
  args.push_back(json.string());
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("smooth_quant: 1 inputs of 1 MatMul/Gemm"), std::string::npos) << r.err;
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array()) << record;
  ASSERT_EQ(record.size(), 1u);
  EXPECT_EQ(record[0].value("name", ""), "smooth_quant");
  EXPECT_EQ(record[0].value("alpha", 0.0), 0.6);
  EXPECT_EQ(record[0].value("folding", true), false);
  EXPECT_EQ(record[0]["result"].value("inserted_muls", 0), 1) << record;
  // --json's options are what --config reads: ORT's keys.
  std::ifstream in(json);
  const nlohmann::json extra = nlohmann::json::parse(in)["options"]["extra_options"];
  EXPECT_EQ(extra.value("SmoothQuant", false), true) << extra;
  EXPECT_EQ(extra.value("SmoothQuantAlpha", 0.0), 0.6) << extra;
  EXPECT_EQ(extra.value("SmoothQuantFolding", true), false) << extra;
}

TEST(SmoothQuantCli, AModelWithoutMatMulHasNothingToSmooth) {
  const fs::path dir = TempDir();
  const fs::path relu = fs::path(SEQTO_ONNX_TESTDATA) / "node/test_relu/model.onnx";
  Tensor x(DType::kFloat32, {3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 7) - 3.0f;
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), x).ok());
  const fs::path out = dir / "relu.onnx";
  const std::vector<std::string> args = {"quantize",   relu.string(),  "-o",
                                         out.string(), "--calib-data", (dir / "x.npy").string(),
                                         "--recover",  "smooth_quant"};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.err.find("smooth_quant: no MatMul/Gemm"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(out));
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array()) << record;
  EXPECT_EQ(record.at(0)["result"].value("groups", -1), 0) << record;
}

TEST(SmoothQuantCli, OrtExtraOptionsRunTheSameTechnique) {
  const fs::path dir = TempDir();
  const fs::path config = dir / "q.json", out = dir / "sq.onnx";
  std::ofstream(config) << R"({"extra_options": {"SmoothQuant": true, "SmoothQuantAlpha": "auto"}})";
  std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
  args.push_back("--config");
  args.push_back(config.string());
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const nlohmann::json record = RecoveryRecord(out);
  ASSERT_TRUE(record.is_array()) << record;
  EXPECT_EQ(record.at(0).value("name", ""), "smooth_quant");
  EXPECT_EQ(record.at(0).value("alpha_search", false), true);
  EXPECT_TRUE(record.at(0)["result"].contains("alphas")) << record;
}

TEST(SmoothQuantCli, BadValuesAreOneClearError) {
  const fs::path dir = TempDir();
  const fs::path out = dir / "bad.onnx", config = dir / "bad.json";
  auto expect_error = [&](const std::vector<std::string>& extra, const std::vector<std::string>& parts) {
    std::vector<std::string> args = FashionMobilenetQuantizeArgs(out);
    args.insert(args.end(), extra.begin(), extra.end());
    ExpectUserError(args, parts, "seqto quantize: error: ");
    EXPECT_FALSE(fs::exists(out));
  };
  expect_error({"--recover", "smooth_quant:alpha=2"}, {"smooth_quant.alpha", "outside [0, 1]"});
  expect_error({"--recover", "smooth_quant:alpha=high"}, {"smooth_quant.alpha", "number"});
  expect_error({"--recover", "smooth_quant:folding=2"}, {"smooth_quant.folding", "true or false"});
  expect_error({"--recover", "smooth_quant:beta=1"}, {"unknown option 'beta'", "alpha"});
  expect_error({"--recover", "smooth_quant", "--mode", "dynamic"}, {"'smooth_quant' needs static quantization"});
  auto config_error = [&](const std::string& text, const std::vector<std::string>& parts) {
    std::ofstream(config) << text;
    expect_error({"--config", config.string()}, parts);
  };
  config_error(R"({"extra_options": {"SmoothQuant": true, "SmoothQuantAlpha": 1.5}})",
               {"extra_options.SmoothQuantAlpha", "[0, 1]", "auto"});
  config_error(R"({"extra_options": {"SmoothQuant": true, "SmoothQuantAlpha": "max"}})",
               {"extra_options.SmoothQuantAlpha", "auto"});
  config_error(R"({"extra_options": {"SmoothQuant": "yes"}})", {"extra_options.SmoothQuant", "true or false"});
  config_error(R"({"extra_options": {"SmoothQuant": true, "SmoothQuantFolding": 1}})",
               {"extra_options.SmoothQuantFolding", "true or false"});
  config_error(R"({"extra_options": {"SmoothQuantAlpha": 0.3}})",
               {"extra_options.SmoothQuantAlpha", "only with SmoothQuant: true"});
  config_error(R"({"extra_options": {"SmoothQuant": true}, "recovery": ["smooth_quant"]})",
               {"extra_options.SmoothQuant", "quantization.recovery also lists smooth_quant"});
}

}  // namespace
}  // namespace seqto
