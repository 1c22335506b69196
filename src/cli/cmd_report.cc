// seqto report PATH [--open]: report.json -> report.html + static figures.
//
// PATH is a run directory (it holds report.json, docs/report-format.md) or a folder
// of run directories; for the latter every run gets its report, and the folder gets
// summary.json and an index.html that compares the runs. This file validates each
// report.json (one clear error naming the file and the key, exit 1) and then runs the
// report writer, tools/report/report.js (Node.js, Apache ECharts from npm), as a
// child process. It computes nothing the tuner has not stored.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "cli/common.h"
#include "core/json_util.h"
#include "runners/ort_runner.h"

extern char** environ;

namespace seqto::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kInstallHint = "install it with: npm ci --ignore-scripts --prefix tools/report";

// ------------------------------------------------------------------ validation

const char* TypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

// Checks one report.json against docs/report-format.md. Errors read
// "<json path>: <problem>"; the caller prepends the file.
class ReportValidator {
 public:
  Status Validate(const json& root) {
    SEQTO_RETURN_IF_ERROR(ExpectType(root, json::value_t::object, "report"));
    SEQTO_ASSIGN_OR_RETURN(const json* model, Require(root, "model", ""));
    SEQTO_RETURN_IF_ERROR(ExpectString(*model, "model"));
    SEQTO_ASSIGN_OR_RETURN(const json* settings, Require(root, "settings", ""));
    SEQTO_RETURN_IF_ERROR(ExpectType(*settings, json::value_t::object, "settings"));
    SEQTO_RETURN_IF_ERROR(ValidateObjectives(*settings));
    SEQTO_RETURN_IF_ERROR(ValidateBaseline(root));
    if (root.contains("groups")) SEQTO_RETURN_IF_ERROR(ValidateGroups(root["groups"]));
    if (auto it = root.find("macs"); it != root.end()) SEQTO_RETURN_IF_ERROR(ExpectIndex(*it, "macs", 0).status());
    SEQTO_RETURN_IF_ERROR(ValidateCycles(root));
    SEQTO_RETURN_IF_ERROR(ValidateMachineBusy(root));
    SEQTO_RETURN_IF_ERROR(ValidateStageSeconds(root));
    return ValidatePareto(root);
  }

 private:
  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string At(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

  static Expected<const json*> Require(const json& obj, const std::string& key, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end()) return UserError((path.empty() ? std::string() : path + ": ") + "missing key '" + key + "'");
    return &*it;
  }
  static Status ExpectType(const json& j, json::value_t type, const std::string& path) {
    if (j.type() == type) return Status::Ok();
    const char* want = type == json::value_t::object ? "an object" : type == json::value_t::array ? "an array" : "?";
    return UserError(path + ": expected " + want + ", got " + TypeName(j));
  }
  static Status ExpectString(const json& j, const std::string& path) {
    if (!j.is_string()) return UserError(path + ": expected a string, got " + TypeName(j));
    return Status::Ok();
  }
  static Status ExpectNumber(const json& j, const std::string& path, bool allow_null = false) {
    if (j.is_number() || (allow_null && j.is_null())) return Status::Ok();
    return UserError(path + ": expected a number" + (allow_null ? " or null" : "") + ", got " + TypeName(j));
  }
  static Status ExpectNonNegative(const json& j, const std::string& path) {
    SEQTO_RETURN_IF_ERROR(ExpectNumber(j, path));
    if (j.get<double>() < 0) return UserError(path + ": must not be negative, got " + j.dump());
    return Status::Ok();
  }
  static Expected<int64_t> ExpectIndex(const json& j, const std::string& path, int64_t min) {
    if (!j.is_number_integer()) return UserError(path + ": expected an integer, got " + TypeName(j));
    const int64_t v = j.get<int64_t>();
    if (v < min) return UserError(path + ": must be at least " + std::to_string(min) + ", got " + std::to_string(v));
    return v;
  }
  // A required number key.
  static Status RequireNumber(const json& obj, const std::string& key, const std::string& path,
                              bool allow_null = false) {
    SEQTO_ASSIGN_OR_RETURN(const json* v, Require(obj, key, path));
    return ExpectNumber(*v, Join(path, key), allow_null);
  }
  // An optional number key: absent, null or a number.
  static Status OptionalNumber(const json& obj, const std::string& key, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end()) return Status::Ok();
    return ExpectNumber(*it, Join(path, key), /*allow_null=*/true);
  }

  // An optional boolean key: absent or true/false.
  static Status OptionalBool(const json& obj, const std::string& key, const std::string& path) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_boolean()) return Status::Ok();
    return UserError(Join(path, key) + ": expected true or false, got " + TypeName(*it));
  }

  // latency_ms: {"mean" (required), "p50", "p95", "min", "max", "stddev",
  // "other_cores" (numbers or null), "unstable", "busy" (booleans)}.
  static Status ValidateLatency(const json& parent, const std::string& path) {
    SEQTO_ASSIGN_OR_RETURN(const json* lat, Require(parent, "latency_ms", path));
    const std::string p = Join(path, "latency_ms");
    SEQTO_RETURN_IF_ERROR(ExpectType(*lat, json::value_t::object, p));
    SEQTO_RETURN_IF_ERROR(RequireNumber(*lat, "mean", p));
    for (const char* k : {"p50", "p95", "min", "max", "stddev", "other_cores"})
      SEQTO_RETURN_IF_ERROR(OptionalNumber(*lat, k, p));
    for (const char* k : {"unstable", "busy"}) SEQTO_RETURN_IF_ERROR(OptionalBool(*lat, k, p));
    return Status::Ok();
  }

  // machine_busy: absent, null, or an object with the warning line (the page shows it).
  static Status ValidateMachineBusy(const json& root) {
    auto it = root.find("machine_busy");
    if (it == root.end() || it->is_null()) return Status::Ok();
    if (!it->is_object())
      return UserError("machine_busy: expected an object or null, got " + std::string(TypeName(*it)));
    SEQTO_ASSIGN_OR_RETURN(const json* warning, Require(*it, "warning", "machine_busy"));
    return ExpectString(*warning, "machine_busy.warning");
  }

  // stage_seconds: absent, or {stage: seconds ≥ 0, ..., "per_candidate": [{"cycle",
  // "seconds"}], "reused": [stage names], "cpu_seconds": {stage: seconds ≥ 0}}.
  static Status ValidateStageSeconds(const json& root) {
    auto it = root.find("stage_seconds");
    if (it == root.end()) return Status::Ok();
    const std::string p = "stage_seconds";
    SEQTO_RETURN_IF_ERROR(ExpectType(*it, json::value_t::object, p));
    for (const auto& [key, value] : it->items()) {
      if (key == "per_candidate") {
        SEQTO_RETURN_IF_ERROR(ExpectType(value, json::value_t::array, Join(p, key)));
        for (size_t i = 0; i < value.size(); ++i) {
          const std::string c = At(Join(p, key), i);
          SEQTO_RETURN_IF_ERROR(ExpectType(value[i], json::value_t::object, c));
          SEQTO_ASSIGN_OR_RETURN(const json* cycle, Require(value[i], "cycle", c));
          SEQTO_ASSIGN_OR_RETURN(const int64_t index, ExpectIndex(*cycle, Join(c, "cycle"), 0));
          (void)index;
          SEQTO_ASSIGN_OR_RETURN(const json* seconds, Require(value[i], "seconds", c));
          SEQTO_RETURN_IF_ERROR(ExpectNonNegative(*seconds, Join(c, "seconds")));
        }
      } else if (key == "cpu_seconds") {
        SEQTO_RETURN_IF_ERROR(ExpectType(value, json::value_t::object, Join(p, key)));
        for (const auto& [stage, sec] : value.items())
          SEQTO_RETURN_IF_ERROR(ExpectNonNegative(sec, Join(Join(p, key), stage)));
      } else if (key == "reused") {
        SEQTO_RETURN_IF_ERROR(ExpectType(value, json::value_t::array, Join(p, key)));
        for (size_t i = 0; i < value.size(); ++i) SEQTO_RETURN_IF_ERROR(ExpectString(value[i], At(Join(p, key), i)));
      } else {
        SEQTO_RETURN_IF_ERROR(ExpectNonNegative(value, Join(p, key)));
      }
    }
    return Status::Ok();
  }

  Status ValidateObjectives(const json& settings) {
    auto it = settings.find("objectives");
    if (it == settings.end()) return Status::Ok();  // default: all three
    if (!it->is_array() || it->empty())
      return UserError("settings.objectives: expected a non-empty array of objective names, got " +
                       std::string(it->is_array() ? "an empty array" : TypeName(*it)));
    std::set<std::string> seen;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& o = (*it)[i];
      const std::string p = At("settings.objectives", i);
      SEQTO_RETURN_IF_ERROR(ExpectString(o, p));
      const std::string name = o.get<std::string>();
      if (name != "accuracy_loss" && name != "size_bytes" && name != "latency_ms")
        return UserError(p + ": unknown objective '" + name + "' (expected accuracy_loss, size_bytes or latency_ms)");
      if (!seen.insert(name).second) return UserError(p + ": objective '" + name + "' is listed twice");
    }
    return Status::Ok();
  }

  Status ValidateBaseline(const json& root) {
    SEQTO_ASSIGN_OR_RETURN(const json* b, Require(root, "baseline", ""));
    SEQTO_RETURN_IF_ERROR(ExpectType(*b, json::value_t::object, "baseline"));
    SEQTO_ASSIGN_OR_RETURN(const json* size, Require(*b, "size_bytes", "baseline"));
    SEQTO_RETURN_IF_ERROR(ExpectNonNegative(*size, "baseline.size_bytes"));
    SEQTO_RETURN_IF_ERROR(ValidateLatency(*b, "baseline"));
    if (auto it = b->find("accuracy"); it != b->end() && !it->is_null()) {
      SEQTO_RETURN_IF_ERROR(ExpectType(*it, json::value_t::object, "baseline.accuracy"));
      for (const auto& [k, v] : it->items()) SEQTO_RETURN_IF_ERROR(ExpectNumber(v, "baseline.accuracy." + k, true));
    }
    return Status::Ok();
  }

  Status ValidateGroups(const json& groups) {
    SEQTO_RETURN_IF_ERROR(ExpectType(groups, json::value_t::array, "groups"));
    for (size_t i = 0; i < groups.size(); ++i) {
      const json& g = groups[i];
      const std::string p = At("groups", i);
      SEQTO_RETURN_IF_ERROR(ExpectType(g, json::value_t::object, p));
      SEQTO_ASSIGN_OR_RETURN(const json* name, Require(g, "name", p));
      SEQTO_RETURN_IF_ERROR(ExpectString(*name, p + ".name"));
      if (!group_names_.insert(name->get<std::string>()).second)
        return UserError(p + ".name: group '" + name->get<std::string>() + "' appears twice");
      SEQTO_ASSIGN_OR_RETURN(const json* op, Require(g, "op_type", p));
      SEQTO_RETURN_IF_ERROR(ExpectString(*op, p + ".op_type"));
      SEQTO_ASSIGN_OR_RETURN(const json* order, Require(g, "order", p));
      SEQTO_RETURN_IF_ERROR(ExpectIndex(*order, p + ".order", 0).status());
      // Null where a value does not exist (no weight) or was not measured.
      for (const char* k : {"weight_sqnr_db", "qdq_sqnr_db", "xmodel_sqnr_db", "seqto_score"})
        SEQTO_RETURN_IF_ERROR(RequireNumber(g, k, p, /*allow_null=*/true));
      // MACs at batch 1 (the latency bound's share): absent or null when unknown.
      if (auto it = g.find("macs"); it != g.end() && !it->is_null())
        SEQTO_RETURN_IF_ERROR(ExpectIndex(*it, p + ".macs", 0).status());
    }
    have_groups_ = true;
    return Status::Ok();
  }

  Status ValidateCycles(const json& root) {
    SEQTO_ASSIGN_OR_RETURN(const json* cycles, Require(root, "cycles", ""));
    SEQTO_RETURN_IF_ERROR(ExpectType(*cycles, json::value_t::array, "cycles"));
    if (cycles->empty()) return UserError("cycles: no candidates (the array is empty)");
    for (size_t i = 0; i < cycles->size(); ++i) {
      const json& c = (*cycles)[i];
      const std::string p = At("cycles", i);
      SEQTO_RETURN_IF_ERROR(ExpectType(c, json::value_t::object, p));
      SEQTO_ASSIGN_OR_RETURN(const json* index, Require(c, "index", p));
      SEQTO_ASSIGN_OR_RETURN(int64_t idx, ExpectIndex(*index, p + ".index", 0));
      if (!cycle_indices_.insert(idx).second)
        return UserError(p + ".index: candidate " + std::to_string(idx) + " appears twice");
      SEQTO_ASSIGN_OR_RETURN(const json* excluded, Require(c, "excluded", p));
      SEQTO_RETURN_IF_ERROR(ExpectType(*excluded, json::value_t::array, p + ".excluded"));
      for (size_t k = 0; k < excluded->size(); ++k) {
        const std::string pk = At(p + ".excluded", k);
        SEQTO_RETURN_IF_ERROR(ExpectString((*excluded)[k], pk));
        const std::string name = (*excluded)[k].get<std::string>();
        if (have_groups_ && !group_names_.count(name))
          return UserError(pk + ": '" + name + "' is not a group in groups[]");
      }
      SEQTO_ASSIGN_OR_RETURN(const json* file, Require(c, "model_file", p));
      SEQTO_RETURN_IF_ERROR(ExpectString(*file, p + ".model_file"));
      const std::string f = file->get<std::string>();
      if (f.empty() || fs::path(f).is_absolute())
        return UserError(p + ".model_file: expected a path relative to the run directory, got '" + f + "'");
      model_files_.push_back(f);
      SEQTO_ASSIGN_OR_RETURN(const json* metrics, Require(c, "metrics", p));
      SEQTO_RETURN_IF_ERROR(ExpectType(*metrics, json::value_t::object, p + ".metrics"));
      SEQTO_RETURN_IF_ERROR(RequireNumber(*metrics, "accuracy_loss", p + ".metrics"));
      for (const char* k : {"top1_disagreement", "top5_overlap", "kendall_tau", "sqnr_db", "kl_divergence"})
        SEQTO_RETURN_IF_ERROR(OptionalNumber(*metrics, k, p + ".metrics"));
      SEQTO_ASSIGN_OR_RETURN(const json* size, Require(c, "size_bytes", p));
      SEQTO_RETURN_IF_ERROR(ExpectNonNegative(*size, p + ".size_bytes"));
      SEQTO_RETURN_IF_ERROR(ValidateLatency(c, p));
    }
    return Status::Ok();
  }

  Status ValidatePareto(const json& root) {
    SEQTO_ASSIGN_OR_RETURN(const json* pareto, Require(root, "pareto", ""));
    SEQTO_RETURN_IF_ERROR(ExpectType(*pareto, json::value_t::array, "pareto"));
    // Every set of candidates has a non-empty front.
    if (pareto->empty())
      return UserError("pareto: empty (a non-empty set of candidates has at least one Pareto-optimal one)");
    std::set<int64_t> ranks;
    for (size_t i = 0; i < pareto->size(); ++i) {
      const json& e = (*pareto)[i];
      const std::string p = At("pareto", i);
      SEQTO_RETURN_IF_ERROR(ExpectType(e, json::value_t::object, p));
      SEQTO_ASSIGN_OR_RETURN(const json* rank, Require(e, "rank", p));
      SEQTO_ASSIGN_OR_RETURN(int64_t r, ExpectIndex(*rank, p + ".rank", 1));
      if (!ranks.insert(r).second) return UserError(p + ".rank: rank " + std::to_string(r) + " appears twice");
      SEQTO_ASSIGN_OR_RETURN(const json* cycle, Require(e, "cycle", p));
      SEQTO_ASSIGN_OR_RETURN(int64_t c, ExpectIndex(*cycle, p + ".cycle", 0));
      if (!cycle_indices_.count(c))
        return UserError(p + ".cycle: candidate " + std::to_string(c) + " is not in cycles[]");
      SEQTO_ASSIGN_OR_RETURN(const json* objectives, Require(e, "objectives", p));
      SEQTO_RETURN_IF_ERROR(ExpectType(*objectives, json::value_t::object, p + ".objectives"));
      for (const auto& [k, v] : objectives->items()) SEQTO_RETURN_IF_ERROR(ExpectNumber(v, p + ".objectives." + k));
      SEQTO_RETURN_IF_ERROR(OptionalNumber(e, "distance", p));
    }
    return Status::Ok();
  }

 public:
  const std::vector<std::string>& model_files() const { return model_files_; }

 private:
  bool have_groups_ = false;
  std::set<std::string> group_names_;
  std::set<int64_t> cycle_indices_;
  std::vector<std::string> model_files_;
};

// Reads and validates RUN_DIR/report.json; warns about candidate files that are missing
// (the report still links them: a run copied without its models is still worth reading).
Status ValidateRun(const fs::path& run_dir) {
  const fs::path file = run_dir / "report.json";
  SEQTO_ASSIGN_OR_RETURN(json root, ReadJsonFile(file.string()));
  ReportValidator validator;
  if (Status s = validator.Validate(root); !s.ok()) return std::move(s).WithContext(file.string());
  size_t missing = 0;
  std::string first;
  for (const auto& f : validator.model_files()) {
    std::error_code ec;
    if (!fs::exists(run_dir / f, ec)) {
      if (!missing++) first = f;
    }
  }
  if (missing)
    std::cerr << "seqto report: warning: " << OneLine(file.string()) << ": " << missing
              << " candidate model file(s) not found (first: " << OneLine(first) << "); their links will not open\n";
  return Status::Ok();
}

// ------------------------------------------------------------------ the node tool

// $SEQTO_REPORT_DIR, else tools/report in the source tree this binary was built from.
fs::path ToolDir() {
  if (const char* env = std::getenv("SEQTO_REPORT_DIR"); env && *env) return env;
#ifdef SEQTO_SOURCE_DIR
  return fs::path(SEQTO_SOURCE_DIR) / "tools" / "report";
#else
  return fs::path("tools") / "report";
#endif
}

Expected<std::string> FindTool() {
  const fs::path dir = ToolDir();
  const fs::path script = dir / "report.js";
  std::error_code ec;
  if (!fs::exists(script, ec))
    return UserError("report writer " + script.string() + " not found (set $SEQTO_REPORT_DIR)");
  if (!fs::exists(dir / "node_modules" / "echarts" / "package.json", ec))
    return UserError((dir / "node_modules" / "echarts").string() + " is missing: " + kInstallHint);
  return script.string();
}

// Runs argv with stdout inherited and stderr collected; returns {exit status, stderr}.
Expected<std::pair<int, std::string>> RunTool(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return InternalError(std::string("pipe failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  std::cout.flush();  // our own lines come before the child's
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return UserError("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  std::string err;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n > 0)
      err.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return InternalError(std::string("waitpid failed: ") + std::strerror(errno));
  }
  if (WIFSIGNALED(status))
    return InternalError("report writer (node) killed by signal " + std::to_string(WTERMSIG(status)));
  return std::make_pair(WEXITSTATUS(status), err);
}

// The run folders under `dir` (those with a report.json), sorted by name.
std::vector<std::string> FindRuns(const fs::path& dir) {
  std::vector<std::string> runs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (entry.is_directory(ec2) && fs::is_regular_file(entry.path() / "report.json", ec2))
      runs.push_back(entry.path().filename().string());
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

void OpenInBrowser(const fs::path& page) {
  std::error_code ec;
  const fs::path abs = fs::absolute(page, ec);
  const std::string url = "file://" + (ec ? page : abs).string();
  const std::string opener = runners::FindOnPath("xdg-open");
  if (opener.empty()) {
    std::cout << "open " << url << " in a browser (xdg-open not found)\n";
    return;
  }
  std::vector<std::string> argv = {opener, url};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  // Not waited for: the browser outlives this command.
  if (::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0)
    std::cout << "open " << url << " in a browser\n";
  posix_spawn_file_actions_destroy(&actions);
}

// Writes the report of a run directory, or of every run in a folder of runs plus
// summary.json and index.html.
Status WriteReport(const std::string& path_arg, bool open_browser) {
  fs::path path = path_arg;
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && path.filename() == "report.json") path = path.parent_path();
  if (path.empty()) path = ".";
  if (!fs::exists(path, ec)) return UserError(path_arg + ": no such file or directory");
  if (!fs::is_directory(path, ec))
    return UserError(path_arg + ": not a run directory (expected a folder with report.json)");

  std::vector<std::string> argv;
  fs::path page;
  if (fs::exists(path / "report.json", ec)) {
    SEQTO_RETURN_IF_ERROR(ValidateRun(path));
    argv = {"run", path.string()};
    page = path / "report.html";
  } else {
    const std::vector<std::string> runs = FindRuns(path);
    if (runs.empty())
      return UserError((path / "report.json").string() + ": not found, and no subfolder of " + path_arg +
                       " has a report.json (write one with `seqto tune`)");
    for (const auto& run : runs) SEQTO_RETURN_IF_ERROR(ValidateRun(path / run));
    argv = {"runs", path.string()};
    argv.insert(argv.end(), runs.begin(), runs.end());
    page = path / "index.html";
  }
  auto node_found = runners::FindNode();
  if (!node_found) return Status(node_found.error()).WithContext("the report writer needs Node.js");
  const std::string node = *node_found;
  SEQTO_ASSIGN_OR_RETURN(std::string tool, FindTool());
  argv.insert(argv.begin(), {node, tool});
  SEQTO_ASSIGN_OR_RETURN(auto result, RunTool(argv));
  const auto& [code, err] = result;
  // The tool's stderr: "warning: ..." lines, and on failure one "error: ..." line.
  std::stringstream lines(err);
  std::string line, error_line;
  while (std::getline(lines, line)) {
    if (line.rfind("warning: ", 0) == 0)
      std::cerr << "seqto report: " << OneLine(line) << "\n";
    else if (line.rfind("error: ", 0) == 0)
      error_line = line.substr(7);
    else if (!line.empty() && error_line.empty())
      error_line = line;
  }
  if (code != 0) {
    if (error_line.empty()) error_line = "report writer (node) failed with exit code " + std::to_string(code);
    Error e{code == 1 ? ErrorKind::kUser : ErrorKind::kInternal, error_line};
    return e;
  }
  if (open_browser) OpenInBrowser(page);
  return Status::Ok();
}

}  // namespace

Status WriteRunReport(const std::string& run_dir) { return WriteReport(run_dir, /*open_browser=*/false); }

void AddReportCommand(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("report",
                         "Write report.html and static figures (SVG, PNG) for a run directory, or for a folder of runs "
                         "(plus summary.json and index.html)");
  auto path = std::make_shared<std::string>();
  auto open = std::make_shared<bool>(false);
  cmd->add_option("path", *path, "Run directory (holds report.json) or a folder of run directories")->required();
  cmd->add_flag("--open", *open, "Open the report in a browser when it is written");
  cmd->callback([=, &exit_code] {
    Status s = WriteReport(*path, *open);
    exit_code = s.ok() ? kExitOk : ReportError("report", s.error());
  });
}

}  // namespace seqto::cli
