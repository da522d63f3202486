// MNIST IDX files (raw or gzip): unsigned-byte tensors with a big-endian header.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cohort::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major, dims' product bytes
};

// Parses an IDX file held in memory (already decompressed). Throws kCorruptData naming
// origin for a bad magic, a non-u8 type or a size that does not match the header.
IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& origin);

// Reads an IDX file, gunzipping it when it starts with the gzip magic. The declared
// size is checked against what the file can hold before anything is allocated.
IdxArray read_idx(const std::string& path);

// Encodes an IDX array (tests and tools).
std::vector<uint8_t> encode_idx(const IdxArray& array);

}  // namespace cohort::data
