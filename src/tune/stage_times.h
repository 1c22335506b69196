// Where a `seqto tune` run spent its time, stage by stage (printed at the end of the
// run, report.json's `stage_seconds`, docs/report-format.md): the analysis must cost
// less than what the search saves, and this is what shows whether it does.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace seqto::tune {

class StageTimes {
 public:
  StageTimes() : start_(Clock::now()), mark_(start_), cpu_mark_(CpuSeconds()) {}

  // Seconds since the last mark (or the start); moves the mark to now.
  double Lap() {
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - mark_).count();
    mark_ = now;
    const double cpu = CpuSeconds();
    lap_cpu_ = cpu - cpu_mark_;
    cpu_mark_ = cpu;
    return s;
  }
  // Adds a lap to a named stage (calibration, analysis, ...). `reused`: its result
  // came from the run directory (a resumed run), so the time is only the reading.
  void Stage(const std::string& name, bool reused = false) {
    const double s = Lap();
    Add(name, s, reused);
  }
  // Adds `seconds` (a lap) to a stage; the CPU time of the last lap goes with it.
  void Add(const std::string& name, double seconds, bool reused = false);
  void Candidate(size_t k, double seconds) { candidates_.emplace_back(k, seconds); }
  double Total() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // {"setup": s, "calibration": s, ..., "per_candidate": [{"cycle", "seconds"}],
  //  "reused": [stage names], "total": s, "cpu_seconds": {stage: s, ..., "total": s}}
  nlohmann::json Json() const;
  // The lines printed at the end of the run.
  std::string Text() const;

 private:
  using Clock = std::chrono::steady_clock;
  // CPU time of the whole process (all threads): on a shared machine the wall time
  // depends on the other processes, the CPU time much less.
  static double CpuSeconds();
  Clock::time_point start_, mark_;
  double cpu_start_ = CpuSeconds(), cpu_mark_ = 0, lap_cpu_ = 0;
  std::vector<std::pair<std::string, double>> stages_;  // in first-seen order
  std::vector<std::pair<std::string, double>> cpu_;     // the same stages' CPU time
  std::vector<std::string> reused_;
  std::vector<std::pair<size_t, double>> candidates_;
};

}  // namespace seqto::tune
