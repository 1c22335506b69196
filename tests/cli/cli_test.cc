// End-to-end tests of the `seqto` executable: for bad input (truncated, random,
// empty, missing files, directories, unsupported ops, bad .npy files and --shape
// specs) every command exits with 1 and prints exactly one error line naming the
// file (with a byte offset for malformed models) or the node, op and opset; nothing
// crashes or hangs. Real models give exit 0 and correct output.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_util.h"
#include "core/npy.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kTestData = SEQTO_ONNX_TESTDATA;
const fs::path kRelu = kTestData / "node/test_relu";

// The three commands that take a model, with otherwise valid arguments.
std::vector<std::vector<std::string>> ModelCommands(const fs::path& model, const fs::path& dir) {
  const fs::path npy = dir / "x.npy";
  if (!fs::exists(npy)) {
    EXPECT_TRUE(WriteNpy(npy.string(), Tensor(DType::kFloat32, {3, 4, 5})).ok());
  }
  return {{"info", model.string()},
          {"run", model.string(), "--input", "x=" + npy.string(), "--output-dir", (dir / "out").string()},
          {"bench", model.string(), "--runs", "1", "--warmup", "0"}};
}

TEST(Cli, TruncatedModelsNameTheFileAndOffset) {
  const fs::path dir = TempDir();
  const std::string bytes = ReadFile(kRelu / "model.onnx");
  ASSERT_GT(bytes.size(), 50u);
  for (size_t cut : {size_t{1}, size_t{2}, size_t{10}, size_t{16}, size_t{30}, bytes.size() / 2, bytes.size() - 6,
                     bytes.size() - 1}) {
    const fs::path model = dir / ("cut" + std::to_string(cut) + ".onnx");
    WriteFile(model, bytes.substr(0, cut));
    for (const auto& args : ModelCommands(model, dir)) {
      SCOPED_TRACE(args[0] + " cut at " + std::to_string(cut));
      ExpectUserError(args, {model.string(), "byte offset"});
    }
  }
}

TEST(Cli, RandomBytesEmptyMissingAndDirectory) {
  const fs::path dir = TempDir();
  std::mt19937 rng(99);
  std::string random(3000, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  WriteFile(dir / "random.onnx", random);
  WriteFile(dir / "empty.onnx", "");
  fs::create_directories(dir / "folder.onnx");
  const std::pair<fs::path, std::vector<std::string>> cases[] = {
      {dir / "random.onnx", {"random.onnx", "byte offset"}},
      {dir / "empty.onnx", {"empty.onnx", "empty"}},
      {dir / "missing.onnx", {"missing.onnx", "no such file"}},
      {dir / "folder.onnx", {"folder.onnx", "directory"}},
  };
  for (const auto& [model, parts] : cases)
    for (const auto& args : ModelCommands(model, dir)) {
      SCOPED_TRACE(args[0] + " " + model.string());
      ExpectUserError(args, parts);
    }
}

// A model with an op nobody implements.
fs::path MadeUpOpModel(const fs::path& dir) {
  ir::Model m;
  m.opsets[""] = 13;
  ir::ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.shape = std::vector<ir::Dim>{{3, ""}, {4, ""}, {5, ""}};
  ir::ValueInfo y = x;
  y.name = "y";
  m.graph.inputs = {x};
  m.graph.outputs = {y};
  ir::Node n;
  n.name = "frob";
  n.op_type = "FrobnicateTensor";
  n.inputs = {"x"};
  n.outputs = {"y"};
  m.graph.nodes = {n};
  const fs::path path = dir / "madeup.onnx";
  EXPECT_TRUE(onnxio::SaveModel(m, path.string()).ok());
  return path;
}

TEST(Cli, UnsupportedOpNamesNodeOpAndOpset) {
  const fs::path dir = TempDir();
  const fs::path model = MadeUpOpModel(dir);
  const auto commands = ModelCommands(model, dir);
  for (size_t i = 1; i < commands.size(); ++i) {  // run, bench
    SCOPED_TRACE(commands[i][0]);
    ExpectUserError(commands[i], {model.string(), "node 'frob' (FrobnicateTensor), opset 13", "unsupported op"});
  }
  // info describes the model and says what seqto cannot run.
  const Result info = RunSeqto(commands[0]);
  EXPECT_EQ(info.exit_code, 0) << Describe(commands[0], info);
  EXPECT_NE(info.out.find("FrobnicateTensor: 1  (not supported by seqto at opset 13)"), std::string::npos) << info.out;
}

TEST(Cli, RunRejectsBadNpyInputs) {
  const fs::path dir = TempDir();
  const std::string model = (kRelu / "model.onnx").string();
  auto run = [&](const fs::path& npy) {
    return std::vector<std::string>{"run", model, "-i", "x=" + npy.string(), "-o", (dir / "out").string()};
  };
  // Wrong shape and type: the error names the input and both shapes.
  ASSERT_TRUE(WriteNpy((dir / "shape.npy").string(), Tensor(DType::kFloat32, {3, 4, 6})).ok());
  ExpectUserError(run(dir / "shape.npy"), {model, "input 'x'", "float32[3x4x5]", "float32[3x4x6]"});
  ASSERT_TRUE(WriteNpy((dir / "rank.npy").string(), Tensor(DType::kFloat32, {60})).ok());
  ExpectUserError(run(dir / "rank.npy"), {"input 'x'", "float32[3x4x5]", "float32[60]"});
  ASSERT_TRUE(WriteNpy((dir / "type.npy").string(), Tensor(DType::kInt64, {3, 4, 5})).ok());
  ExpectUserError(run(dir / "type.npy"), {"input 'x'", "float32[3x4x5]", "int64[3x4x5]"});
  // Malformed files: the error names the file.
  const std::string good = ReadFile(dir / "shape.npy");
  auto header = [](const std::string& dict) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) + static_cast<char>(h.size() >> 8) +
           h;
  };
  const std::pair<std::string, std::string> bad[] = {
      {"magic.npy", "PK\x03\x04 not numpy at all"},
      {"empty.npy", ""},
      {"short_header.npy", good.substr(0, 30)},
      {"short_data.npy", good.substr(0, good.size() - 7)},
      {"extra_data.npy", good + "xyz"},
      {"huge.npy", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 1000000), }")},
      {"overflow.npy", header("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8), }")},
      {"dtype.npy", header("{'descr': '<c8', 'fortran_order': False, 'shape': (3, 4, 5), }")},
      {"fortran.npy", header("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4, 5), }")},
      {"noshape.npy", header("{'descr': '<f4', 'fortran_order': False, }")},
      {"badshape.npy", header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x, 5), }")},
      {"version.npy", std::string("\x93NUMPY\x09\x00", 8) + "junk"},
  };
  for (const auto& [name, bytes] : bad) {
    SCOPED_TRACE(name);
    WriteFile(dir / name, bytes);
    ExpectUserError(run(dir / name), {(dir / name).string()});
  }
  ExpectUserError(run(dir / "missing.npy"), {"missing.npy", "no such file"});
  fs::create_directories(dir / "folder.npy");
  ExpectUserError(run(dir / "folder.npy"), {"folder.npy", "directory"});
  // Wrong input names.
  ExpectUserError({"run", model, "-i", "nope=" + (dir / "shape.npy").string(), "-o", (dir / "out").string()},
                  {"'nope' is not an input"});
}

TEST(Cli, BenchRejectsBadShapeSpecs) {
  const std::string model = (kRelu / "model.onnx").string();
  const std::pair<std::string, std::string> specs[] = {
      {"x=abc", "bad shape"},
      {"x=3x4x", "bad shape"},
      {"x=3x0x5", "bad shape"},
      {"x=-3x4x5", "bad shape"},
      {"x=", "bad shape"},
      {"x=3x4.5x5", "bad shape"},
      {"x", "NAME=DIMS"},
      {"nope=3x4x5", "'nope' is not an input"},
      {"x=999999999999x999999999999", "too large"},
      {"x=3x4", "float32[3x4]"},  // wrong rank: the runtime names both shapes
  };
  for (const auto& [spec, expect] : specs) {
    SCOPED_TRACE(spec);
    ExpectUserError({"bench", model, "--runs", "1", "--warmup", "0", "--shape", spec}, {expect});
  }
  ExpectUserError({"bench", model, "--runs", "0"}, {"--runs"});
  ExpectUserError({"bench", model, "--batch", "abc"}, {"--batch"});
}

TEST(Cli, UsageErrorsAreOneLine) {
  ExpectUserError({"run"}, {"required"});
  ExpectUserError({"frobnicate"}, {});
  ExpectUserError({"info", (kRelu / "model.onnx").string(), "--no-such-flag"}, {"--no-such-flag"});
  const Result help = RunSeqto({"run", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--output-dir"), std::string::npos);
}

TEST(Cli, InfoDescribesARealModel) {
  const fs::path dir = TempDir();
  const std::string model = (kRelu / "model.onnx").string();
  const fs::path json_path = dir / "info.json";
  const std::vector<std::string> args = {"info", model, "--json", json_path.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* line : {"opset:      14", "x: float32[3x4x5]", "y: float32[3x4x5]", "nodes:      1", "Relu: 1"})
    EXPECT_NE(r.out.find(line), std::string::npos) << "'" << line << "' missing:\n" << r.out;
  const auto j = nlohmann::json::parse(ReadFile(json_path));
  EXPECT_EQ(j["model"], model);
  EXPECT_EQ(j["opset"], 14);
  EXPECT_EQ(j["inputs"][0]["name"], "x");
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json({3, 4, 5}));
  EXPECT_EQ(j["op_types"]["Relu"], 1);
  EXPECT_TRUE(j["unsupported_ops"].empty());
}

TEST(Cli, RunMatchesTheTestDataOutput) {
  const fs::path dir = TempDir();
  auto input = onnxio::LoadTensorFile((kRelu / "test_data_set_0/input_0.pb").string());
  auto expected = onnxio::LoadTensorFile((kRelu / "test_data_set_0/output_0.pb").string());
  ASSERT_TRUE(input.ok() && expected.ok());
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), input->second).ok());
  const std::string model = (kRelu / "model.onnx").string();
  // NAME=FILE and, for a single-input model, FILE alone.
  for (const std::string& spec : {"x=" + (dir / "x.npy").string(), (dir / "x.npy").string()}) {
    const fs::path out = dir / ("out_" + std::to_string(spec.size()));
    const std::vector<std::string> args = {"run", model, "--input", spec, "--output-dir", out.string()};
    const Result r = RunSeqto(args);
    ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
    EXPECT_TRUE(r.err.empty()) << r.err;
    EXPECT_NE(r.out.find("y: float32[3x4x5]"), std::string::npos) << r.out;
    auto y = ReadNpy((out / "y.npy").string());
    ASSERT_TRUE(y.ok()) << y.error().message;
    EXPECT_EQ(y->dtype(), DType::kFloat32);
    EXPECT_EQ(y->shape(), expected->second.shape());
    EXPECT_EQ(y->ToDoubles(), expected->second.ToDoubles());
  }
}

TEST(Cli, BenchRunsARealModel) {
  const fs::path dir = TempDir();
  const std::string model = (kRelu / "model.onnx").string();
  const std::vector<std::string> args = {"bench", model,       "--runs", "3",      "--warmup",
                                         "1",     "--threads", "1",      "--json", (dir / "bench.json").string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.out.find("latency ms"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(ReadFile(dir / "bench.json"));
  EXPECT_EQ(j["model"], model);
  EXPECT_EQ(j["runner"], "engine");
  EXPECT_EQ(j["batch"], 3);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["runs"], 3);
  for (const char* k : {"mean", "p50", "p95", "min", "max", "stddev"})
    EXPECT_GE(j["latency_ms"][k].get<double>(), 0.0) << k;
  const auto& lat = j["latency_ms"];
  EXPECT_EQ(lat["unstable"].get<bool>(), lat["p95"].get<double>() > 1.5 * lat["p50"].get<double>());
  EXPECT_TRUE(lat["other_cores"].is_null()) << "4 runs of a Relu are far too short to tell";
  EXPECT_FALSE(lat["busy"].get<bool>());
}

// --profile times every node of the optimized graph: the table names the op types
// that ran, and the JSON's per-node times add up to no more than a run.
TEST(Cli, BenchProfileShowsWhereTheTimeGoes) {
  const fs::path dir = TempDir();
  const std::string model = (kTestData / "node/test_qlinearconv/model.onnx").string();
  const std::vector<std::string> args = {"bench",
                                         model,
                                         "--runs",
                                         "3",
                                         "--warmup",
                                         "1",
                                         "--threads",
                                         "1",
                                         "--profile",
                                         "--json",
                                         (dir / "bench.json").string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.out.find("profile: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("QLinearConv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("slowest nodes"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(ReadFile(dir / "bench.json"));
  ASSERT_TRUE(j.contains("profile")) << j.dump();
  ASSERT_EQ(j["profile"]["nodes"].size(), 1u) << j.dump();
  EXPECT_EQ(j["profile"]["nodes"][0]["name"], "QLinearConv_0") << "unnamed nodes get generated names";
  EXPECT_GE(j["profile"]["nodes"][0]["ms"].get<double>(), 0.0);
  EXPECT_EQ(j["profile"]["ops"][0]["nodes"], 1);
}

}  // namespace
}  // namespace seqto
