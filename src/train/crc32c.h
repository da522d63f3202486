// CRC32C (Castagnoli), the checksum of checkpoint files: SSE4.2's crc32 instruction
// when the CPU has it, a table otherwise. crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort {

// Extends `crc` (0 to start) over `size` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

}  // namespace cohort
