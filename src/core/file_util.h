// Files written so that an interrupted process never leaves a partial one: the
// content goes to a temporary file in the same folder, which is renamed over the
// target (atomic on POSIX file systems). Readers see the old file or the new one.
// Every write, the close and the rename are checked (a full disk fails the write
// instead of leaving an empty file), and a failed write removes its temporary file.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace seqto {

// Streams a file into place: Open(), Write() any number of times, then Commit().
// Errors name the target path and the system's reason ("No space left on device").
// A writer destroyed without a successful Commit() removes its temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status Open();
  Status Write(const void* data, size_t n);
  // Closes the temporary file and renames it over the target.
  Status Commit();
  // The temporary file's path (PATH.tmp<pid>: two processes never share one).
  const std::string& temp_path() const { return tmp_; }

 private:
  Status Fail(const std::string& what, int err);

  std::string path_, tmp_;
  int fd_ = -1;
  bool created_ = false;
  bool committed_ = false;
};

Status WriteFileAtomic(const std::string& path, const std::string& bytes);
// Copies a file atomically (the copy appears whole or not at all).
Status CopyFileAtomic(const std::string& from, const std::string& to);
Expected<std::string> ReadFileBytes(const std::string& path);

}  // namespace seqto
