// Reading JSON files (configs, report.json, the tuner's run directory) with errors a
// user can act on: every failure is a user error naming the file and where in it
// ("line 3, column 14", and the key path when the text parsed that far), including
// the ones nlohmann reports as exceptions of other kinds (a number such as 1e999 that
// no double can hold is its out_of_range.406).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace seqto {

// Parses `text`; `file` names it in errors ("tune.json: invalid JSON: ...").
Expected<nlohmann::json> ParseJson(const std::string& text, const std::string& file);
// Reads and parses a file.
Expected<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace seqto
