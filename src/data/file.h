// Files as the pipeline reads them: an RAII descriptor with positional reads (safe
// from many threads at once), whole-file reads and directory listings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::data {

class File {
 public:
  // Opens for reading; throws kIo naming the path and the system's reason.
  explicit File(std::string path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; throws kCorruptData when the file is shorter.
  void read_at(uint64_t offset, void* out, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file (throws kIo; kCorruptData when it exceeds max_bytes).
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = uint64_t(1) << 34);
void write_file(const std::string& path, const void* data, size_t n);
// Writes a temporary file beside path (an unpredictable name: the directory may be
// shared) and renames it over path: a reader (another rank opening the same dataset)
// sees the old file or the whole new one, never a part.
void replace_file(const std::string& path, const void* data, size_t n);

bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
bool path_exists(const std::string& path);
// Sorted names (not paths) in a directory, without "." entries and hidden files.
std::vector<std::string> list_directory(const std::string& dir);
// Sorted paths matching a shell pattern (glob(3)).
std::vector<std::string> glob_paths(const std::string& pattern);
std::string join_path(const std::string& dir, const std::string& name);
std::string base_name(const std::string& path);
void make_directories(const std::string& path);

}  // namespace cohort::data
