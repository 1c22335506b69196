#include "runners/ort_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "core/npy.h"

extern char** environ;

namespace seqto::runners {

namespace fs = std::filesystem;

namespace {

constexpr const char* kNpmInstall = "npm ci --ignore-scripts --prefix ";

// Folders that may hold ort_run.js, in search order (without $SEQTO_ORT_DIR, which
// replaces the search when set).
std::vector<fs::path> OrtDirCandidates() {
  std::vector<fs::path> dirs;
  std::error_code ec;
  // An installed seqto: <prefix>/bin/seqto next to <prefix>/share/seqto/tools/ort.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && !exe.empty()) dirs.push_back(exe.parent_path().parent_path() / "share" / "seqto" / "tools" / "ort");
#ifdef SEQTO_SOURCE_DIR
  dirs.push_back(fs::path(SEQTO_SOURCE_DIR) / "tools" / "ort");
#endif
  return dirs;
}

// Checks that `dir` has onnxruntime-node installed.
Status CheckInstalled(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "node_modules" / "onnxruntime-node" / "package.json", ec))
    return UserError("onnxruntime-node is not installed in " + dir.string() +
                     " (no node_modules/onnxruntime-node): " + "install it with: " + kNpmInstall + dir.string());
  return Status::Ok();
}

std::string ReadText(const fs::path& path, size_t max_bytes = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  if (max_bytes != SIZE_MAX) {  // only the tail
    in.seekg(0, std::ios::end);
    const auto size = static_cast<uintmax_t>(std::max<std::streamoff>(in.tellg(), 0));
    in.seekg(static_cast<std::streamoff>(size > max_bytes ? size - max_bytes : 0));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh temporary folder, removed (with everything in it) when this object dies.
class TempDir {
 public:
  TempDir() {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string tmpl = (base / "seqto-ort-XXXXXX").string();
    if (::mkdtemp(tmpl.data()))
      path_ = tmpl;
    else
      error_ = std::strerror(errno);
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& error() const { return error_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  std::string error_;
};

// Runs argv[0] with stdin from /dev/null and stdout/stderr sent to files; returns its
// exit code. A child killed by a signal is an error; one still running after
// `timeout_s` is killed and is an error too (seqto never waits forever).
Expected<int> RunChild(const std::vector<std::string>& argv, const fs::path& out_file, const fs::path& err_file,
                       double timeout_s) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return UserError("cannot start " + argv[0] + ": " + std::strerror(rc));

  using Clock = std::chrono::steady_clock;
  // Clamped so the deadline cannot overflow (a timeout of days is as good as none).
  const auto limit = std::chrono::duration<double>(std::min(timeout_s, 1e7));
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
  // Polls with a growing pause (0.1 ms .. 5 ms): cheap next to Node.js' start-up,
  // and no signal handlers or process-wide state are touched.
  auto pause = std::chrono::microseconds(100);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      const int err = errno;
      ::kill(pid, SIGKILL);
      return InternalError(std::string("waitpid failed: ") + std::strerror(err));
    }
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      std::ostringstream limit_text;
      limit_text << timeout_s;
      return UserError("node did not finish within " + limit_text.str() +
                       " s and was killed (a slower model needs a longer runner timeout)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* what = ::strsignal(sig);
    return InternalError("node was killed by signal " + std::to_string(sig) +
                         (what ? std::string(" (") + what + ")" : ""));
  }
  return WEXITSTATUS(status);
}

// The error of a child that exited with `code`: ort_run.js reports its errors as one
// line "ort_run: ..."; anything else on stderr (a crash in native code, a Node.js
// error) is folded into one line.
// `model_arg` is the model as the child was given it.
Error ChildError(int code, const fs::path& err_file, const std::string& model_path, const std::string& model_arg) {
  std::stringstream lines(ReadText(err_file, 64 << 10));
  std::string line, reported, all;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("ort_run: ", 0) == 0) reported = line.substr(9);
    if (!line.empty()) all += (all.empty() ? "" : " ") + line;
  }
  if (!reported.empty()) {
    // Messages about the model already start with its path.
    const std::string message = reported.rfind(model_arg + ": ", 0) == 0
                                    ? model_path + reported.substr(model_arg.size())
                                    : model_path + ": " + reported;
    if (reported.rfind("internal error:", 0) == 0) return InternalError("ort runner: " + message);
    return UserError("ort runner: " + message);
  }
  if (all.size() > 2000) all = "..." + all.substr(all.size() - 2000);
  if (all.empty()) all = "no message";
  return InternalError("ort runner: " + model_path + ": node exited with code " + std::to_string(code) + ": " + all);
}

Expected<LatencyStats> ParseLatency(const fs::path& json_file) {
  try {
    const nlohmann::json j = nlohmann::json::parse(ReadText(json_file));
    const auto& l = j.at("latency_ms");
    LatencyStats s;
    s.mean = l.at("mean").get<double>();
    s.p50 = l.at("p50").get<double>();
    s.p95 = l.at("p95").get<double>();
    s.min = l.at("min").get<double>();
    s.max = l.at("max").get<double>();
    s.stddev = l.at("stddev").get<double>();
    s.runs = j.at("runs").get<int>();
    return s;
  } catch (const std::exception& e) {
    return InternalError(json_file.string() + ": bad latency results from ort_run.js: " + e.what());
  }
}

Expected<runtime::TensorMap> ReadOutputs(const fs::path& manifest) {
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(ReadText(manifest));
  } catch (const std::exception& e) {
    return InternalError(manifest.string() + ": bad output manifest from ort_run.js: " + e.what());
  }
  runtime::TensorMap outputs;
  if (!list.is_array()) return InternalError(manifest.string() + ": bad output manifest from ort_run.js: not a list");
  for (const auto& item : list) {
    if (!item.is_object() || !item.contains("name") || !item.contains("file") || !item["name"].is_string() ||
        !item["file"].is_string())
      return InternalError(manifest.string() + ": bad output manifest from ort_run.js: " + item.dump());
    SEQTO_ASSIGN_OR_RETURN(Tensor t, ReadNpy(item["file"].get<std::string>()));
    outputs[item["name"].get<std::string>()] = std::move(t);
  }
  return outputs;
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    const fs::path candidate = fs::path(dir) / name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate, ec)) return candidate.string();
  }
  return "";
}

Expected<std::string> FindNode() {
  if (const char* env = std::getenv("SEQTO_NODE"); env && *env) {
    std::error_code ec;
    if (::access(env, X_OK) != 0 || fs::is_directory(env, ec))
      return UserError(std::string("$SEQTO_NODE=") + env + " is not an executable");
    return std::string(env);
  }
  for (const char* name : {"node", "nodejs"})
    if (std::string p = FindOnPath(name); !p.empty()) return p;
  return UserError("Node.js ('node') not found on PATH: install the Debian package nodejs, or set $SEQTO_NODE");
}

Expected<OrtTool> FindOrtTool() {
  OrtTool tool;
  auto node = FindNode();
  if (!node) return std::move(node).WithContext("ort runner").error();
  tool.node = std::move(*node);

  std::error_code ec;
  fs::path dir;
  if (const char* env = std::getenv("SEQTO_ORT_DIR"); env && *env) {
    dir = env;
    if (!fs::exists(dir / "ort_run.js", ec))
      return UserError(std::string("ort runner: $SEQTO_ORT_DIR=") + env +
                       " has no ort_run.js (set it to seqto's tools/ort folder, or unset it)");
  } else {
    const std::vector<fs::path> candidates = OrtDirCandidates();
    std::string looked;
    for (const auto& c : candidates) {
      if (fs::exists(c / "ort_run.js", ec)) {
        dir = c;
        break;
      }
      looked += (looked.empty() ? "" : ", ") + c.string();
    }
    if (dir.empty())
      return UserError("ort runner: tools/ort/ort_run.js not found (looked in " +
                       (looked.empty() ? "no folder" : looked) + "): set $SEQTO_ORT_DIR to seqto's tools/ort folder");
  }
  if (Status s = CheckInstalled(dir); !s.ok()) return std::move(s).WithContext("ort runner").error();
  tool.script = (dir / "ort_run.js").string();
  return tool;
}

Status OrtAvailable() {
  auto tool = FindOrtTool();
  return tool ? Status::Ok() : tool.status();
}

Expected<runtime::TensorMap> OrtRunner::Run(const std::string& model_path,
                                            const std::vector<runtime::TensorMap>& batches) {
  SEQTO_ASSIGN_OR_RETURN(Measurement m, Invoke(model_path, &batches, nullptr, nullptr));
  return std::move(m.outputs);
}

Expected<LatencyStats> OrtRunner::Latency(const std::string& model_path, const runtime::TensorMap& batch,
                                          const LatencyOptions& options) {
  SEQTO_ASSIGN_OR_RETURN(Measurement m, Invoke(model_path, nullptr, &batch, &options));
  return m.latency;
}

Expected<Measurement> OrtRunner::Measure(const std::string& model_path, const std::vector<runtime::TensorMap>& batches,
                                         const runtime::TensorMap& latency_batch, const LatencyOptions& options) {
  return Invoke(model_path, &batches, &latency_batch, &options);
}

Expected<Measurement> OrtRunner::Invoke(const std::string& model_path, const std::vector<runtime::TensorMap>* batches,
                                        const runtime::TensorMap* latency_batch, const LatencyOptions* latency) {
  const std::string context = "ort runner: " + model_path;
  if (batches)
    if (Status s = CheckBatches(*batches); !s.ok()) return std::move(s).WithContext(context).error();
  if (latency && (latency->runs < 1 || latency->warmup < 0))
    return UserError(context + ": latency needs runs >= 1 and warmup >= 0 (got runs " + std::to_string(latency->runs) +
                     ", warmup " + std::to_string(latency->warmup) + ")");
  SEQTO_ASSIGN_OR_RETURN(const OrtTool tool, FindOrtTool());
  TempDir tmp;
  if (!tmp.ok()) return InternalError(context + ": cannot create a temporary folder: " + tmp.error());

  // A relative path that starts with '-' would read as an option.
  const std::string model_arg = model_path.rfind('-', 0) == 0 ? "./" + model_path : model_path;
  std::vector<std::string> argv = {tool.node, tool.script, model_arg, "--threads", std::to_string(options_.threads)};
  int file_index = 0;
  auto add_inputs = [&](const runtime::TensorMap& inputs, const char* flag) -> Status {
    for (const auto& [name, tensor] : inputs) {
      const fs::path file = tmp.path() / ("in_" + std::to_string(file_index++) + ".npy");
      if (Status s = WriteNpy(file.string(), tensor); !s.ok()) return std::move(s).WithContext("input '" + name + "'");
      argv.push_back(flag);
      argv.push_back(name + "=" + file.string());
    }
    return Status::Ok();
  };
  const fs::path out_dir = tmp.path() / "outputs", manifest = tmp.path() / "outputs.json";
  const fs::path latency_json = tmp.path() / "latency.json";
  if (batches) {
    argv.insert(argv.end(), {"--batches", std::to_string(batches->size())});
    for (const auto& batch : *batches)
      if (Status s = add_inputs(batch, "--input"); !s.ok()) return std::move(s).WithContext(context).error();
    argv.insert(argv.end(), {"--output-dir", out_dir.string(), "--manifest", manifest.string()});
  }
  if (latency_batch)
    if (Status s = add_inputs(*latency_batch, batches ? "--time-input" : "--input"); !s.ok())
      return std::move(s).WithContext(context).error();
  if (latency)
    argv.insert(argv.end(), {"--runs", std::to_string(latency->runs), "--warmup", std::to_string(latency->warmup),
                             "--json", latency_json.string()});

  const fs::path out_log = tmp.path() / "stdout.txt", err_log = tmp.path() / "stderr.txt";
  auto code = RunChild(argv, out_log, err_log, options_.timeout_s);
  if (!code) return std::move(code).WithContext(context).error();
  if (*code != 0) return ChildError(*code, err_log, model_path, model_arg);

  Measurement m;
  if (batches) {
    auto outputs = ReadOutputs(manifest);
    if (!outputs) return std::move(outputs).WithContext(context).error();
    m.outputs = std::move(*outputs);
  }
  if (latency) {
    auto stats = ParseLatency(latency_json);
    if (!stats) return std::move(stats).WithContext(context).error();
    m.latency = *stats;
  }
  return m;
}

}  // namespace seqto::runners
