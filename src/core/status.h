// Status codes and the exception that carries them through the core; the C API
// shim turns it into a cohort_status_t and the thread's last-error text.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "cohort/common.h"

namespace cohort {

enum class Code : int {
  kOk = COHORT_OK,
  kInvalidArgument = COHORT_ERR_INVALID_ARGUMENT,
  kInvalidState = COHORT_ERR_INVALID_STATE,
  kUnsupported = COHORT_ERR_UNSUPPORTED,
  kMismatch = COHORT_ERR_MISMATCH,
  kStalled = COHORT_ERR_STALLED,
  kCancelled = COHORT_ERR_CANCELLED,
  kEndOfData = COHORT_ERR_END_OF_DATA,
  kPeerShutdown = COHORT_ERR_PEER_SHUTDOWN,
  kOutOfMemory = COHORT_ERR_OUT_OF_MEMORY,
  kIo = COHORT_ERR_IO,
  kCorruptData = COHORT_ERR_CORRUPT_DATA,
  kInternal = COHORT_ERR_INTERNAL,
  kMpi = COHORT_ERR_MPI,
  kPeerLost = COHORT_ERR_PEER_LOST,
  kCuda = COHORT_ERR_CUDA,
  kNccl = COHORT_ERR_NCCL,
  kCudnn = COHORT_ERR_CUDNN,
  kCublas = COHORT_ERR_CUBLAS,
  kJpeg = COHORT_ERR_JPEG,
  kDnnl = COHORT_ERR_DNNL,
};

// Static text for a code ("invalid argument").
const char* code_name(Code code);

// A code and a message; what a failed operation reports.
class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// The exception used for every error inside the core.
class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit Error(const Status& status) : Error(status.code(), status.message()) {}
  Code code() const { return code_; }
  Status status() const { return {code_, what()}; }

 private:
  Code code_;
};

// Concatenates anything streamable: cat("key '", key, "' is ", n).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(Code code, const Args&... args) {
  throw Error(code, cat(args...));
}

// Throws kInvalidArgument with the message unless cond holds. The arguments are built
// even when cond holds: where they format tensors or shapes (describe(), shape_string)
// on a path run per step or per tensor, write `if (!cond) fail(Code::kInvalidArgument, ...)`.
template <typename... Args>
void require(bool cond, const Args&... args) {
  if (!cond) fail(Code::kInvalidArgument, args...);
}

}  // namespace cohort
