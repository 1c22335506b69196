// core/parallel.h: the one bound on thread counts, the other-process load meter and
// the busy verdict; core/stats.h: the unstable-latency flag.
#include "core/parallel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/stats.h"

namespace seqto {
namespace {

TEST(Threads, BoundIsFourPerAvailableCore) {
  EXPECT_GE(AvailableCores(), 1);
  EXPECT_EQ(MaxThreads(), kThreadsPerCore * AvailableCores());
  EXPECT_TRUE(CheckThreads(0, "--threads").ok());  // all cores
  EXPECT_TRUE(CheckThreads(1, "--threads").ok());
  EXPECT_TRUE(CheckThreads(MaxThreads(), "--threads").ok());
  for (int64_t bad : {int64_t{-4}, int64_t{-1}, int64_t{MaxThreads()} + 1, int64_t{32768}, int64_t{65535}}) {
    const Status s = CheckThreads(bad, "threads");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.error().kind, ErrorKind::kUser);
    EXPECT_EQ(s.message().rfind("threads: " + std::to_string(bad) + " is not a thread count", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("1 to " + std::to_string(MaxThreads())), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("0 for all cores"), std::string::npos) << s.message();
  }
  // Without a name the message starts with the value (CLI11 prepends the flag).
  EXPECT_EQ(CheckThreads(-1, "").message().rfind("-1 is not", 0), 0u);
}

TEST(Threads, BusyWhenOthersNeedMoreThanTheFreeCores) {
  // 1 thread on 2 cores leaves a core to one other process.
  EXPECT_FALSE(LooksBusy(1.0, 1, 2));
  EXPECT_FALSE(LooksBusy(1.4, 1, 2));
  EXPECT_TRUE(LooksBusy(1.6, 1, 2));
  // 2 threads (or all cores) on 2 cores leave none.
  EXPECT_TRUE(LooksBusy(1.0, 2, 2));
  EXPECT_TRUE(LooksBusy(0.6, 0, 2));
  EXPECT_FALSE(LooksBusy(0.4, 0, 2));
  // More threads than cores leave none either.
  EXPECT_TRUE(LooksBusy(0.6, 8, 2));
  EXPECT_FALSE(LooksBusy(0.0, 8, 2));
}

TEST(Threads, SpinOnlyWhenOtherProcessesLeaveTheCoresFree) {
  // 16 ns a round (a Sapphire Rapids `pause`): kSpinSeconds is 1250 rounds.
  constexpr double kRound = 16e-9;
  const auto rounds = static_cast<uint64_t>(std::round(kSpinSeconds / kRound));
  EXPECT_EQ(SpinCountFor(0.0, 2, 2, kRound), rounds);
  EXPECT_EQ(SpinCountFor(0.4, 2, 2, kRound), rounds);
  // Another process wants one of our 2 cores: sleep at once.
  EXPECT_EQ(SpinCountFor(0.6, 2, 2, kRound), 0u);
  EXPECT_EQ(SpinCountFor(1.0, 2, 2, kRound), 0u);
  // Unknown load: sleep at once.
  EXPECT_EQ(SpinCountFor(-1.0, 2, 2, kRound), 0u);
  // Restricted to 2 of 16 cores: others may run on the 14 we do not use.
  EXPECT_EQ(SpinCountFor(14.0, 2, 16, kRound), rounds);
  EXPECT_EQ(SpinCountFor(15.0, 2, 16, kRound), 0u);
  // The spin lasts kSpinSeconds whatever a round costs, within 1 and libgomp's default.
  EXPECT_EQ(SpinCountFor(0.0, 2, 2, 4e-9), static_cast<uint64_t>(std::round(kSpinSeconds / 4e-9)));
  EXPECT_EQ(SpinCountFor(0.0, 2, 2, 1.0), 1u);
  EXPECT_EQ(SpinCountFor(0.0, 2, 2, 1e-12), 300000u);
  EXPECT_EQ(SpinCountFor(0.0, 2, 2, 0.0), 300000u);
}

// utime + stime of a process in seconds (/proc/PID/stat fields 14 and 15).
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void BurnCpu(std::chrono::duration<double> how_long) {
  const auto end = std::chrono::steady_clock::now() + how_long;
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < end) x = x * 1.0000001 + 1e-9;
}

TEST(OtherLoadMeter, ShortWindowsArePooledUntilLongEnough) {
  OtherLoadMeter meter;
  EXPECT_FALSE(meter.OtherCores().has_value());  // nothing measured
  const auto half = std::chrono::duration<double>(OtherLoadMeter::kMinSeconds * 0.6);
  meter.Start();
  std::this_thread::sleep_for(half);
  meter.Stop();
  EXPECT_FALSE(meter.OtherCores().has_value());  // less than kMinSeconds
  std::this_thread::sleep_for(half);             // between windows: not counted
  meter.Start();
  std::this_thread::sleep_for(half);
  meter.Stop();
  const std::optional<double> other = meter.OtherCores();
  ASSERT_TRUE(other.has_value());
  EXPECT_GE(*other, 0.0);
  EXPECT_LE(*other, AvailableCores() + 0.15);
  meter.Reset();
  EXPECT_FALSE(meter.OtherCores().has_value());
}

TEST(OtherLoadMeter, CountsOtherProcessesAndNotThisOne) {
  // A child that spins until killed is "another process"; this process burns CPU
  // too, which must not count.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    BurnCpu(std::chrono::seconds(30));
    _exit(0);
  }
  const double child_start = ProcessCpuSeconds(child), self_start = SelfCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  OtherLoadMeter meter;
  meter.Start();
  BurnCpu(std::chrono::duration<double>(OtherLoadMeter::kMinSeconds + 0.35));
  meter.Stop();
  const std::optional<double> other = meter.OtherCores();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double child_cores = (ProcessCpuSeconds(child) - child_start) / wall;
  const double self_cores = (SelfCpuSeconds() - self_start) / wall;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(other.has_value());
  // At least the child's share, at most the machine less what this process used
  // (give or take /proc/stat's 10 ms ticks).
  EXPECT_GE(*other, child_cores - 0.15) << "child used " << child_cores << " cores";
  EXPECT_GT(self_cores, 0.1);
  EXPECT_LE(*other, AvailableCores() - self_cores + 0.15) << "this process used " << self_cores << " cores";
}

TEST(LatencyStats, UnstableWhenP95ExceedsOneAndAHalfP50) {
  EXPECT_FALSE(LatencyUnstable(Summarize({10, 10, 10, 10, 11})));
  std::vector<double> spiky(20, 10.0);
  spiky[18] = spiky[19] = 40;  // p95 interpolates between the two slowest runs' neighbours
  const LatencyStats s = Summarize(spiky);
  EXPECT_GT(s.p95, 1.5 * s.p50);
  EXPECT_TRUE(LatencyUnstable(s));
  EXPECT_FALSE(LatencyUnstable(LatencyStats{}));  // no runs
}

}  // namespace
}  // namespace seqto
