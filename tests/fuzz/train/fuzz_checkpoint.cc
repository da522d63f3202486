// Fuzzes checkpoint parsing: the input is used once as a whole file and once as a
// payload behind a header with correct checksums (so the parser behind the CRC is
// reached). Either parses or throws cohort::Error — never crashes, leaks or hangs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/status.h"
#include "train/checkpoint.h"
#include "core/crc32c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw(reinterpret_cast<const char*>(data), size);
  try {
    (void)cohort::parse_checkpoint(raw, "fuzz");
  } catch (const cohort::Error&) {
  }
  std::string file(32, '\0');
  std::memcpy(file.data(), "COHORTCK", 8);
  const uint32_t version = cohort::kCheckpointVersion, header_size = 32;
  const uint64_t payload = size;
  const uint32_t payload_crc = cohort::crc32c(data, size);
  std::memcpy(file.data() + 8, &version, 4);
  std::memcpy(file.data() + 12, &header_size, 4);
  std::memcpy(file.data() + 16, &payload, 8);
  std::memcpy(file.data() + 24, &payload_crc, 4);
  const uint32_t header_crc = cohort::crc32c(file.data(), 28);
  std::memcpy(file.data() + 28, &header_crc, 4);
  file.append(raw);
  try {
    (void)cohort::parse_checkpoint(file, "fuzz");
  } catch (const cohort::Error&) {
  }
  return 0;
}
