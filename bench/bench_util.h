// Small helpers the benchmark programs share.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace seqto::bench {

// The non-empty items of a comma-separated command-line list ("1,2" -> {"1", "2"}).
inline std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) items.push_back(item);
  return items;
}

}  // namespace seqto::bench
