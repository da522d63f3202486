// Files replaced atomically: written under a temporary name that mkostemp() makes
// unpredictable, next to the target (so that rename() stays within one file system),
// then fsync'ed, renamed over the target and the directory fsync'ed. A crash at any
// moment leaves either the old content or the new, never a mix. The file gets the
// permissions any new file of the user gets (0666 less the umask), not mkostemp's 0600.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace cohort {

// The prefix of every temporary name: a directory's leftovers of interrupted writes are
// the entries starting with it.
inline constexpr std::string_view kTempFilePrefix = ".tmp-";

class AtomicFile {
 public:
  // Creates the temporary file; throws kIo naming it and the target.
  explicit AtomicFile(std::filesystem::path target);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void pwrite_at(const void* data, size_t size, off_t offset);
  // fsync the data, rename over the target, fsync the directory so the rename lasts.
  // Throws kIo naming the file and the system error.
  void commit();

  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail_io(std::string_view what) const;

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `data` to `path` through an AtomicFile.
void replace_file_atomically(const std::filesystem::path& path, std::string_view data);

// The process's file-creation mask, read without changing it (/proc/self/status;
// 022 where that is not available).
mode_t current_umask();

}  // namespace cohort
