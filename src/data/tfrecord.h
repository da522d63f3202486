// TFRecord shards: the record framing (length, masked CRC32C of the length, data,
// masked CRC32C of the data), DALI's `tfrecord2idx` index ("OFFSET SIZE" per line,
// SIZE = the whole record on disk) read or built on first use, and a writer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/file.h"

namespace cohort::data {

struct RecordExtent {
  uint64_t offset = 0;
  uint64_t size = 0;  // on disk: 12-byte header + data + 4-byte footer
};

// Builds the index of a shard by walking its headers. A header whose CRC does not
// match or whose length runs past the end of the file ends the walk; what went wrong
// is put in *problem (empty when the whole file was indexed).
std::vector<RecordExtent> scan_tfrecord(const File& file, bool check_crc, std::string* problem);

// The file starts with a well-framed record header: its length CRC matches and the
// record fits in the file. What tells a TFRecord shard from other files.
bool starts_with_record(const File& file);

// Parses index text; throws kCorruptData naming the file and line for a bad line or an
// extent outside a file of `file_size` bytes.
std::vector<RecordExtent> parse_index(std::string_view text, const std::string& index_path, uint64_t file_size);
std::string format_index(const std::vector<RecordExtent>& extents);

// Why an index does not describe its shard; empty when it does. The records must tile
// the file from offset 0 to its end (a stale index shorter or longer than its shard
// fails here), and a sample of them (the first, the last and 8 between) must start
// with a record header whose length agrees with the index (and whose length CRC
// matches, when check_crc). Reads at most 10 headers.
std::string index_mismatch(const File& file, const std::vector<RecordExtent>& extents, bool check_crc);

// Reads a record's bytes into buf (resized, capacity reused) and returns the span of
// its data. Throws kCorruptData (naming file and offset) on a length or CRC mismatch.
std::span<const uint8_t> read_record(const File& file, const RecordExtent& extent, bool check_crc,
                                     std::vector<uint8_t>& buf);

// Parses one framed record held in memory (fuzzing and tests); same checks.
std::span<const uint8_t> parse_record(std::span<const uint8_t> bytes, bool check_crc, const std::string& origin);

// Appends framed records to a file; the index is the list of extents written.
class TFRecordWriter {
 public:
  explicit TFRecordWriter(std::string path);
  void write(std::span<const uint8_t> data);
  // Writes the data file and, when index_path is not empty, its index.
  void close(const std::string& index_path);
  const std::vector<RecordExtent>& extents() const { return extents_; }

 private:
  std::string path_;
  std::vector<uint8_t> bytes_;
  std::vector<RecordExtent> extents_;
};

// One framed record as bytes.
std::vector<uint8_t> frame_record(std::span<const uint8_t> data);

}  // namespace cohort::data
