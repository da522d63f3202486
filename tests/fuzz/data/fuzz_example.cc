// tf.train.Example parsing from arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "data/example.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    cohort::data::parse_example(bytes, "fuzz");
  } catch (const cohort::Error&) {
  }
  try {
    cohort::data::ImageExample ex;
    cohort::data::parse_image_example(bytes, "fuzz", ex);
  } catch (const cohort::Error&) {
  }
  return 0;
}
