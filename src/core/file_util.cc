#include "core/file_util.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace seqto {

Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  // The process id keeps two writers of the same path from sharing a temporary file.
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return UserError(path + ": cannot write file");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return UserError(path + ": write failed (disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return UserError(path + ": cannot rename temporary file into place");
  }
  return Status::Ok();
}

Expected<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return UserError(path + ": read failed");
  return ss.str();
}

Status CopyFileAtomic(const std::string& from, const std::string& to) {
  SEQTO_ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(from));
  return WriteFileAtomic(to, bytes);
}

}  // namespace seqto
