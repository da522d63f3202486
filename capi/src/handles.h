// The structs behind the opaque C handles, shared by the shim files. Child handles
// hold a shared_ptr to their runtime, which keeps it alive.
#pragma once

#include <memory>

#include "core/config.h"
#include "runtime/runtime.h"

struct cohort_config_t {
  cohort::Config config;
};

struct cohort_runtime_t {
  std::shared_ptr<cohort::Runtime> runtime;
};
