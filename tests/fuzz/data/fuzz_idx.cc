// MNIST IDX parsing from arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cohort::data::parse_idx({data, size}, "fuzz");
  } catch (const cohort::Error&) {
  }
  return 0;
}
