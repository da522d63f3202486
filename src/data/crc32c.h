// CRC32C (Castagnoli) and the TFRecord masking of it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::data {

// Uses SSE4.2's crc32 instruction when the CPU has it, else slicing-by-8 tables.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table version (tests compare the two).
uint32_t crc32c_table(const void* data, size_t n, uint32_t crc = 0);
inline uint32_t mask_crc(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }
inline uint32_t masked_crc32c(const void* data, size_t n) { return mask_crc(crc32c(data, n)); }

}  // namespace cohort::data
