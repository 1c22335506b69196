#include "core/parallel.h"

#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <vector>

namespace seqto {

namespace {
int g_threads = 0;  // 0: not set yet, use OpenMP's default
}

void SetNumThreads(int threads) {
  g_threads = std::max(1, threads);
  omp_set_num_threads(g_threads);
}

int NumThreads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = NumThreads();
  constexpr int64_t kMinWorkPerThread = 32768;
  if (threads <= 1 || n == 1 || n * std::max<int64_t>(cost_per_item, 1) < 2 * kMinWorkPerThread) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, n);
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  }
}

// ---------------------------------------------------------------- thread counts

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

int MaxThreads() { return kThreadsPerCore * AvailableCores(); }

Status CheckThreads(int64_t threads, const std::string& what) {
  if (threads >= 0 && threads <= MaxThreads()) return Status::Ok();
  return UserError((what.empty() ? "" : what + ": ") + std::to_string(threads) +
                   " is not a thread count: expected 1 to " + std::to_string(MaxThreads()) + " (" +
                   std::to_string(kThreadsPerCore) + " per core, " + std::to_string(AvailableCores()) +
                   " cores), or 0 for all cores");
}

// ---------------------------------------------------------------- waiting threads

namespace {

// Runnable tasks of other processes, averaged over a few samples of the kernel's
// count of runnable tasks (/proc/loadavg's fourth field, "running/total"), which
// includes the thread that reads it. Negative when it cannot be read.
double OtherRunnableTasks() {
  constexpr int kSamples = 10;
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
    std::ifstream in("/proc/loadavg");
    double load1 = 0, load5 = 0, load15 = 0;
    long running = 0;
    if (!(in >> load1 >> load5 >> load15 >> running) || running < 1) return -1;
    sum += static_cast<double>(running - 1);
  }
  return sum / kSamples;
}

// What libgomp does between two looks at the flag it waits on (its cpu_relax).
inline void RelaxCpu() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  asm volatile("" ::: "memory");
#endif
}

// Seconds one round of libgomp's spin takes: the fastest of a few timed loops of
// the same shape (a relaxed load and RelaxCpu), so a preemption does not count.
double SecondsPerSpinRound() {
  constexpr int kRounds = 2000;
  std::atomic<int> flag{0};
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds && flag.load(std::memory_order_relaxed) == 0; ++i) RelaxCpu();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kRounds;
    if (trial == 0 || s < best) best = s;
  }
  return best;
}

}  // namespace

uint64_t SpinCountFor(double other_runnable, int available, int online, double seconds_per_round) {
  if (other_runnable < 0 || LooksBusy(other_runnable, available, std::max(online, available))) return 0;
  constexpr double kLibgompDefault = 300000;
  const double rounds = seconds_per_round > 0 ? kSpinSeconds / seconds_per_round : kLibgompDefault;
  return static_cast<uint64_t>(std::clamp(std::round(rounds), 1.0, kLibgompDefault));
}

void ChooseThreadWaits(char** argv) {
  // A user's own choice wins; after the re-exec one of them is set, so this also
  // ends the recursion.
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const uint64_t spin = SpinCountFor(OtherRunnableTasks(), AvailableCores(), online > 0 ? static_cast<int>(online) : 1,
                                     SecondsPerSpinRound());
  const char* name = spin > 0 ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY";
  if (setenv(name, spin > 0 ? std::to_string(spin).c_str() : "passive", 0) != 0) return;
  execv("/proc/self/exe", argv);
  // No /proc (or no exec): go on as we are, libgomp keeps its defaults. Children
  // started later need not see a setting this process does not have.
  unsetenv(name);
}

// ---------------------------------------------------------------- machine load

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Busy time of all CPUs in seconds: the first line of /proc/stat ("cpu  user nice
// system idle iowait irq softirq steal guest guest_nice", in clock ticks) without
// idle and iowait. guest time is already counted in user.
std::optional<double> CpuBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  std::vector<double> v;
  double x = 0;
  for (int i = 0; i < 8 && in >> x; ++i) v.push_back(x);
  if (v.size() < 8) return std::nullopt;
  static const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  if (!(ticks_per_s > 0)) return std::nullopt;
  return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / ticks_per_s;
}

double SelfSeconds() {
  auto seconds = [](const rusage& r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
  };
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  return seconds(self) + seconds(children);
}

}  // namespace

void OtherLoadMeter::Start() {
  start_busy_s_ = CpuBusySeconds();
  start_self_s_ = SelfSeconds();
  start_wall_s_ = WallSeconds();
}

void OtherLoadMeter::Stop() {
  const std::optional<double> busy = CpuBusySeconds();
  if (!busy || !start_busy_s_) {
    readable_ = false;
    return;
  }
  other_s_ += (*busy - *start_busy_s_) - (SelfSeconds() - start_self_s_);
  wall_s_ += WallSeconds() - start_wall_s_;
  start_busy_s_.reset();
}

std::optional<double> OtherLoadMeter::OtherCores() const {
  if (!readable_ || wall_s_ < kMinSeconds) return std::nullopt;
  // Tick rounding can make a quiet machine read slightly negative.
  return std::max(0.0, other_s_ / wall_s_);
}

void OtherLoadMeter::Reset() { *this = OtherLoadMeter(); }

bool LooksBusy(double other_cores, int threads, int cores) {
  const int used = threads > 0 ? std::min(threads, cores) : cores;
  return other_cores > static_cast<double>(cores - used) + 0.5;
}

}  // namespace seqto
