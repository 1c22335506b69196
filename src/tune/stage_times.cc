#include "tune/stage_times.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace seqto::tune {

namespace {
double Round3(double s) { return std::round(s * 1000) / 1000; }
}  // namespace

void StageTimes::Add(const std::string& name, double seconds, bool reused) {
  auto it = std::find_if(stages_.begin(), stages_.end(), [&](const auto& s) { return s.first == name; });
  if (it == stages_.end())
    stages_.emplace_back(name, seconds);
  else
    it->second += seconds;
  if (reused && std::find(reused_.begin(), reused_.end(), name) == reused_.end()) reused_.push_back(name);
}

nlohmann::json StageTimes::Json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, s] : stages_) j[name] = Round3(s);
  j["candidates"] = nlohmann::json::array();
  for (const auto& [k, s] : candidates_) j["candidates"].push_back({{"cycle", k}, {"seconds", Round3(s)}});
  j["reused"] = reused_;
  j["total"] = Round3(Total());
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
  s << " total " << total << "\n";
  if (!candidates_.empty()) {
    s << "  candidates (s):";
    for (const auto& [k, sec] : candidates_) s << " " << k << ":" << std::setprecision(2) << sec;
    s << "\n";
  }
  return s.str();
}

}  // namespace seqto::tune
