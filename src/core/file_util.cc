#include "core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace seqto {

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp" + std::to_string(::getpid())) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (created_ && !committed_) ::unlink(tmp_.c_str());
}

Status AtomicFileWriter::Fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (created_) ::unlink(tmp_.c_str());
  created_ = false;
  std::string reason = std::strerror(err);
  // The temporary name is longer than the target's: say which limit was hit.
  if (err == ENAMETOOLONG)
    reason += " (file names have at most 255 bytes, and the temporary file adds \".tmp<pid>\" to this one)";
  return UserError(path_ + ": " + what + ": " + reason);
}

Status AtomicFileWriter::Open() {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Fail("cannot write file", errno);
  created_ = true;
  return Status::Ok();
}

Status AtomicFileWriter::Write(const void* data, size_t n) {
  if (fd_ < 0) return UserError(path_ + ": write after a failed open");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Fail("write failed", w < 0 ? errno : EIO);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return UserError(path_ + ": commit after a failed open");
  // close() reports errors some file systems hold back until then (NFS, quotas).
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail("write failed", errno);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) return Fail("cannot rename temporary file into place", errno);
  committed_ = true;
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  AtomicFileWriter out(path);
  SEQTO_RETURN_IF_ERROR(out.Open());
  SEQTO_RETURN_IF_ERROR(out.Write(bytes.data(), bytes.size()));
  return out.Commit();
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
