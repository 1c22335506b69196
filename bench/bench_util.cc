#include "bench_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "support/ort_oracle.h"

extern char** environ;

namespace seqto::bench {

Expected<std::vector<int>> ParseCounts(const std::string& option, const std::string& text) {
  std::vector<int> counts;
  for (const std::string& t : SplitList(text)) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(t.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < 1 || v > 1 << 20) return UserError(option + ": '" + t + "' is not a count");
    counts.push_back(static_cast<int>(v));
  }
  if (counts.empty()) return UserError(option + ": empty list");
  return counts;
}

Expected<LatencyStats> TimeSeqto(const ir::Model& model, const runtime::TensorMap& inputs, int threads,
                                 const Timing& timing, bool optimize, int* warmup_done) {
  runtime::SessionOptions options;
  options.threads = threads;
  options.optimize = optimize;
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, options));
  std::vector<double> times;
  double warmup_s = 0;
  int warmups = 0;
  for (; warmups < timing.warmup; ++warmups) {
    if (timing.budget_s > 0 && warmups >= 1 && warmup_s >= timing.budget_s) break;
    const auto t0 = std::chrono::steady_clock::now();
    if (auto out = session->Run(inputs); !out) return out.error();
    warmup_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (warmup_done) *warmup_done = warmups;
  double total_s = 0;
  for (int i = 0; i < timing.runs; ++i) {
    if (timing.budget_s > 0 && i >= timing.min_runs && total_s >= timing.budget_s) break;
    const auto t0 = std::chrono::steady_clock::now();
    auto out = session->Run(inputs);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) return out.error();
    times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    total_s += times.back() / 1000;
  }
  return Summarize(times);
}

PairTime TimePair(const ir::Model& model, const std::string& path, const runtime::TensorMap& inputs, int threads,
                  const Timing& timing, bool with_ort, bool ort_first) {
  PairTime t;
  int warmup_done = timing.warmup;
  auto time_seqto = [&] {
    auto ours = TimeSeqto(model, inputs, threads, timing, true, &warmup_done);
    if (ours) {
      t.seqto_ms = ours->p50;
      t.runs = ours->runs;
    } else {
      t.error += (t.error.empty() ? "seqto: " : "; seqto: ") + ours.error().message;
    }
  };
  auto time_ort = [&] {
    testing::OrtOptions options;
    options.threads = threads;
    // As many runs as the budget gave seqto, when seqto ran first (both runtimes get
    // the same counts); otherwise the configured ones.
    auto ort = testing::OrtBenchmark(path, inputs, t.runs > 0 ? t.runs : timing.runs, warmup_done, options);
    if (ort) {
      t.ort_ms = ort->p50;
      if (t.runs == 0) t.runs = ort->runs;
    } else {
      t.error += (t.error.empty() ? "ort: " : "; ort: ") + ort.error().message;
    }
  };
  if (with_ort && ort_first) time_ort();
  time_seqto();
  if (with_ort && !ort_first) time_ort();
  return t;
}

std::vector<PairTime> TimeRound(const std::vector<BlockFile>& files, const std::vector<bool>& skip, int round,
                                int threads, const Timing& timing, bool with_ort) {
  const bool reverse = round % 2 == 1;
  std::vector<PairTime> times(files.size());
  for (size_t j = 0; j < files.size(); ++j) {
    const size_t i = reverse ? files.size() - 1 - j : j;
    if (!skip[i])
      times[i] = TimePair(*files[i].model, files[i].path, files[i].inputs, threads, timing, with_ort, reverse);
  }
  return times;
}

std::string Rounds::Spread() const {
  if (values.size() < 2) return "";
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f-%.2f", *lo, *hi);
  return buf;
}

nlohmann::json Rounds::Json() const { return values; }

Tensor RandomInput(const Shape& shape, unsigned seed) {
  Tensor input(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < input.numel(); ++i) input.data<float>()[i] = dist(rng);
  return input;
}

Expected<Shape> InputShape(const ir::Model& model, int batch, const std::vector<int64_t>& dims) {
  if (model.graph.inputs.size() != 1)
    return UserError("expected one input, found " + std::to_string(model.graph.inputs.size()));
  const ir::ValueInfo& in = model.graph.inputs[0];
  Shape shape = {batch};
  if (!dims.empty()) {
    if (in.shape && in.shape->size() != dims.size() + 1)
      return UserError("input '" + in.name + "' (" + in.Describe() + ") has " + std::to_string(in.shape->size()) +
                       " dimensions, the shape given has " + std::to_string(dims.size() + 1));
    shape.insert(shape.end(), dims.begin(), dims.end());
    return shape;
  }
  for (size_t d = 1; in.shape && d < in.shape->size(); ++d) shape.push_back((*in.shape)[d].value);
  if (!in.shape || std::any_of(shape.begin(), shape.end(), [](int64_t v) { return v < 0; }))
    return UserError("input '" + in.name + "' needs known dimensions after the batch (" + in.Describe() + ")");
  return shape;
}

std::string Fmt(double ms) {
  if (ms < 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", ms);
  return buf;
}

std::string Ratio(double a, double b, const char* suffix) {
  if (a <= 0 || b <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%s", a / b, suffix);
  return buf;
}

nlohmann::json JsonMs(double ms) { return ms < 0 ? nlohmann::json() : nlohmann::json(ms); }

double Median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Expected<CommandResult> RunCommand(const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) return InternalError(std::string("pipe failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return UserError("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  CommandResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0)
      result.output.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return InternalError(std::string("waitpid failed: ") + std::strerror(errno));
  if (WIFSIGNALED(status)) return InternalError(argv[0] + " killed by signal " + std::to_string(WTERMSIG(status)));
  result.exit_code = WEXITSTATUS(status);
  return result;
}

Status WriteJson(const std::string& path, const nlohmann::json& j) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return UserError(path + ": cannot write file");
  const std::string text = j.dump(2) + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return UserError(path + ": cannot write file");
  return Status::Ok();
}

}  // namespace seqto::bench
