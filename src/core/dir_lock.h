// An exclusive lock on a directory for the life of a process's use of it: flock(2) on
// a lock file inside it. The kernel drops the lock when the process ends, however it
// ends (SIGKILL included), so a stale lock file never blocks a later run.
#pragma once

#include <string>

#include "core/status.h"

namespace seqto {

class DirLock {
 public:
  // Takes the lock on `dir`/`name` without waiting. Held by another process: a user
  // error naming the directory and that process (its pid, written in the file).
  static Expected<DirLock> Acquire(const std::string& dir, const std::string& name);

  DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace seqto
