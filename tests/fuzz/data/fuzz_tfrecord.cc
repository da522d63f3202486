// TFRecord framing and DALI index text from arbitrary bytes: errors are Errors, never
// crashes or allocations driven by a length field.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    cohort::data::parse_record(bytes, true, "fuzz");
  } catch (const cohort::Error&) {
  }
  try {
    cohort::data::parse_record(bytes, false, "fuzz");
  } catch (const cohort::Error&) {
  }
  try {
    cohort::data::parse_index({reinterpret_cast<const char*>(data), size}, "fuzz.idx", 1 << 20);
  } catch (const cohort::Error&) {
  }
  return 0;
}
