#include "support/ort_oracle.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/npy.h"

extern char** environ;

namespace seqto::testing {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInstallHint = "install it with: npm ci --ignore-scripts --prefix tools/ort";

// The first executable `name` on PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    const fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate.string();
  }
  return "";
}

Expected<std::string> FindNode() {
  if (const char* env = std::getenv("SEQTO_NODE"); env && *env) {
    if (::access(env, X_OK) != 0) return UserError(std::string("ONNX Runtime oracle: $SEQTO_NODE=") + env + " is not an executable");
    return std::string(env);
  }
  for (const char* name : {"node", "nodejs"})
    if (std::string p = FindOnPath(name); !p.empty()) return p;
  return UserError("ONNX Runtime oracle: Node.js ('node') not found on PATH (Debian package nodejs; or set $SEQTO_NODE)");
}

fs::path OrtDir() {
  if (const char* env = std::getenv("SEQTO_ORT_DIR"); env && *env) return env;
#ifdef SEQTO_SOURCE_DIR
  return fs::path(SEQTO_SOURCE_DIR) / "tools" / "ort";
#else
  return fs::path("tools") / "ort";
#endif
}

Expected<std::string> FindScript() {
  const fs::path dir = OrtDir();
  const fs::path script = dir / "ort_run.js";
  if (!fs::exists(script)) return UserError("ONNX Runtime oracle: " + script.string() + " not found (set $SEQTO_ORT_DIR)");
  if (!fs::exists(dir / "node_modules" / "onnxruntime-node" / "package.json"))
    return UserError("ONNX Runtime oracle: " + (dir / "node_modules" / "onnxruntime-node").string() +
                     " is missing: " + kInstallHint);
  return script.string();
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh temporary folder, removed when this object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "seqto-ort-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs argv[0] with stdout and stderr sent to files; returns the exit status or an error.
Expected<int> Spawn(const std::vector<std::string>& argv, const fs::path& out_file, const fs::path& err_file) {
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
  if (rc != 0) return UserError("ONNX Runtime oracle: cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return InternalError(std::string("ONNX Runtime oracle: waitpid failed: ") + std::strerror(errno));
  }
  if (WIFSIGNALED(status))
    return InternalError("ONNX Runtime oracle: node killed by signal " + std::to_string(WTERMSIG(status)));
  return WEXITSTATUS(status);
}

// Writes the inputs, runs ort_run.js with `extra` arguments; returns the temp folder.
Status RunScript(const std::string& model_path, const OrtTensors& inputs, const OrtOptions& options,
                 const TempDir& tmp, const std::vector<std::string>& extra) {
  if (!tmp.ok()) return InternalError(std::string("ONNX Runtime oracle: cannot create a temporary folder: ") + std::strerror(errno));
  SEQTO_ASSIGN_OR_RETURN(const std::string node, FindNode());
  SEQTO_ASSIGN_OR_RETURN(const std::string script, FindScript());
  std::vector<std::string> argv = {node, script, model_path, "--threads", std::to_string(options.threads)};
  int index = 0;
  for (const auto& [name, tensor] : inputs) {
    const fs::path file = tmp.path() / ("input_" + std::to_string(index++) + ".npy");
    SEQTO_RETURN_IF_ERROR(WriteNpy(file.string(), tensor));
    argv.push_back("--input");
    argv.push_back(name + "=" + file.string());
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  const fs::path out_log = tmp.path() / "stdout.txt", err_log = tmp.path() / "stderr.txt";
  SEQTO_ASSIGN_OR_RETURN(const int code, Spawn(argv, out_log, err_log));
  if (code != 0) {
    // ort_run.js reports its error as one line "ort_run: ..."; anything else on stderr
    // (a crash, a warning) is folded into one line.
    std::stringstream lines(ReadText(err_log));
    std::string line, reported, all;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("ort_run: ", 0) == 0) reported = line.substr(9);
      if (!line.empty()) all += (all.empty() ? "" : " ") + line;
    }
    std::string err = !reported.empty() ? reported : all;
    if (err.empty()) err = "node exited with code " + std::to_string(code) + " and no message";
    return UserError("ONNX Runtime: " + err);
  }
  return Status::Ok();
}

}  // namespace

Status OrtAvailable() {
  SEQTO_ASSIGN_OR_RETURN(const std::string node, FindNode());
  SEQTO_ASSIGN_OR_RETURN(const std::string script, FindScript());
  (void)node;
  (void)script;
  return Status::Ok();
}

Expected<OrtTensors> OrtRun(const std::string& model_path, const OrtTensors& inputs, const OrtOptions& options) {
  TempDir tmp;
  const fs::path out_dir = tmp.path() / "outputs", manifest = tmp.path() / "outputs.json";
  SEQTO_RETURN_IF_ERROR(
      RunScript(model_path, inputs, options, tmp, {"--output-dir", out_dir.string(), "--manifest", manifest.string()}));
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(ReadText(manifest));
  } catch (const std::exception& e) {
    return InternalError("ONNX Runtime oracle: " + manifest.string() + ": bad manifest: " + e.what());
  }
  OrtTensors outputs;
  for (const auto& item : list) {
    SEQTO_ASSIGN_OR_RETURN(Tensor t, ReadNpy(item.at("file").get<std::string>()));
    outputs[item.at("name").get<std::string>()] = std::move(t);
  }
  return outputs;
}

Expected<LatencyStats> OrtBenchmark(const std::string& model_path, const OrtTensors& inputs, int runs, int warmup,
                                    const OrtOptions& options) {
  if (runs < 1) return UserError("ONNX Runtime benchmark: runs must be >= 1");
  TempDir tmp;
  const fs::path json_file = tmp.path() / "latency.json";
  SEQTO_RETURN_IF_ERROR(RunScript(model_path, inputs, options, tmp,
                                  {"--runs", std::to_string(runs), "--warmup", std::to_string(std::max(warmup, 0)),
                                   "--json", json_file.string()}));
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
    return InternalError("ONNX Runtime oracle: " + json_file.string() + ": bad results: " + e.what());
  }
}

}  // namespace seqto::testing
