// CRC32C (Castagnoli): the checksum of TFRecord files (with its masking) and of
// checkpoints. crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort {

// Uses SSE4.2's crc32 instruction when the CPU has it, else slicing-by-8 tables.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table version (tests compare the two).
uint32_t crc32c_table(const void* data, size_t n, uint32_t crc = 0);
// Extends `crc` (0 to start) over `size` more bytes.
inline uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) { return crc32c(data, size, crc); }
inline uint32_t mask_crc(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }
inline uint32_t masked_crc32c(const void* data, size_t n) { return mask_crc(crc32c(data, n)); }

}  // namespace cohort
