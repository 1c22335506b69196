#include "core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace seqto {

Expected<DirLock> DirLock::Acquire(const std::string& dir, const std::string& name) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return UserError(path + ": cannot create the lock file: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[32] = {};
    if (err == EWOULDBLOCK && ::pread(fd, buf, sizeof buf - 1, 0) > 0) holder = std::string(buf);
    ::close(fd);
    if (err != EWOULDBLOCK) return UserError(path + ": cannot lock: " + std::strerror(err));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return UserError(dir + ": another process is using this directory" +
                     (holder.empty() ? std::string() : " (pid " + holder + ")") +
                     "; wait for it to end or use another one");
  }
  // The holder's pid, for the message above; the lock does not depend on it.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // Only the message of a second process loses the pid.
  }
  return DirLock(fd);
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

}  // namespace seqto
