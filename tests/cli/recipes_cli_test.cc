// The recipes stage of `seqto tune` end to end on the bundled Fashion-MNIST ResNet:
// every recipe of a list is measured and recorded, the best is the one the sweep
// builds on (its techniques in the candidates' metadata), a resumed run reads the
// choice instead of trying again, a forced recipe skips the stage, groups given 16-bit
// activations get the chosen recipe's refinements measured for them, and bad values
// are one clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kExamples = fs::path(SEQTO_SOURCE_DIR) / "examples/fashion-mnist";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

json SmallConfig(const fs::path& out) {
  json c;
  c["model"] = (kExamples / "mobilenetv2.onnx").string();
  c["out"] = out.string();
  c["data"]["eval"] = {{"path", (kFashion / "t10k-images-idx3-ubyte.gz").string()},
                       {"labels", (kFashion / "t10k-labels-idx1-ubyte.gz").string()},
                       {"samples", 200}};
  c["data"]["calibration"] = {{"samples", 32}};
  c["data"]["ranking"] = {{"samples", 64}};
  c["data"]["preprocess"] = "scale=0.00392156862745098,mean=0.2860,std=0.3530";
  c["data"]["batch_size"] = 100;
  c["ranker"] = "weights";
  c["search"] = {{"strategy", "linear"}, {"threshold", 0}, {"max_candidates", 2}};
  c["objectives"] = {"accuracy_loss", "size_bytes"};
  c["latency"] = {{"runs", 1}, {"warmup", 0}};
  c["threads"] = 1;
  return c;
}

fs::path WriteConfig(const fs::path& dir, const json& c) {
  const fs::path p = dir / "tune.json";
  WriteFile(p, c.dump(2));
  return p;
}

json ReadJson(const fs::path& p) { return json::parse(ReadFile(p)); }

// The "seqto.recovery" metadata of a model, or null.
json RecoveryOf(const fs::path& model) {
  auto m = onnxio::LoadModel(model.string());
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (!m.ok() || !m->metadata.count("seqto.recovery")) return nullptr;
  return json::parse(m->metadata.at("seqto.recovery"));
}

TEST(RecipesCli, EveryRecipeOfAListIsMeasuredAndTheBestIsSwept) {
  const fs::path dir = TempDir(), run = dir / "run";
  json c = SmallConfig(run);
  c["recipes"] = {"none", "cle", json::array({{{"name", "cle"}, {"relu6", 2}}})};
  const fs::path config = WriteConfig(dir, c);
  const std::vector<std::string> args = {"tune", config.string(), "--no-report"};
  const Result r = RunSeqto(args, std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const json report = ReadJson(run / "report.json");
  ASSERT_EQ(report["recipes"].size(), 3u) << report["recipes"];
  const json& none = report["recipes"][0];
  EXPECT_EQ(none["name"], "none");
  EXPECT_TRUE(none["recovery"].empty());
  EXPECT_EQ(report["recipes"][1]["name"], "cle");
  EXPECT_EQ(report["recipes"][2]["recovery"][0]["relu6"], 2);
  // The best by accuracy loss on the ranking samples, ties by the higher SQNR.
  size_t best = 0;
  for (size_t i = 0; i < 3; ++i) {
    const json& m = report["recipes"][i]["metrics"];
    const json& b = report["recipes"][best]["metrics"];
    EXPECT_TRUE(m["sqnr_db"].is_number());
    EXPECT_TRUE(fs::exists(run / report["recipes"][i]["model_file"].get<std::string>()));
    if (m["accuracy_loss"].get<double>() < b["accuracy_loss"].get<double>() ||
        (m["accuracy_loss"] == b["accuracy_loss"] && m["sqnr_db"].get<double>() > b["sqnr_db"].get<double>()))
      best = i;
  }
  const std::string chosen = report["recipes"][best]["name"];
  EXPECT_EQ(report["recipe"]["name"], chosen);
  EXPECT_EQ(report["recipe"]["mode"], "list");
  EXPECT_TRUE(report["stage_seconds"].contains("recipes"));
  // The sweep's candidates carry the chosen techniques (none: no metadata).
  const json meta = RecoveryOf(run / report["cycles"][0]["model_file"].get<std::string>());
  if (chosen == "none") {
    EXPECT_TRUE(meta.is_null()) << meta;
  } else {
    ASSERT_TRUE(meta.is_array());
    EXPECT_EQ(meta[0]["name"], "cle");
  }
  // Resumed: the choice is read, nothing is tried again.
  const std::vector<std::string> again = {"tune", config.string(), "--no-report", "--resume"};
  const Result r2 = RunSeqto(again, std::chrono::seconds(300));
  ASSERT_EQ(r2.exit_code, 0) << Describe(again, r2);
  EXPECT_NE(r2.err.find("recipes: " + chosen + " (from "), std::string::npos) << r2.err;
  EXPECT_EQ(r2.err.find("recipes: none: accuracy loss"), std::string::npos) << r2.err;
  EXPECT_EQ(ReadJson(run / "report.json")["recipe"]["name"], chosen);
}

TEST(RecipesCli, AForcedRecipeSkipsTheStage) {
  const fs::path dir = TempDir(), run = dir / "run";
  json c = SmallConfig(run);
  c["quantization"]["recovery"] = {"cle"};
  const fs::path config = WriteConfig(dir, c);
  const std::vector<std::string> args = {"tune", config.string(), "--no-report"};
  const Result r = RunSeqto(args, std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const json report = ReadJson(run / "report.json");
  EXPECT_TRUE(report["recipes"].empty());
  EXPECT_EQ(report["recipe"]["mode"], "forced");
  ASSERT_EQ(report["recipe"]["techniques"].size(), 1u);
  EXPECT_EQ(report["recipe"]["techniques"][0]["name"], "cle");
  EXPECT_FALSE(fs::exists(run / "recipes.json"));
  const json meta = RecoveryOf(run / report["cycles"][0]["model_file"].get<std::string>());
  ASSERT_TRUE(meta.is_array());
  EXPECT_EQ(meta[0]["name"], "cle");
  // config.json gives the same run when parsed again: the forced recipe is in it.
  EXPECT_EQ(ReadJson(run / "config.json")["quantization"]["recovery"][0]["name"], "cle");
  EXPECT_FALSE(ReadJson(run / "config.json").contains("recipes"));
}

TEST(RecipesCli, WithTheInt16ActivationFallbackTheChosenRecipeIsRefinedFor16BitGroups) {
  // The sweep gives groups 16-bit activations: bias correction measures its
  // corrections a second time with the groups at 16 bits, for the chosen recipe
  // (built by the recipes stage, or forced), and the candidates record both.
  for (const bool forced : {false, true}) {
    SCOPED_TRACE(forced ? "forced" : "chosen");
    const fs::path dir = TempDir(), run = dir / "run";
    json c = SmallConfig(run);
    if (forced)
      c["quantization"]["recovery"] = {"bias_correction"};
    else
      c["recipes"] = {"none", "bias_correction"};
    c["search"]["fallback"] = "int16_activations";
    const fs::path config = WriteConfig(dir, c);
    const std::vector<std::string> args = {"tune", config.string(), "--no-report"};
    const Result r = RunSeqto(args, std::chrono::seconds(300));
    ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
    const json report = ReadJson(run / "report.json");
    const json meta = RecoveryOf(run / report["cycles"][1]["model_file"].get<std::string>());
    if (!forced && report["recipe"]["name"] == "none") {  // a list's choice depends on the data
      EXPECT_TRUE(meta.is_null()) << meta;
      continue;
    }
    EXPECT_NE(r.err.find("bias correction (16-bit activations) pass 1/1"), std::string::npos) << r.err;
    ASSERT_TRUE(meta.is_array()) << meta;
    std::vector<std::string> stages;
    for (const auto& e : meta) {
      EXPECT_EQ(e["name"], "bias_correction");
      stages.push_back(e["stage"]);
      if (e["stage"] != "float") {
        EXPECT_GT(e["result"]["corrected"].get<int>(), 0) << e;
      }
    }
    EXPECT_EQ(stages, (std::vector<std::string>{"float", "plan", "plan_int16_activations"}));
    EXPECT_EQ(report["recipe"]["techniques"].size(), 3u);
  }
}

TEST(RecipesCli, BadValuesAreOneClearError) {
  const fs::path dir = TempDir(), run = dir / "run";
  auto expect_error = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    json c = SmallConfig(run);
    edit(c);
    const fs::path config = WriteConfig(dir, c);
    cli_test::ExpectUserError({"tune", config.string()}, parts, "seqto tune: error: ");
    EXPECT_FALSE(fs::exists(run));
  };
  expect_error([](json& c) { c["recipes"] = "sometimes"; }, {"recipes", "auto"});
  expect_error([](json& c) { c["recipes"] = json::array(); }, {"recipes", "non-empty list"});
  expect_error([](json& c) { c["recipes"] = {"cle+magic"}; }, {"recipes[0]", "unknown recovery technique 'magic'"});
  expect_error([](json& c) { c["recipes"] = {"cle+cle"}; }, {"recipes[0]", "given twice"});
  expect_error(
      [](json& c) {
        c["recipes"] = {json::array({{{"name", "cle"}, {"tolerance", -1}}})};
      },
      {"recipes[0][0]", "tolerance"});
  expect_error(
      [](json& c) {
        c["recipes"] = "auto";
        c["quantization"]["recovery"] = {"cle"};
      },
      {"recipes", "quantization.recovery", "one of the two"});
}

}  // namespace
}  // namespace seqto
