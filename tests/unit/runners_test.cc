// Runners (src/runners): the batch helpers, the engine runner, runner selection, and
// the ort runner's handling of everything around ONNX Runtime (finding Node.js and
// tools/ort, a child that crashes, hangs or fails, temporary files). The ort runner
// against real ONNX Runtime is in tests/interop/runners_interop_test.cc; here a shell
// script stands in for node, so these tests need neither Node.js nor ORT.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/npy.h"
#include "onnxio/model_io.h"
#include "runners/engine_runner.h"
#include "runners/ort_runner.h"
#include "runners/runner.h"

namespace seqto {
namespace {

namespace fs = std::filesystem;
using runtime::TensorMap;

// Sets (or unsets, with nullptr) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh folder for one test, removed afterwards.
class TestDir {
 public:
  explicit TestDir(const std::string& stem)
      : path_(fs::path(::testing::TempDir()) / ("seqto_runners_" + stem + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void WriteFile(const fs::path& path, const std::string& text, bool executable = false) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  if (executable) ::chmod(path.c_str(), 0755);
}

Tensor Iota(Shape shape, float start) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

// One-node model: y = op(x), x float32[N x 2]; `attributes` for the node.
ir::Model UnaryModel(const std::string& op, bool scalar_output = false) {
  ir::Model model;
  model.opsets[""] = 13;
  model.graph.name = op;
  ir::ValueInfo x, y;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.shape = std::vector<ir::Dim>{{-1, "N"}, {2, ""}};
  y.name = "y";
  y.dtype = DType::kFloat32;
  model.graph.inputs.push_back(x);
  model.graph.outputs.push_back(y);
  ir::Node node;
  node.name = "node";
  node.op_type = op;
  node.inputs = {"x"};
  node.outputs = {"y"};
  if (scalar_output) {
    ir::Attribute keepdims;
    keepdims.type = ir::Attribute::Type::kInt;
    keepdims.i = 0;
    node.attributes["keepdims"] = keepdims;
  }
  model.graph.nodes.push_back(node);
  return model;
}

// ---------------------------------------------------------------------------
// Batch helpers

TEST(RunnersConcat, JoinsUnevenPartsInOrder) {
  auto joined = runners::ConcatDim0({Iota({1, 2}, 0), Iota({3, 2}, 10), Iota({0, 2}, 99), Iota({2, 2}, 20)});
  ASSERT_TRUE(joined) << joined.error().message;
  EXPECT_EQ(joined->Describe(), "float32[6x2]");
  EXPECT_EQ(joined->ToDoubles(), (std::vector<double>{0, 1, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23}));
}

TEST(RunnersConcat, RejectsMismatchedParts) {
  auto shape = runners::ConcatDim0({Iota({1, 2}, 0), Iota({1, 3}, 0)});
  ASSERT_FALSE(shape);
  EXPECT_NE(shape.error().message.find("batch 1 gives float32[1x3], batch 0 gives float32[1x2]"), std::string::npos)
      << shape.error().message;
  auto dtype = runners::ConcatDim0({Iota({1, 2}, 0), Tensor(DType::kInt64, {1, 2})});
  ASSERT_FALSE(dtype);
  EXPECT_NE(dtype.error().message.find("int64[1x2]"), std::string::npos) << dtype.error().message;
  // A scalar is fine alone, not over several batches.
  auto one = runners::ConcatDim0({Tensor::Scalar<float>(4)});
  ASSERT_TRUE(one);
  EXPECT_EQ(one->ToDoubles(), std::vector<double>{4});
  auto two = runners::ConcatDim0({Tensor::Scalar<float>(4), Tensor::Scalar<float>(5)});
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("scalar"), std::string::npos) << two.error().message;
}

TEST(RunnersConcat, SliceIsTheInverse) {
  const Tensor t = Iota({5, 2}, 0);
  auto a = runners::SliceDim0(t, 0, 2), b = runners::SliceDim0(t, 2, 5);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->ToDoubles(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(b->Describe(), "float32[3x2]");
  auto back = runners::ConcatDim0({*a, *b});
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ToDoubles(), t.ToDoubles());
  EXPECT_FALSE(runners::SliceDim0(t, 3, 6));
  EXPECT_FALSE(runners::SliceDim0(t, 3, 2));
  EXPECT_FALSE(runners::SliceDim0(Tensor::Scalar<float>(1), 0, 1));
}

TEST(RunnersConcat, BatchesMustNameTheSameInputs) {
  EXPECT_FALSE(runners::CheckBatches({}));
  EXPECT_TRUE(runners::CheckBatches({{{"x", Iota({1, 2}, 0)}}, {{"x", Iota({2, 2}, 0)}}}));
  const Status s = runners::CheckBatches({{{"x", Iota({1, 2}, 0)}}, {{"z", Iota({2, 2}, 0)}}});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "batch 1 has inputs {'z'}, batch 0 has {'x'}");
}

// ---------------------------------------------------------------------------
// Runner selection

TEST(RunnersMake, KnowsEngineAndOrt) {
  EXPECT_EQ(runners::RunnerNames(), (std::vector<std::string>{"engine", "ort"}));
  auto engine = runners::MakeRunner("engine", {});
  ASSERT_TRUE(engine) << engine.error().message;
  EXPECT_EQ((*engine)->name(), "engine");
  auto unknown = runners::MakeRunner("tensorrt", {});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().kind, ErrorKind::kUser);
  EXPECT_EQ(unknown.error().message, "unknown runner 'tensorrt' (known runners: engine, ort)");
  EXPECT_FALSE(runners::MakeRunner("engine", {.threads = -1}));
  EXPECT_FALSE(runners::MakeRunner("engine", {.threads = 0, .timeout_s = 0}));
}

// ---------------------------------------------------------------------------
// Engine runner

fs::path ExampleModel() { return fs::path(SEQTO_SOURCE_DIR) / "examples" / "fashion-mnist" / "resnet.onnx"; }

TEST(RunnersEngine, UnevenBatchesMatchOneBatch) {
  auto all = ReadNpy((fs::path(SEQTO_SOURCE_DIR) / "examples" / "fashion-mnist" / "sample_input.npy").string());
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->dim(0), 8);
  auto first = runners::SliceDim0(*all, 0, 3), second = runners::SliceDim0(*all, 3, 8);
  ASSERT_TRUE(first && second);
  runners::EngineRunner runner({.threads = 1});
  auto split = runner.Run(ExampleModel().string(), {{{"input", *first}}, {{"input", *second}}});
  ASSERT_TRUE(split) << split.error().message;
  auto whole = runner.Run(ExampleModel().string(), {{{"input", *all}}});
  ASSERT_TRUE(whole) << whole.error().message;
  ASSERT_EQ(split->size(), 1u);
  const Tensor& a = split->at("logits");
  const Tensor& b = whole->at("logits");
  ASSERT_EQ(a.Describe(), "float32[8x10]");
  ASSERT_EQ(b.Describe(), a.Describe());
  // Batch size may change the kernels' blocking, hence a tolerance.
  const auto va = a.ToDoubles(), vb = b.ToDoubles();
  double scale = 0;
  for (double v : vb) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0);
  for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-5 * scale) << "element " << i;
}

TEST(RunnersEngine, ConcatenatesOutputsInBatchOrder) {
  TestDir dir("engine_concat");
  const std::string path = dir / "neg.onnx";
  ASSERT_TRUE(onnxio::SaveModel(UnaryModel("Neg"), path).ok());
  runners::EngineRunner runner({});
  auto out = runner.Run(path, {{{"x", Iota({2, 2}, 0)}}, {{"x", Iota({1, 2}, 10)}}, {{"x", Iota({3, 2}, 20)}}});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->at("y").Describe(), "float32[6x2]");
  EXPECT_EQ(out->at("y").ToDoubles(), (std::vector<double>{-0, -1, -2, -3, -10, -11, -20, -21, -22, -23, -24, -25}));
}

TEST(RunnersEngine, ReloadsAModelFileThatChanged) {
  TestDir dir("engine_reload");
  const std::string path = dir / "model.onnx";
  runners::EngineRunner runner({});
  ASSERT_TRUE(onnxio::SaveModel(UnaryModel("Neg"), path).ok());
  auto neg = runner.Run(path, {{{"x", Iota({1, 2}, 1)}}});
  ASSERT_TRUE(neg) << neg.error().message;
  EXPECT_EQ(neg->at("y").ToDoubles(), (std::vector<double>{-1, -2}));
  ASSERT_TRUE(onnxio::SaveModel(UnaryModel("Identity"), path).ok());
  auto same = runner.Run(path, {{{"x", Iota({1, 2}, 1)}}});
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same->at("y").ToDoubles(), (std::vector<double>{1, 2}));
}

TEST(RunnersEngine, ScalarOutputOnlyFromOneBatch) {
  TestDir dir("engine_scalar");
  const std::string path = dir / "sum.onnx";
  ASSERT_TRUE(onnxio::SaveModel(UnaryModel("ReduceSum", /*scalar_output=*/true), path).ok());
  runners::EngineRunner runner({});
  auto one = runner.Run(path, {{{"x", Iota({2, 2}, 0)}}});
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->at("y").ToDoubles(), std::vector<double>{6});
  auto two = runner.Run(path, {{{"x", Iota({2, 2}, 0)}}, {{"x", Iota({1, 2}, 0)}}});
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message.find("output 'y': a scalar cannot be concatenated over 2 batches"), std::string::npos)
      << two.error().message;
}

TEST(RunnersEngine, LatencyStatsAreSane) {
  auto all = ReadNpy((fs::path(SEQTO_SOURCE_DIR) / "examples" / "fashion-mnist" / "sample_input.npy").string());
  ASSERT_TRUE(all) << all.error().message;
  auto runner = runners::MakeRunner("engine", {.threads = 1});
  ASSERT_TRUE(runner);
  auto stats = (*runner)->Latency(ExampleModel().string(), {{"input", *all}}, {.warmup = 1, .runs = 7});
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->runs, 7);
  EXPECT_GT(stats->min, 0);
  EXPECT_LE(stats->min, stats->p50);
  EXPECT_LE(stats->p50, stats->p95);
  EXPECT_LE(stats->p95, stats->max);
  EXPECT_GE(stats->mean, stats->min);
  EXPECT_LE(stats->mean, stats->max);
  EXPECT_FALSE((*runner)->Latency(ExampleModel().string(), {{"input", *all}}, {.warmup = 0, .runs = 0}));
  // Measure (the default: Run, then Latency) gives both.
  auto m =
      (*runner)->Measure(ExampleModel().string(), {{{"input", *all}}}, {{"input", *all}}, {.warmup = 0, .runs = 2});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->outputs.at("logits").Describe(), "float32[8x10]");
  EXPECT_EQ(m->latency.runs, 2);
}

TEST(RunnersEngine, ErrorsNameTheModelAndBatch) {
  runners::EngineRunner runner({});
  auto missing = runner.Run("/nonexistent/model.onnx", {{{"x", Iota({1, 2}, 0)}}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("/nonexistent/model.onnx"), std::string::npos) << missing.error().message;
  TestDir dir("engine_errors");
  const std::string path = dir / "neg.onnx";
  ASSERT_TRUE(onnxio::SaveModel(UnaryModel("Neg"), path).ok());
  auto bad = runner.Run(path, {{{"x", Iota({1, 2}, 0)}}, {{"x", Iota({1, 5}, 0)}}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("batch 1 of 2"), std::string::npos) << bad.error().message;
  auto none = runner.Run(path, {});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no batches"), std::string::npos) << none.error().message;
}

// ---------------------------------------------------------------------------
// Ort runner: finding the tool

TEST(RunnersOrtTool, BadOrtDirIsOneClearError) {
  TestDir dir("ort_baddir");
  ScopedEnv env("SEQTO_ORT_DIR", (dir / "nowhere").c_str());
  auto runner = runners::MakeRunner("ort", {});
  ASSERT_FALSE(runner);
  EXPECT_EQ(runner.error().kind, ErrorKind::kUser);
  const std::string& m = runner.error().message;
  EXPECT_NE(m.find("$SEQTO_ORT_DIR=" + (dir / "nowhere")), std::string::npos) << m;
  EXPECT_NE(m.find("has no ort_run.js"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(RunnersOrtTool, MissingNpmPackagesNameTheInstallCommand) {
  TestDir dir("ort_nomodules");
  WriteFile(dir.path() / "ort_run.js", "");
  ScopedEnv env("SEQTO_ORT_DIR", dir.path().c_str());
  const Status s = runners::OrtAvailable();
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("onnxruntime-node is not installed in " + dir.path().string()), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("npm ci --ignore-scripts --prefix " + dir.path().string()), std::string::npos)
      << s.message();
}

TEST(RunnersOrtTool, MissingNodeIsOneClearError) {
  TestDir dir("ort_nonode");
  ScopedEnv node("SEQTO_NODE", (dir / "no-node").c_str());
  auto runner = runners::MakeRunner("ort", {});
  ASSERT_FALSE(runner);
  EXPECT_EQ(runner.error().message, "ort runner: $SEQTO_NODE=" + (dir / "no-node") + " is not an executable");
  ScopedEnv unset("SEQTO_NODE", nullptr);
  ScopedEnv path("PATH", dir.path().c_str());  // no node on this PATH
  auto on_path = runners::MakeRunner("ort", {});
  ASSERT_FALSE(on_path);
  EXPECT_NE(on_path.error().message.find("Node.js ('node') not found on PATH"), std::string::npos)
      << on_path.error().message;
}

// ---------------------------------------------------------------------------
// Ort runner: the child process, with a shell script as node

// A tools/ort folder that passes the installation checks and a fake node whose body
// is `script` (sh); temporary files go to a folder of their own so tests can check
// that none are left behind.
class FakeOrt {
 public:
  FakeOrt(const std::string& stem, const std::string& script)
      : dir_(stem),
        ort_dir_env_("SEQTO_ORT_DIR", (dir_ / "ort").c_str()),
        node_env_("SEQTO_NODE", (dir_ / "node").c_str()),
        tmp_env_("TMPDIR", (dir_ / "tmp").c_str()) {
    WriteFile(dir_.path() / "ort" / "ort_run.js", "");
    WriteFile(dir_.path() / "ort" / "node_modules" / "onnxruntime-node" / "package.json", "{}");
    WriteFile(dir_.path() / "node", "#!/bin/sh\n" + script + "\n", /*executable=*/true);
    fs::create_directories(dir_.path() / "tmp");
  }
  bool TempIsEmpty() const { return fs::is_empty(dir_.path() / "tmp"); }

 private:
  TestDir dir_;
  ScopedEnv ort_dir_env_, node_env_, tmp_env_;
};

const TensorMap kBatch = {{"x", Iota({1, 2}, 0)}};

TEST(RunnersOrtChild, HangIsKilledAfterTheTimeout) {
  FakeOrt fake("ort_hang", "exec sleep 60");
  runners::OrtRunner runner({.threads = 0, .timeout_s = 0.5});
  const auto t0 = std::chrono::steady_clock::now();
  auto out = runner.Run("model.onnx", {kBatch});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message,
            "ort runner: model.onnx: node did not finish within 0.5 s and was killed "
            "(a slower model needs a longer runner timeout)");
  EXPECT_LT(seconds, 10);
  EXPECT_TRUE(fake.TempIsEmpty());
}

TEST(RunnersOrtChild, CrashIsAnInternalError) {
  FakeOrt fake("ort_crash", "kill -SEGV $$");
  runners::OrtRunner runner({});
  auto out = runner.Latency("model.onnx", kBatch, {});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kInternal);
  EXPECT_NE(out.error().message.find("ort runner: model.onnx: node was killed by signal 11"), std::string::npos)
      << out.error().message;
  EXPECT_TRUE(fake.TempIsEmpty());
}

TEST(RunnersOrtChild, ToolErrorBecomesOneUserErrorLine) {
  // ort_run.js reports its errors as "ort_run: ..." on stderr, with exit code 1;
  // $2 is the model argument.
  FakeOrt fake("ort_usererr",
               "echo 'some warning' >&2\n"
               "echo \"ort_run: $2: ONNX Runtime cannot load the model: bad graph\" >&2\nexit 1");
  runners::OrtRunner runner({});
  auto out = runner.Run("m.onnx", {kBatch});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kUser);
  EXPECT_EQ(out.error().message, "ort runner: m.onnx: ONNX Runtime cannot load the model: bad graph");
  EXPECT_TRUE(fake.TempIsEmpty());
  // The child is given ./-m.onnx (so it is not read as an option); the message names
  // the model as the caller wrote it.
  auto dash = runner.Run("-m.onnx", {kBatch});
  ASSERT_FALSE(dash);
  EXPECT_EQ(dash.error().message, "ort runner: -m.onnx: ONNX Runtime cannot load the model: bad graph");
}

TEST(RunnersOrtChild, ToolErrorGetsTheModelPrepended) {
  FakeOrt fake("ort_noprefix", "echo \"ort_run: --input 'x' given twice\" >&2\nexit 1");
  runners::OrtRunner runner({});
  auto out = runner.Run("m.onnx", {kBatch});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().message, "ort runner: m.onnx: --input 'x' given twice");
}

TEST(RunnersOrtChild, UnexpectedExitFoldsStderrIntoOneLine) {
  FakeOrt fake("ort_exit3", "echo 'line one' >&2\necho 'line two' >&2\nexit 3");
  runners::OrtRunner runner({});
  auto out = runner.Run("m.onnx", {kBatch});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().kind, ErrorKind::kInternal);
  EXPECT_EQ(out.error().message, "ort runner: m.onnx: node exited with code 3: line one line two");
}

TEST(RunnersOrtChild, PassesBatchesAndOptionsToTheTool) {
  // The fake node records its arguments and the input files it was given (in a
  // folder made first: ::testing::TempDir() follows the fake's $TMPDIR).
  TestDir out_dir("ort_args_out");
  FakeOrt fake("ort_args",
               "printf '%s\\n' \"$@\" > \"$SEQTO_TEST_ARGS\"\n"
               "for a in \"$@\"; do case \"$a\" in *=*.npy) cp \"${a#*=}\" \"$SEQTO_TEST_ARGS.${a%%=*}.$(basename "
               "${a#*=})\";; esac; done\n"
               "exit 1");
  const std::string args_file = out_dir / "args.txt";
  ScopedEnv args_env("SEQTO_TEST_ARGS", args_file.c_str());
  runners::OrtRunner runner({.threads = 2});
  auto m = runner.Measure("-model.onnx", {{{"x", Iota({1, 2}, 0)}}, {{"x", Iota({3, 2}, 5)}}}, {{"x", Iota({4, 2}, 9)}},
                          {.warmup = 1, .runs = 4});
  ASSERT_FALSE(m);  // exit 1 and no message
  std::ifstream in(args_file);
  std::vector<std::string> args;
  for (std::string line; std::getline(in, line);) args.push_back(line);
  ASSERT_GE(args.size(), 3u);
  EXPECT_EQ(args[1], "./-model.onnx");  // never read as an option
  std::string joined;
  for (const auto& a : args) joined += a + " ";
  for (const char* want : {"--threads 2 ", "--batches 2 ", "--runs 4 --warmup 1 --json "})
    EXPECT_NE(joined.find(want), std::string::npos) << want << " in: " << joined;
  // Two --input x=... (batches 0 and 1, in order), one --time-input x=....
  std::vector<std::string> inputs, time_inputs;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--input") inputs.push_back(args[i + 1]);
    if (args[i] == "--time-input") time_inputs.push_back(args[i + 1]);
  }
  ASSERT_EQ(inputs.size(), 2u);
  ASSERT_EQ(time_inputs.size(), 1u);
  auto copy_of = [&](const std::string& spec) {
    return args_file + ".x." + fs::path(spec.substr(spec.find('=') + 1)).filename().string();
  };
  auto b0 = ReadNpy(copy_of(inputs[0])), b1 = ReadNpy(copy_of(inputs[1])), t = ReadNpy(copy_of(time_inputs[0]));
  ASSERT_TRUE(b0 && b1 && t);
  EXPECT_EQ(b0->ToDoubles(), Iota({1, 2}, 0).ToDoubles());
  EXPECT_EQ(b1->ToDoubles(), Iota({3, 2}, 5).ToDoubles());
  EXPECT_EQ(t->ToDoubles(), Iota({4, 2}, 9).ToDoubles());
  EXPECT_TRUE(fake.TempIsEmpty());
}

}  // namespace
}  // namespace seqto
