// Helpers for the extern "C" shim: every entry point runs its body through guard(),
// which catches every exception, records the thread's last-error text prefixed with
// the function name, and returns a cohort_status_t. Nothing else crosses the boundary.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "cohort/cohort.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace cohort::capi {

void set_last_error(std::string_view function, std::string_view message);
void clear_last_error();

template <typename Fn>
cohort_status_t guard(const char* function, Fn&& fn) noexcept {
  try {
    fn();
    return COHORT_OK;
  } catch (const Error& e) {
    set_last_error(function, e.what());
    return static_cast<cohort_status_t>(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error(function, "out of memory");
    return COHORT_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(function, std::string("internal error: ") + e.what());
    return COHORT_ERR_INTERNAL;
  } catch (...) {
    set_last_error(function, "internal error: unknown exception");
    return COHORT_ERR_INTERNAL;
  }
}

// Throws kInvalidArgument naming the parameter when p is NULL.
template <typename T>
T* need(T* p, const char* what) {
  if (!p) fail(Code::kInvalidArgument, what, " is NULL");
  return p;
}

// A borrowed Tensor view of a caller's DLTensor; errors name the parameter `what`.
Tensor tensor_of(const DLTensor* t, const char* what);

// Copies text into a caller buffer (buffer/size/needed convention of the C API).
void copy_out(std::string_view text, char* buffer, size_t size, size_t* needed);

}  // namespace cohort::capi
