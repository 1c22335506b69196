// Thread counts and thread waits, end to end: every command that takes --threads
// (and tune's "threads" key) has the same bound (core/parallel.h, CheckThreads),
// checked before any thread starts, with one error line; seqto starts libgomp with
// short or no spinning waits unless the user chose a wait policy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_util.h"
#include "core/npy.h"
#include "core/parallel.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kRelu = fs::path(SEQTO_ONNX_TESTDATA) / "node/test_relu";

// Every command with --threads, with otherwise valid arguments.
std::vector<std::vector<std::string>> ThreadedCommands(const fs::path& dir) {
  const fs::path npy = dir / "x.npy";
  EXPECT_TRUE(WriteNpy(npy.string(), Tensor(DType::kFloat32, {3, 4, 5})).ok());
  const std::string model = (kRelu / "model.onnx").string();
  return {{"run", model, "--input", "x=" + npy.string(), "--output-dir", (dir / "out").string()},
          {"bench", model, "--runs", "1", "--warmup", "0"},
          {"eval", model, "--data", npy.string()},
          {"quantize", model, "-o", (dir / "q.onnx").string(), "--mode", "static", "--calib-data", npy.string()},
          {"analyze", model, "--data", npy.string()}};
}

TEST(ThreadsCli, OutOfBoundCountsAreOneErrorForEveryCommand) {
  const fs::path dir = TempDir();
  const std::string max = std::to_string(MaxThreads());
  // 65535 crashed libgomp, 32768 made it print its own error; -4 and 0 were accepted
  // by analyze as they came.
  for (const std::string& bad :
       std::vector<std::string>{"-4", "-1", "65535", "32768", std::to_string(MaxThreads() + 1)}) {
    for (auto args : ThreadedCommands(dir)) {
      SCOPED_TRACE(args[0] + " --threads " + bad);
      args.insert(args.end(), {"--threads", bad});
      ExpectUserError(args, {"--threads", bad + " is not a thread count", "1 to " + max, "0 for all cores"});
    }
  }
  for (auto args : ThreadedCommands(dir)) {
    SCOPED_TRACE(args[0]);
    args.insert(args.end(), {"--threads", "two"});
    ExpectUserError(args, {"--threads", "'two' is not an integer"});
  }
}

TEST(ThreadsCli, ZeroMeansAllCoresAndTheBoundItselfIsAccepted) {
  const fs::path dir = TempDir();
  for (const std::string& ok : std::vector<std::string>{"0", "1", std::to_string(MaxThreads())}) {
    const std::vector<std::string> args = {
        "bench",  (kRelu / "model.onnx").string(), "--runs", "2", "--warmup", "0", "--threads", ok,
        "--json", (dir / "b.json").string()};
    const Result r = RunSeqto(args);
    ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
    const auto j = nlohmann::json::parse(ReadFile(dir / "b.json"));
    EXPECT_GE(j["threads"].get<int>(), 1);
    if (ok != "0") {
      EXPECT_EQ(j["threads"].get<int>(), std::stoi(ok));
    }
  }
}

TEST(ThreadsCli, TuneConfigThreadsHasTheSameBound) {
  const fs::path dir = TempDir();
  for (const int bad : {-4, 65535, MaxThreads() + 1}) {
    nlohmann::json c;
    c["model"] = (kRelu / "model.onnx").string();
    c["out"] = (dir / "run").string();
    c["data"]["eval"] = (dir / "x.npy").string();
    c["threads"] = bad;
    std::ofstream(dir / "tune.json") << c.dump(2);
    SCOPED_TRACE(bad);
    ExpectUserError({"tune", (dir / "tune.json").string()},
                    {"tune.json", "threads: " + std::to_string(bad) + " is not a thread count"});
    EXPECT_FALSE(fs::exists(dir / "run")) << "nothing is written for a bad config";
  }
}

// ---------------------------------------------------------------- wait policy

// Sets (or, with nullopt, removes) an environment variable for one scope; the
// child seqto inherits it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// What libgomp printed at start-up with OMP_DISPLAY_ENV=verbose: the GOMP_SPINCOUNT
// value of each start (seqto re-executes itself when it sets the policy).
std::vector<std::string> SpinCounts(const std::string& err) {
  std::vector<std::string> counts;
  const std::string key = "GOMP_SPINCOUNT = '";
  for (size_t at = err.find(key); at != std::string::npos; at = err.find(key, at + 1)) {
    const size_t begin = at + key.size();
    counts.push_back(err.substr(begin, err.find('\'', begin) - begin));
  }
  return counts;
}

TEST(ThreadsCli, WorkersSpinBrieflyOrNotUnlessTheUserChose) {
  const ScopedEnv display("OMP_DISPLAY_ENV", "verbose");
  {
    const ScopedEnv policy("OMP_WAIT_POLICY", std::nullopt), spin("GOMP_SPINCOUNT", std::nullopt);
    const Result r = RunSeqto({"--version"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto counts = SpinCounts(r.err);
    // libgomp's default (300000 rounds) in the first start; after the re-exec none
    // (a busy machine) or a short spin (an idle one: SpinCountFor).
    ASSERT_EQ(counts.size(), 2u) << r.err;
    EXPECT_EQ(counts[0], "300000");
    const unsigned long long rounds = std::stoull(counts[1]);
    EXPECT_LT(rounds, 300000u) << r.err;
    EXPECT_NE(r.out.find("seqto"), std::string::npos);
  }
  {  // the user's policy is kept: no re-exec
    const ScopedEnv policy("OMP_WAIT_POLICY", "active"), spin("GOMP_SPINCOUNT", std::nullopt);
    const Result r = RunSeqto({"--version"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(SpinCounts(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << r.err;
  }
  {  // and so is a spin count
    const ScopedEnv policy("OMP_WAIT_POLICY", std::nullopt), spin("GOMP_SPINCOUNT", "1234");
    const Result r = RunSeqto({"--version"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(SpinCounts(r.err), std::vector<std::string>{"1234"}) << r.err;
  }
}

}  // namespace
}  // namespace seqto
