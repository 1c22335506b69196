#include "cli/common.h"

#include <cstdio>
#include <fstream>
#include <iostream>

namespace seqto::cli {

int ReportError(const std::string& command, const Error& error) {
  std::cerr << "seqto " << command << ": error: " << error.message << "\n";
  return error.kind == ErrorKind::kUser ? kExitUserError : kExitInternalError;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return UserError(path + ": cannot write file");
    out << text;
    if (!out) return UserError(path + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return UserError(path + ": cannot rename temporary file");
  return Status::Ok();
}

}  // namespace seqto::cli
