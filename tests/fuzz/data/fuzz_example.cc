// tf.train.Example parsing from arbitrary bytes; the label-only parse agrees with the full one.
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
  bool image_ok = false;
  cohort::data::ImageExample ex;
  try {
    cohort::data::parse_image_example(bytes, "fuzz", ex);
    image_ok = true;
  } catch (const cohort::Error&) {
  }
  // The label-only parse (the label scan at create) must agree with the full parse.
  try {
    int64_t label = 0;
    bool has_label = cohort::data::parse_example_label(bytes, "fuzz", &label);
    if (image_ok && (has_label != ex.has_label || (has_label && label != ex.label))) __builtin_trap();
  } catch (const cohort::Error&) {
    if (image_ok) __builtin_trap();  // bytes the full parse accepts are well formed
  }
  return 0;
}
