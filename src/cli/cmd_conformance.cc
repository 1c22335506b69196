// seqto conformance DIR [--manifest F] [--strict] [--write-manifest F] [--filter S] [--verbose]:
// runs ONNX backend tests (model.onnx + test_data_set_*/{input,output}_*.pb) and
// ends with "conformance: N passed, M failed, K skipped".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/common.h"
#include "onnxio/model_io.h"
#include "ops/registry.h"
#include "runtime/session.h"

namespace seqto::cli {

namespace {

namespace fs = std::filesystem;

// ONNX's backend test tolerances.
constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;

struct TestCase {
  std::string id;  // "node/test_abs"
  fs::path dir;
};

enum class Outcome { kPass, kFail, kSkip };
struct Result {
  Outcome outcome;
  std::string reason;
};

std::vector<TestCase> FindTests(const fs::path& root) {
  std::vector<TestCase> tests;
  auto add_group = [&](const fs::path& group_dir) {
    for (const auto& entry : fs::directory_iterator(group_dir))
      if (entry.is_directory() && fs::exists(entry.path() / "model.onnx"))
        tests.push_back({group_dir.filename().string() + "/" + entry.path().filename().string(), entry.path()});
  };
  if (fs::exists(root / "model.onnx")) {
    tests.push_back({root.parent_path().filename().string() + "/" + root.filename().string(), root});
  } else {
    bool has_tests = false;
    for (const auto& entry : fs::directory_iterator(root))
      has_tests |= entry.is_directory() && fs::exists(entry.path() / "model.onnx");
    if (has_tests) {
      add_group(root);
    } else {
      for (const auto& entry : fs::directory_iterator(root))
        if (entry.is_directory()) add_group(entry.path());
    }
  }
  std::sort(tests.begin(), tests.end(), [](const TestCase& a, const TestCase& b) { return a.id < b.id; });
  return tests;
}

std::string Compare(const Tensor& expected, const Tensor& actual) {
  if (expected.dtype() != actual.dtype())
    return "dtype " + DTypeName(actual.dtype()) + ", expected " + DTypeName(expected.dtype());
  if (expected.shape() != actual.shape())
    return "shape " + ShapeToString(actual.shape()) + ", expected " + ShapeToString(expected.shape());
  const auto e = expected.ToDoubles(), a = actual.ToDoubles();
  const bool is_float = expected.dtype() == DType::kFloat32 || expected.dtype() == DType::kFloat64 ||
                        expected.dtype() == DType::kFloat16 || expected.dtype() == DType::kBFloat16;
  int bad = 0;
  size_t first = 0;
  double worst = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    bool ok;
    if (std::isnan(e[i]))
      ok = std::isnan(a[i]);
    else if (std::isinf(e[i]))
      ok = a[i] == e[i];
    else if (is_float)
      ok = std::fabs(a[i] - e[i]) <= kAtol + kRtol * std::fabs(e[i]);
    else
      ok = a[i] == e[i];
    if (!ok) {
      if (bad++ == 0) first = i;
      worst = std::max(worst, std::fabs(a[i] - e[i]));
    }
  }
  if (bad == 0) return "";
  std::ostringstream s;
  s << bad << " of " << e.size() << " values differ (first at " << first << ": got " << a[first] << ", expected "
    << e[first] << "; max abs diff " << worst << ")";
  return s.str();
}

// ONNX's test data stores bfloat16 tensors with data type uint16 (the bits); read
// them as the model's bfloat16.
Tensor AsTestDataDType(Tensor t, DType wanted) {
  if (t.dtype() == DType::kUInt16 && wanted == DType::kBFloat16)
    return Tensor(DType::kBFloat16, t.shape(), t.storage());
  return t;
}

Result RunTest(const TestCase& test) {
  onnxio::LoadOptions load_options;
  load_options.infer_shapes = false;
  auto model = onnxio::LoadModel((test.dir / "model.onnx").string(), load_options);
  if (!model) return {Outcome::kFail, model.error().message};
  const auto& registry = ops::OpRegistry::Global();
  for (const auto& n : model->graph.nodes)
    if (!registry.Has(n.domain, n.op_type))
      return {Outcome::kSkip, "unsupported op " + (n.domain.empty() ? "" : n.domain + ".") + n.op_type};
  runtime::SessionOptions options;
  options.threads = 1;
  auto session = runtime::Session::Create(*model, options);
  if (!session) return {Outcome::kFail, session.error().message};
  std::vector<fs::path> data_sets;
  for (const auto& entry : fs::directory_iterator(test.dir))
    if (entry.is_directory() && entry.path().filename().string().rfind("test_data_set_", 0) == 0)
      data_sets.push_back(entry.path());
  std::sort(data_sets.begin(), data_sets.end());
  if (data_sets.empty()) return {Outcome::kSkip, "no test data sets"};
  for (const auto& ds : data_sets) {
    runtime::TensorMap inputs;
    const auto& graph_inputs = (*session)->inputs();
    for (size_t i = 0;; ++i) {
      const fs::path file = ds / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(file)) break;
      if (i >= graph_inputs.size()) return {Outcome::kFail, file.string() + ": more inputs than the model has"};
      auto t = onnxio::LoadTensorFile(file.string());
      if (!t) return {Outcome::kSkip, "input is not a plain tensor (" + t.error().message + ")"};
      inputs[graph_inputs[i].name] = AsTestDataDType(std::move(t->second), graph_inputs[i].dtype);
    }
    auto outputs = (*session)->Run(inputs);
    if (!outputs) return {Outcome::kFail, outputs.error().message};
    const auto& graph_outputs = (*session)->outputs();
    for (size_t i = 0; i < graph_outputs.size(); ++i) {
      const fs::path file = ds / ("output_" + std::to_string(i) + ".pb");
      if (!fs::exists(file)) continue;
      auto expected = onnxio::LoadTensorFile(file.string());
      if (!expected) return {Outcome::kSkip, "output is not a plain tensor (" + expected.error().message + ")"};
      const Tensor& actual = outputs->at(graph_outputs[i].name);
      const std::string diff = Compare(AsTestDataDType(expected->second, actual.dtype()), actual);
      if (!diff.empty())
        return {Outcome::kFail, ds.filename().string() + ": output '" + graph_outputs[i].name + "': " + diff};
    }
  }
  return {Outcome::kPass, ""};
}

struct ManifestEntry {
  bool expect_pass = true;
  std::string reason;
};

Expected<std::map<std::string, ManifestEntry>> ReadManifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return UserError(path + ": cannot open manifest");
  std::map<std::string, ManifestEntry> entries;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream s(line);
    std::string id, status;
    if (!(s >> id)) continue;
    if (!(s >> status) || (status != "pass" && status != "skip"))
      return UserError(path + ":" + std::to_string(line_no) + ": expected '<test> pass' or '<test> skip <reason>'");
    ManifestEntry e;
    e.expect_pass = status == "pass";
    std::getline(s >> std::ws, e.reason);
    if (!e.expect_pass && e.reason.empty())
      return UserError(path + ":" + std::to_string(line_no) + ": a skipped test needs a reason");
    entries[id] = e;
  }
  return entries;
}

// A test listed "pass" must pass: failing, or being skipped for any reason (op not
// registered, no test data), is a failure naming it. A test listed "skip" still runs,
// so a manifest that lags (a skipped test that now passes, or a test it does not list)
// is reported; with `strict` that is a failure too.
int RunConformance(const std::string& dir, const std::string& manifest_path, const std::string& write_manifest,
                   const std::string& filter, bool verbose, bool strict) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return ReportError("conformance", UserError(dir + ": not a directory"));
  std::vector<TestCase> tests = FindTests(dir);
  std::map<std::string, ManifestEntry> manifest;
  if (!manifest_path.empty()) {
    auto m = ReadManifest(manifest_path);
    if (!m) return ReportError("conformance", m.error());
    manifest = std::move(*m);
  }
  int passed = 0, failed = 0, skipped = 0;
  std::ostringstream new_manifest;
  std::map<std::string, bool> seen;
  std::vector<std::string> lagging;  // "id: what the manifest should say"
  for (const auto& test : tests) {
    if (!filter.empty() && test.id.find(filter) == std::string::npos) continue;
    seen[test.id] = true;
    const auto it = manifest.find(test.id);
    const Result r = RunTest(test);
    // The written manifest keeps a listed skip's reviewed reason while it still holds.
    if (r.outcome == Outcome::kPass)
      new_manifest << test.id << " pass\n";
    else if (it != manifest.end() && !it->second.expect_pass)
      new_manifest << test.id << " skip " << it->second.reason << "\n";
    else
      new_manifest << test.id << " skip " << (r.outcome == Outcome::kFail ? "FAILS: " : "") << r.reason << "\n";
    if (!manifest_path.empty() && it == manifest.end()) {
      // Not listed: not counted, but the manifest lags behind the test data.
      lagging.push_back(test.id + ": not in the manifest (" +
                        (r.outcome == Outcome::kPass ? std::string("passes") : "skipped: " + r.reason) + ")");
      continue;
    }
    if (it != manifest.end() && !it->second.expect_pass) {
      // Listed "skip": a pass means the manifest lags; anything else stays a skip.
      if (r.outcome == Outcome::kPass)
        lagging.push_back(test.id + ": listed skip (" + it->second.reason + ") but passes");
      ++skipped;
      if (verbose) std::cout << "SKIP " << test.id << ": " << it->second.reason << "\n";
      continue;
    }
    const bool listed_pass = it != manifest.end();
    switch (r.outcome) {
      case Outcome::kPass:
        ++passed;
        if (verbose) std::cout << "PASS " << test.id << "\n";
        break;
      case Outcome::kFail:
        ++failed;
        std::cout << "FAIL " << test.id << ": " << r.reason << "\n";
        break;
      case Outcome::kSkip:
        if (listed_pass) {
          ++failed;
          std::cout << "FAIL " << test.id << ": listed pass in the manifest but skipped: " << r.reason << "\n";
        } else {
          ++skipped;
          if (verbose) std::cout << "SKIP " << test.id << ": " << r.reason << "\n";
        }
        break;
    }
  }
  // A test the manifest expects but that is gone is a failure, not silence.
  for (const auto& [id, entry] : manifest)
    if (entry.expect_pass && !seen.count(id) && (filter.empty() || id.find(filter) != std::string::npos)) {
      ++failed;
      std::cout << "FAIL " << id << ": listed in the manifest but not found under " << dir << "\n";
    }
  if (!lagging.empty()) {
    std::cout << "the manifest lags behind this run (" << lagging.size() << " test" << (lagging.size() == 1 ? "" : "s")
              << "; update it from --write-manifest)" << (strict ? ", a failure with --strict" : "") << ":\n";
    for (const auto& line : lagging) std::cout << (strict ? "FAIL " : "LAGS ") << line << "\n";
    if (strict) failed += static_cast<int>(lagging.size());
  }
  if (!write_manifest.empty())
    if (Status s = WriteTextFile(write_manifest, new_manifest.str()); !s.ok())
      return ReportError("conformance", s.error());
  std::cout << "conformance: " << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  return failed == 0 ? kExitOk : kExitUserError;
}

}  // namespace

void AddConformanceCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("conformance", "Run ONNX backend tests (model.onnx + test_data_set_*)");
  auto dir = std::make_shared<std::string>();
  auto manifest = std::make_shared<std::string>();
  auto write_manifest = std::make_shared<std::string>();
  auto filter = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  auto strict = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "A test folder, a folder of tests, or a folder of such folders")->required();
  cmd->add_option("--manifest", *manifest,
                  "Count only the tests this manifest lists; those marked pass must pass (a skip is a failure)");
  cmd->add_option("--write-manifest", *write_manifest, "Write a manifest of this run's outcomes");
  cmd->add_option("--filter", *filter, "Only tests whose id contains this text");
  cmd->add_flag("--verbose,-v", *verbose, "Print every test's outcome");
  cmd->add_flag("--strict", *strict,
                "With --manifest: a test listed skip that passes, or a test the manifest does not list, is a failure");
  cmd->callback(
      [=, &exit_code] { exit_code = RunConformance(*dir, *manifest, *write_manifest, *filter, *verbose, *strict); });
}

}  // namespace seqto::cli
