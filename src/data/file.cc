#include "data/file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/files.h"
#include "core/status.h"

namespace cohort::data {

File::File(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(Code::kIo, "cannot open '", path_, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail(Code::kIo, "'", path_, "' is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::read_at(uint64_t offset, void* out, size_t n) const {
  if (offset > size_ || n > size_ - offset)
    fail(Code::kCorruptData, "'", path_, "': read of ", n, " bytes at offset ", offset, " goes past the end (", size_,
         " bytes)");
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(Code::kIo, "cannot read '", path_, "' at offset ", offset, ": ", std::strerror(errno));
    if (got == 0) fail(Code::kCorruptData, "'", path_, "' ended early at offset ", offset);
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  File f(path);
  if (f.size() > max_bytes)
    fail(Code::kCorruptData, "'", path, "' is ", f.size(), " bytes, more than the limit ", max_bytes);
  std::vector<uint8_t> out(f.size());
  if (!out.empty()) f.read_at(0, out.data(), out.size());
  return out;
}

void write_file(const std::string& path, const void* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail(Code::kIo, "cannot create '", path, "': ", std::strerror(errno));
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) {
      int err = errno;
      ::close(fd);
      fail(Code::kIo, "cannot write '", path, "': ", std::strerror(err));
    }
    p += put;
    n -= static_cast<size_t>(put);
  }
  if (::close(fd) != 0) fail(Code::kIo, "cannot write '", path, "': ", std::strerror(errno));
}

void replace_file(const std::string& path, const void* data, size_t n) {
  replace_file_atomically(path, {static_cast<const char*>(data), n});
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) fail(Code::kIo, "cannot list directory '", dir, "': ", ec.message());
  for (const auto& entry : it) {
    std::string name = entry.path().filename().string();
    if (!name.empty() && name[0] != '.') names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string base_name(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail(Code::kIo, "cannot create directory '", path, "': ", ec.message());
}

}  // namespace cohort::data
