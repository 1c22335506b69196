// `seqto tune`'s guards around the run directory, end to end: the config is checked
// before the directory is created; calibration and ranking data default to samples
// held out of evaluation; a resume with other settings or other file content is
// refused naming what differs; a second process on the same directory is refused;
// a report that cannot be written is not a success. Also the one serializer of the
// quantization options as `seqto quantize --json` writes it, and JSON numbers out of
// range in a config and a report.json.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli_util.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kExamples = fs::path(SEQTO_SOURCE_DIR) / "examples/fashion-mnist";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

// A tuning job of a few seconds: ResNet, 200 test images, calibration and ranking
// drawn from the evaluation data (held out), 2 candidates.
json SmallConfig(const fs::path& model, const fs::path& out) {
  json c;
  c["model"] = model.string();
  c["out"] = out.string();
  c["data"]["eval"] = {{"path", (kFashion / "t10k-images-idx3-ubyte.gz").string()},
                       {"labels", (kFashion / "t10k-labels-idx1-ubyte.gz").string()},
                       {"samples", 200}};
  c["data"]["calibration"] = {{"samples", 32}};
  c["data"]["ranking"] = {{"samples", 16}};
  c["data"]["preprocess"] = "scale=0.00392156862745098,mean=0.2860,std=0.3530";
  c["data"]["batch_size"] = 100;
  c["ranker"] = "weights";
  c["recipes"] = "none";  // tested on its own in recipes_cli_test.cc
  c["search"] = {{"strategy", "linear"}, {"threshold", 0}, {"max_candidates", 2}};
  c["objectives"] = {"accuracy_loss", "size_bytes"};
  c["latency"] = {{"runs", 1}, {"warmup", 0}};
  c["threads"] = 1;
  return c;
}

fs::path WriteConfig(const fs::path& dir, const std::string& name, const json& c) {
  const fs::path p = dir / name;
  WriteFile(p, c.dump(2));
  return p;
}

TEST(TuneRunDir, BadEnumeratedValuesAreRefusedBeforeTheRunDirectoryIsCreated) {
  const fs::path dir = TempDir(), run = dir / "run";
  struct Case {
    std::function<void(json&)> edit;
    std::string key, known;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["ranker"] = "bogus"; }, "ranker", "seqto-published"},
      {[](json& j) { j["search"]["strategy"] = "bogus"; }, "search.strategy", "bisect"},
      {[](json& j) { j["search"]["fallback"] = "bogus"; }, "search.fallback", "float16"},
      {[](json& j) { j["runner"] = "bogus"; }, "runner", "ort"},
      {[](json& j) { j["objectives"] = {"bogus"}; }, "objectives[0]", "latency_ms"},
      {[](json& j) { j["quantization"]["calibrate_method"] = "bogus"; }, "quantization.calibrate_method", "entropy"},
      {[](json& j) { j["quantization"]["activation_type"] = "bogus"; }, "quantization.activation_type", "uint16"},
      {[](json& j) { j["quantization"]["weight_type"] = "bogus"; }, "quantization.weight_type", "int16"},
      {[](json& j) {
         j["quantization"]["extra_options"]["TensorQuantOverrides"]["x"] = {{"quant_type", "bogus"}};
       },
       "quantization.extra_options.TensorQuantOverrides.x.quant_type", "int8"},
      {[](json& j) { j["quantization"]["mode"] = "bogus"; }, "quantization.mode", "dynamic"},
  };
  for (const auto& c : cases) {
    json j = SmallConfig(kExamples / "resnet.onnx", run);
    c.edit(j);
    const fs::path config = WriteConfig(dir, "tune.json", j);
    ExpectUserError({"tune", config.string()}, {config.string(), c.key + ": ", "'bogus'", c.known},
                    "seqto tune: error: ");
    EXPECT_FALSE(fs::exists(run)) << c.key << ": the run directory was created";
  }
  // A number no double holds is a user error naming the file and the key.
  WriteFile(dir / "big.json", "{\"model\": \"m.onnx\",\n \"search\": {\"threshold\": 1e999}}");
  ExpectUserError({"tune", (dir / "big.json").string()},
                  {(dir / "big.json").string(), "line 2", "search.threshold", "1e999"}, "seqto tune: error: ");
}

TEST(TuneRunDir, HeldOutSplitDigestsAndResumeChecks) {
  const fs::path dir = TempDir(), run = dir / "run";
  const fs::path model = dir / "model.onnx";
  fs::copy_file(kExamples / "resnet.onnx", model);
  const json base = SmallConfig(model, run);
  const fs::path config = WriteConfig(dir, "tune.json", base);
  const std::vector<std::string> args = {"tune", config.string(), "--no-report"};
  const Result r = RunSeqto(args, std::chrono::seconds(600));
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  // The split is stated and recorded: 32 samples held out, evaluation on 200 others.
  EXPECT_NE(r.err.find("seqto tune: data split: 32 of the evaluation data's 10000 samples are held out for "
                       "calibration (32) and ranking (16); evaluation uses 200 of the other 9968"),
            std::string::npos)
      << r.err;
  // No warning about the data or the settings. The one warning that depends on the
  // machine rather than the run (other processes were busy while latency was measured,
  // as under a parallel ctest) is allowed.
  std::istringstream err_lines(r.err);
  for (std::string line; std::getline(err_lines, line);) {
    if (line.find("warning") != std::string::npos) {
      EXPECT_NE(line.find("the machine looks busy"), std::string::npos) << line;
    }
  }
  const json report = json::parse(ReadFile(run / "report.json"));
  const json& data = report["settings"]["data"];
  EXPECT_EQ(data["held_out_of_eval"], 32);
  EXPECT_EQ(data["eval"]["samples"], 200);
  EXPECT_EQ(data["calibration"]["source"], "held out of the evaluation data");
  EXPECT_EQ(data["calibration"]["overlap_with_eval"], 0);
  EXPECT_EQ(data["ranking"]["samples"], 16);
  // The settings: the one shape of the quantization options, also in config.json.
  EXPECT_EQ(report["settings"]["config"]["quantization"]["extra_options"]["CalibPercentile"], 99.999);
  EXPECT_EQ(json::parse(ReadFile(run / "config.json")), report["settings"]["config"]);
  EXPECT_FALSE(fs::exists(run / "report.html"));  // --no-report
  // Digests of the model and every data file (the labels found next to the images too).
  const json digests = json::parse(ReadFile(run / "digests.json"))["sha256"];
  EXPECT_EQ(digests.size(), 3u) << digests.dump(1);
  EXPECT_TRUE(digests.contains(fs::absolute(model).lexically_normal().string())) << digests.dump(1);

  // Resuming with the same settings (from another --out spelling) works.
  const Result same = RunSeqto({"tune", config.string(), "--resume", "--no-report", "-q"}, std::chrono::seconds(600));
  EXPECT_EQ(same.exit_code, 0) << same.err;

  // Another setting that changes results: refused, naming it.
  json changed = base;
  changed["quantization"]["extra_options"]["CalibPercentile"] = 99.99;
  const fs::path changed_config = WriteConfig(dir, "changed.json", changed);
  ExpectUserError({"tune", changed_config.string(), "--resume", "-q"},
                  {run.string(), "quantization.extra_options.CalibPercentile: 99.999 in the run, 99.99 now"},
                  "seqto tune: error: ");

  // The model's content changed under the same name: refused, naming the file.
  auto m = onnxio::LoadModel(model.string());
  ASSERT_TRUE(m.ok());
  ir::Model edited = *m;
  bool changed_weight = false;
  for (auto& [name, t] : edited.graph.initializers)
    if (t.dtype() == DType::kFloat32 && t.numel() > 0) {
      t.data<float>()[0] += 1.0f;
      changed_weight = true;
      break;
    }
  ASSERT_TRUE(changed_weight);
  ASSERT_TRUE(onnxio::SaveModel(edited, model.string()).ok());
  ExpectUserError({"tune", config.string(), "--resume", "-q"},
                  {run.string(), "cannot resume", model.string(), "content changed"}, "seqto tune: error: ");
}

TEST(TuneRunDir, SecondProcessOnTheSameRunDirectoryIsRefused) {
  const fs::path dir = TempDir(), run = dir / "run";
  json c = SmallConfig(kExamples / "resnet.onnx", run);
  c["search"] = {{"strategy", "linear"}, {"threshold", -100}};  // every candidate: long enough
  c["data"]["eval"]["samples"] = 2000;
  const pid_t first = Spawn({"tune", WriteConfig(dir, "long.json", c).string(), "-q", "--no-report"}, dir);
  // The second process: another config (no warning line) for the same directory.
  const fs::path config = WriteConfig(dir, "tune.json", SmallConfig(kExamples / "resnet.onnx", run));
  // Wait until the first holds the lock (its pid is in the lock file).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         ReadFile(run / "tune.lock").find(std::to_string(first)) == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NE(ReadFile(run / "tune.lock").find(std::to_string(first)), std::string::npos);
  // A fresh run and a --resume on the same directory: one clear error each.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"tune", config.string(), "-q"},
                                               std::vector<std::string>{"tune", config.string(), "--resume", "-q"}})
    ExpectUserError(args, {run.string(), "another process is using this directory (pid " + std::to_string(first)},
                    "seqto tune: error: ");
  // The first was still at work all along (else the test proved nothing).
  int status = 0;
  EXPECT_EQ(waitpid(first, &status, WNOHANG), 0) << "the first run ended before the second was refused";
  kill(first, SIGKILL);
  waitpid(first, &status, 0);
}

TEST(TuneRunDir, OverlapIsWarnedAndAFailedReportIsNotSuccess) {
  const fs::path dir = TempDir(), run = dir / "run";
  json c = SmallConfig(kExamples / "resnet.onnx", run);
  // Calibration explicitly on the evaluation file, all of it: every evaluation sample overlaps.
  c["data"]["calibration"] = {{"path", c["data"]["eval"]["path"]}, {"samples", 10000}};
  const fs::path config = WriteConfig(dir, "tune.json", c);
  // report.html cannot be written: a folder is in its place.
  fs::create_directories(run / "report.html");
  const std::vector<std::string> args = {"tune", config.string(), "-q"};
  const Result r = RunSeqto(args, std::chrono::seconds(600));
  EXPECT_EQ(r.exit_code, 1) << Describe(args, r);
  // What this run says about its input (a busy machine's warning is about the machine:
  // it may come too, and is tested in tune_latency_cli_test).
  std::vector<std::string> lines;
  for (const std::string& line : r.ErrLines())
    if (line.find("warning: the machine looks busy") == std::string::npos) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_EQ(lines[0].rfind("seqto tune: warning: calibration data overlaps the evaluation data: 200 of its 10000 "
                           "samples are also evaluated",
                           0),
            0u)
      << lines[0];
  EXPECT_EQ(lines[1].rfind("seqto tune: error: the HTML report was not written (", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("seqto report " + run.string()), std::string::npos) << lines[1];
  // The results stay; nothing half-written is left.
  const json report = json::parse(ReadFile(run / "report.json"));
  EXPECT_GE(report["cycles"].size(), 1u);
  EXPECT_EQ(report["settings"]["data"]["calibration"]["overlap_with_eval"], 200);
  EXPECT_NE(report["settings"]["data"]["calibration"]["warning"].get<std::string>().find("overlaps"),
            std::string::npos);
  EXPECT_EQ(report["settings"]["data"]["ranking"]["source"], "held out of the evaluation data");
  for (const auto& e : fs::recursive_directory_iterator(run))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(TuneRunDir, ReportJsonWithANumberOutOfRangeIsAUserError) {
  const fs::path dir = TempDir();
  WriteFile(dir / "run" / "report.json", "{\"model\": \"m.onnx\",\n\"settings\": {\"threshold\": 1e999}}");
  ExpectUserError({"report", (dir / "run").string()},
                  {(dir / "run" / "report.json").string(), "line 2", "settings.threshold", "1e999"},
                  "seqto report: error: ");
}

// `seqto quantize --json` writes the options in the shape --config reads: fed back,
// they give the same options; an override's zero point outside its type names the tensor.
TEST(TuneRunDir, QuantizeJsonOptionsRoundTripAndOverrideRange) {
  const fs::path dir = TempDir();
  const std::vector<std::string> first = {"quantize",
                                          (kExamples / "resnet.onnx").string(),
                                          "-o",
                                          (dir / "a.onnx").string(),
                                          "--calib-data",
                                          (kExamples / "sample_input.npy").string(),
                                          "--calibration",
                                          "percentile",
                                          "--per-channel",
                                          "--json",
                                          (dir / "a.json").string()};
  const Result r = RunSeqto(first);
  ASSERT_EQ(r.exit_code, 0) << Describe(first, r);
  const json a = json::parse(ReadFile(dir / "a.json"));
  WriteFile(dir / "options.json", a["options"].dump(2));
  const std::vector<std::string> second = {"quantize",     (kExamples / "resnet.onnx").string(),
                                           "-o",           (dir / "b.onnx").string(),
                                           "--calib-data", (kExamples / "sample_input.npy").string(),
                                           "--config",     (dir / "options.json").string(),
                                           "--json",       (dir / "b.json").string()};
  const Result r2 = RunSeqto(second);
  ASSERT_EQ(r2.exit_code, 0) << Describe(second, r2);
  const json b = json::parse(ReadFile(dir / "b.json"));
  EXPECT_EQ(a["options"], b["options"]);
  EXPECT_EQ(ReadFile(dir / "a.onnx"), ReadFile(dir / "b.onnx"));

  const std::string tensor = a["groups"][0]["activations"][0].get<std::string>();
  json options = a["options"];
  options["extra_options"]["TensorQuantOverrides"][tensor] = {{{"scale", 0.05}, {"zero_point", 999}}};
  WriteFile(dir / "bad.json", options.dump(2));
  ExpectUserError({"quantize", (kExamples / "resnet.onnx").string(), "-o", (dir / "c.onnx").string(), "--calib-data",
                   (kExamples / "sample_input.npy").string(), "--config", (dir / "bad.json").string()},
                  {"TensorQuantOverrides: tensor '" + tensor + "'", "zero_point 999 is outside the range of uint8"},
                  "seqto quantize: error: ");
  EXPECT_FALSE(fs::exists(dir / "c.onnx"));
  // A weight's type is known only when the plan is made (after calibration): the error
  // comes then, the same.
  const std::string weight = a["groups"][0]["weights"][0].get<std::string>();
  options = a["options"];
  options["extra_options"]["TensorQuantOverrides"][weight] = {{{"scale", 0.05}, {"zero_point", 999}}};
  WriteFile(dir / "bad_weight.json", options.dump(2));
  const std::vector<std::string> args = {
      "quantize",     (kExamples / "resnet.onnx").string(),      "-o",       (dir / "d.onnx").string(),
      "--calib-data", (kExamples / "sample_input.npy").string(), "--config", (dir / "bad_weight.json").string()};
  const Result bad = RunSeqto(args);
  EXPECT_EQ(bad.exit_code, 1) << Describe(args, bad);
  const auto lines = bad.ErrLines();
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("seqto quantize: error: "), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("TensorQuantOverrides: tensor '" + weight +
                              "': zero_point 999 is outside the range of int8 [-128, 127]"),
            std::string::npos)
      << lines.back();
  EXPECT_FALSE(fs::exists(dir / "d.onnx"));
}

}  // namespace
}  // namespace seqto
