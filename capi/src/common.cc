#include <string>

#include "runtime/mpi_process.h"
#include "shim.h"

namespace cohort::capi {
namespace {
thread_local std::string t_last_error;
}

void set_last_error(std::string_view function, std::string_view message) {
  t_last_error.assign(function);
  t_last_error += ": ";
  t_last_error += message;
}

void clear_last_error() { t_last_error.clear(); }

Tensor tensor_of(const DLTensor* t, const char* what) {
  need(t, what);
  try {
    return Tensor::from_dlpack(*t);
  } catch (const Error& e) {
    fail(e.code(), what, ": ", e.what());
  }
}

void copy_out(std::string_view text, char* buffer, size_t size, size_t* needed) {
  if (needed) *needed = text.size() + 1;
  require(buffer != nullptr || size == 0, "buffer is NULL but size is ", size);
  require(size > text.size(), "buffer of ", size, " bytes is too small: ", text.size() + 1,
          " bytes are needed (see the 'needed' output)");
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
}

}  // namespace cohort::capi

using namespace cohort;

extern "C" {

COHORT_API const char* cohort_status_string(cohort_status_t status) { return code_name(static_cast<Code>(status)); }

COHORT_API const char* cohort_last_error(void) { return capi::t_last_error.c_str(); }

COHORT_API unsigned cohort_version(void) { return COHORT_VERSION; }

COHORT_API const char* cohort_version_string(void) { return COHORT_VERSION_STRING; }

COHORT_API cohort_status_t cohort_finalize(void) {
  return capi::guard("cohort_finalize", [] { mpi_process::finalize(); });
}

}  // extern "C"
