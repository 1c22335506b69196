#include "tune/stage_times.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <sstream>

namespace seqto::tune {

namespace {
double Round3(double s) { return std::round(s * 1000) / 1000; }
}  // namespace

double StageTimes::CpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void StageTimes::Add(const std::string& name, double seconds, bool reused) {
  auto it = std::find_if(stages_.begin(), stages_.end(), [&](const auto& s) { return s.first == name; });
  if (it == stages_.end()) {
    stages_.emplace_back(name, seconds);
    cpu_.emplace_back(name, lap_cpu_);
  } else {
    it->second += seconds;
    cpu_[static_cast<size_t>(it - stages_.begin())].second += lap_cpu_;
  }
  lap_cpu_ = 0;
  if (reused && std::find(reused_.begin(), reused_.end(), name) == reused_.end()) reused_.push_back(name);
}

nlohmann::json StageTimes::Json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, s] : stages_) j[name] = Round3(s);
  j["per_candidate"] = nlohmann::json::array();
  for (const auto& [k, s] : candidates_) j["per_candidate"].push_back({{"cycle", k}, {"seconds", Round3(s)}});
  j["reused"] = reused_;
  j["total"] = Round3(Total());
  nlohmann::json cpu = nlohmann::json::object();
  for (const auto& [name, s] : cpu_) cpu[name] = Round3(s);
  cpu["total"] = Round3(CpuSeconds() - cpu_start_);
  j["cpu_seconds"] = cpu;
  return j;
}

std::string StageTimes::Text() const {
  const double total = Total();
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << "stage times (s):";
  for (const auto& [name, sec] : stages_) {
    s << " " << name << " " << sec;
    if (total > 0) s << " (" << std::setprecision(0) << 100 * sec / total << "%)" << std::setprecision(1);
    if (std::find(reused_.begin(), reused_.end(), name) != reused_.end()) s << " [reused]";
    s << ",";
  }
  s << " total " << total << "\n  cpu time (s):";
  for (const auto& [name, sec] : cpu_) s << " " << name << " " << sec << ",";
  s << " total " << CpuSeconds() - cpu_start_ << "\n";
  if (!candidates_.empty()) {
    s << "  candidates (s):";
    for (const auto& [k, sec] : candidates_) s << " " << k << ":" << std::setprecision(2) << sec;
    s << "\n";
  }
  return s.str();
}

}  // namespace seqto::tune
