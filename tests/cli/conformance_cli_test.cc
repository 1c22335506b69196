// `seqto conformance` against a manifest, on small folders of ONNX backend tests the
// test links together: a test listed pass that is skipped fails the run, and a
// manifest that lags (a listed skip that passes, a test it does not list) is reported,
// and fails the run with --strict.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kTestData = SEQTO_ONNX_TESTDATA;

// DIR/data/node/<test> -> the installed test, for each of `tests`; returns DIR/data.
fs::path TestFolder(const fs::path& dir, const std::vector<std::string>& tests) {
  const fs::path data = dir / "data";
  fs::create_directories(data / "node");
  for (const auto& t : tests) fs::create_directory_symlink(kTestData / "node" / t, data / "node" / t);
  return data;
}

std::string LastLine(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

Result Conformance(const fs::path& data, const fs::path& manifest, bool strict) {
  std::vector<std::string> args = {"conformance", data.string(), "--manifest", manifest.string()};
  if (strict) args.push_back("--strict");
  return RunSeqto(args);
}

TEST(ConformanceCli, ListedPassButSkippedIsAFailureNamingIt) {
  const fs::path dir = TempDir();
  const fs::path data = TestFolder(dir, {"test_abs", "test_adagrad"});
  WriteFile(dir / "manifest.txt", "node/test_abs pass\nnode/test_adagrad pass\n");
  const Result r = Conformance(data, dir / "manifest.txt", false);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL node/test_adagrad: listed pass in the manifest but skipped: unsupported op "
                       "ai.onnx.preview.training.Adagrad"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(LastLine(r.out), "conformance: 1 passed, 1 failed, 0 skipped");
}

TEST(ConformanceCli, ListedSkipThatPassesIsReportedAndFailsWithStrict) {
  const fs::path dir = TempDir();
  const fs::path data = TestFolder(dir, {"test_abs", "test_adagrad"});
  WriteFile(dir / "manifest.txt",
            "node/test_abs skip waiting for a kernel\nnode/test_adagrad skip unsupported op Adagrad\n");
  const Result lax = Conformance(data, dir / "manifest.txt", false);
  EXPECT_EQ(lax.exit_code, 0) << lax.out << lax.err;
  EXPECT_NE(lax.out.find("LAGS node/test_abs: listed skip (waiting for a kernel) but passes"), std::string::npos)
      << lax.out;
  EXPECT_EQ(lax.out.find("test_adagrad"), std::string::npos) << "a skip that still holds is quiet: " << lax.out;
  EXPECT_EQ(LastLine(lax.out), "conformance: 0 passed, 0 failed, 2 skipped");

  const Result strict = Conformance(data, dir / "manifest.txt", true);
  EXPECT_EQ(strict.exit_code, 1) << strict.out << strict.err;
  EXPECT_NE(strict.out.find("FAIL node/test_abs: listed skip (waiting for a kernel) but passes"), std::string::npos)
      << strict.out;
  EXPECT_EQ(LastLine(strict.out), "conformance: 0 passed, 1 failed, 2 skipped");
}

TEST(ConformanceCli, TestMissingFromTheManifestFailsWithStrict) {
  const fs::path dir = TempDir();
  const fs::path data = TestFolder(dir, {"test_abs", "test_relu"});
  WriteFile(dir / "manifest.txt", "node/test_abs pass\n");
  const Result lax = Conformance(data, dir / "manifest.txt", false);
  EXPECT_EQ(lax.exit_code, 0) << lax.out << lax.err;
  EXPECT_NE(lax.out.find("LAGS node/test_relu: not in the manifest (passes)"), std::string::npos) << lax.out;
  EXPECT_EQ(LastLine(lax.out), "conformance: 1 passed, 0 failed, 0 skipped");

  const Result strict = Conformance(data, dir / "manifest.txt", true);
  EXPECT_EQ(strict.exit_code, 1) << strict.out << strict.err;
  EXPECT_NE(strict.out.find("FAIL node/test_relu: not in the manifest (passes)"), std::string::npos) << strict.out;
  EXPECT_EQ(LastLine(strict.out), "conformance: 1 passed, 1 failed, 0 skipped");
}

TEST(ConformanceCli, UpToDateManifestPassesWithStrictAndWritesItself) {
  const fs::path dir = TempDir();
  const fs::path data = TestFolder(dir, {"test_abs", "test_adagrad"});
  const std::string manifest = "node/test_abs pass\nnode/test_adagrad skip no training ops\n";
  WriteFile(dir / "manifest.txt", manifest);
  const std::vector<std::string> args = {"conformance",
                                         data.string(),
                                         "--manifest",
                                         (dir / "manifest.txt").string(),
                                         "--strict",
                                         "--write-manifest",
                                         (dir / "new.txt").string()};
  const Result r = RunSeqto(args);
  EXPECT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_EQ(LastLine(r.out), "conformance: 1 passed, 0 failed, 1 skipped");
  // The written manifest keeps the reviewed reason of a skip that still holds.
  EXPECT_EQ(ReadFile(dir / "new.txt"), manifest);
}

}  // namespace
}  // namespace seqto
