// Files written so that an interrupted process never leaves a partial one: the
// content goes to a temporary file in the same folder, which is renamed over the
// target (atomic on POSIX file systems). Readers see the old file or the new one.
#pragma once

#include <string>

#include "core/status.h"

namespace seqto {

Status WriteFileAtomic(const std::string& path, const std::string& bytes);
// Copies a file atomically (the copy appears whole or not at all).
Status CopyFileAtomic(const std::string& from, const std::string& to);
Expected<std::string> ReadFileBytes(const std::string& path);

}  // namespace seqto
