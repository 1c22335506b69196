// Content digests (SHA-256, OpenSSL's libcrypto) of the files a run depends on, so a
// resumed run can tell that a model or data file changed under the same name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace seqto {

// The SHA-256 of a file's content as 64 lowercase hex digits. Errors name the file.
Expected<std::string> Sha256File(const std::string& path);

// The digests of many files, computed in parallel (a folder of images is thousands
// of small files), in the order given.
Expected<std::vector<std::string>> Sha256Files(const std::vector<std::string>& paths, int threads = 0);

}  // namespace seqto
