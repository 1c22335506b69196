// Intra-op parallelism. seqto uses one thread pool, OpenMP's, which oneDNN uses as
// well: two pools on two cores would only fight. Kernels split work with
// ParallelFor; the session sets the thread count once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/status.h"

namespace seqto {

void SetNumThreads(int threads);
int NumThreads();

// Calls fn(begin, end) on disjoint chunks covering [0, n). Runs inline when the
// work is small (n * cost_per_item below a threshold) to avoid fork/join overhead.
void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& fn);

// ---------------------------------------------------------------- thread counts

// The cores this process may run on (its CPU affinity), what "all cores" means.
int AvailableCores();

// The most threads a command accepts: kThreadsPerCore per available core. More
// threads than that only time-slice each other, and far more make libgomp fail
// (65535 crashed it, 32768 made it print its own error).
constexpr int kThreadsPerCore = 4;
int MaxThreads();

// The one check of a thread count a user gives (every --threads flag, the tune
// config's "threads"): 0 means all cores; 1..MaxThreads() that many threads.
// Anything else is a UserError naming `what` ("--threads", "threads"; may be empty)
// and the range.
// Called before any thread starts.
Status CheckThreads(int64_t threads, const std::string& what);

// ---------------------------------------------------------------- waiting threads

// libgomp's worker threads spin (busy-wait) at the end of each parallel region
// before they sleep: 300000 rounds by default, 5-12 ms on this Sapphire Rapids
// VM (a round, `pause`, took 16-44 ns). A worker woken from sleep costs the next region
// a futex wake-up, so spinning pays on an idle machine: MobileNetV2, batch 1, 2
// threads on 2 cores, p50 1.9 ms int8 and 3.6 ms float spinning 1250 rounds against 2.4
// and 4.1 ms sleeping at once (OMP_WAIT_POLICY=passive), as fast as spinning without
// end (idle emulated on a busy machine by running the benchmark SCHED_FIFO). But
// where other processes want the cores, a spinning worker takes a core from them
// and from our own thread that still has work, and every region pays the spin: the
// same model measured 10-60 ms with the default spin count next to a compiler (4.5
// ms models over 1 s), still 1.8-2.5x the passive p50 with 1000-1250 rounds and
// 5-10x with 3000.
// libgomp reads its wait settings only once, in a library constructor that runs
// before main(), so they cannot change while the process runs; they are chosen at
// start-up:
// - the machine is idle (other processes' runnable tasks, sampled for a few ms,
//   leave our cores free: LooksBusy): spin kSpinSeconds, then sleep. The rounds
//   are calibrated on the fastest round measured (`pause` takes 3 to 140 cycles by
//   CPU), 1250 rounds here; a round in libgomp's loop takes 1-3x that, so the spin
//   lasts 20-50 us, as fast as spinning without end (1000 rounds already were),
//   and as short as that allows: a load that starts later costs the spin per
//   region.
// - otherwise sleep at once (OMP_WAIT_POLICY=passive).
// When our own threads outnumber the cores, libgomp itself cuts the spin to 100
// rounds.
//
// Call first thing in main(). When the user set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT, this re-executes the program (/proc/self/exe, same arguments) with
// GOMP_SPINCOUNT or OMP_WAIT_POLICY=passive set, so libgomp starts with it; a user's
// own setting is kept. Returns when nothing had to change, or when the re-exec
// failed (then the program goes on with libgomp's defaults). The process id stays
// the same.
void ChooseThreadWaits(char** argv);

constexpr double kSpinSeconds = 20e-6;
// The GOMP_SPINCOUNT to start libgomp with (0: sleep at once): 0 when
// `other_runnable` tasks of other processes (on average) would not leave the
// `available` cores of this process free among the machine's `online` cores (or
// when that is unknown: negative), else the rounds of `seconds_per_round` that
// make kSpinSeconds, at least 1 and at most libgomp's default 300000.
uint64_t SpinCountFor(double other_runnable, int available, int online, double seconds_per_round);

// ---------------------------------------------------------------- machine load

// Measures how much CPU time other processes took while this one measured
// something: the busy time of all CPUs (/proc/stat) minus the CPU time of this
// process and of the children it waited for (getrusage), over the wall time. It
// sums over measuring windows (Start ... Stop), so short measurements can be pooled
// until they are long enough to say something: /proc/stat counts in ticks.
class OtherLoadMeter {
 public:
  void Start();
  void Stop();  // adds the window since Start to the totals
  // Cores' worth of CPU time other processes used in the windows since the last
  // Reset (1.0: one core busy all the time), or nullopt when it cannot be known:
  // /proc/stat is not readable, or the windows add up to less than kMinSeconds.
  static constexpr double kMinSeconds = 0.25;
  std::optional<double> OtherCores() const;
  void Reset();

 private:
  bool readable_ = true;
  double other_s_ = 0, wall_s_ = 0;  // totals of the finished windows
  std::optional<double> start_busy_s_;
  double start_self_s_ = 0, start_wall_s_ = 0;
};

// Whether `other_cores` (OtherLoadMeter) would slow down a measurement made with
// `threads` threads (0: all cores) on `cores` cores: when the others needed more
// than the cores our threads left free, plus half a core of slack for noise.
bool LooksBusy(double other_cores, int threads, int cores);

}  // namespace seqto
