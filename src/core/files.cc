#include "core/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/status.h"

namespace cohort {
namespace fs = std::filesystem;

namespace {

fs::path directory_of(const fs::path& file) { return file.parent_path().empty() ? fs::path(".") : file.parent_path(); }

}  // namespace

mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) != 0) continue;
    try {
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8) & 0777);
    } catch (const std::exception&) {
      break;
    }
  }
  return 022;
}

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  std::string pattern = (directory_of(target_) / cat(kTempFilePrefix, target_.filename().string(), "-XXXXXX")).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  temp_ = name.data();
  if (fd_ < 0) fail_io(cat("cannot create a temporary file '", pattern, "'"));
  // mkostemp gives 0600 whatever the umask; a replacement gets what a new file would.
  if (::fchmod(fd_, 0666 & ~current_umask()) != 0) fail_io(cat("cannot set the permissions of '", temp_.string(), "'"));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::fail_io(std::string_view what) const {
  const std::string error = std::strerror(errno);
  fail(Code::kIo, what, " (writing '", target_.string(), "'): ", error);
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io(cat("cannot write '", temp_.string(), "'"));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::pwrite_at(const void* data, size_t size, off_t offset) {
  const ssize_t n = ::pwrite(fd_, data, size, offset);
  if (n != static_cast<ssize_t>(size)) {
    if (n >= 0) errno = ENOSPC;  // a short write of a few bytes: the disk filled up
    fail_io(cat("cannot write '", temp_.string(), "'"));
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail_io(cat("cannot fsync '", temp_.string(), "'"));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_io(cat("cannot close '", temp_.string(), "'"));
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail_io(cat("cannot rename '", temp_.string(), "'"));
  committed_ = true;
  const fs::path dir = directory_of(target_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail_io(cat("cannot open directory '", dir.string(), "' to fsync it"));
  const int rc = ::fsync(dfd);
  const int saved = errno;
  ::close(dfd);
  errno = saved;
  if (rc != 0) fail_io(cat("cannot fsync directory '", dir.string(), "'"));
}

void replace_file_atomically(const fs::path& path, std::string_view data) {
  AtomicFile file(path);
  file.write(data.data(), data.size());
  file.commit();
}

}  // namespace cohort
