#include "data/tfrecord.h"

#include <charconv>
#include <cstring>

#include "core/status.h"
#include "core/crc32c.h"

namespace cohort::data {
namespace {

constexpr uint64_t kHeader = 12, kFooter = 4;

uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

std::vector<RecordExtent> scan_tfrecord(const File& file, bool check_crc, std::string* problem) {
  std::vector<RecordExtent> out;
  problem->clear();
  uint64_t pos = 0, size = file.size();
  uint8_t header[kHeader];
  while (pos < size) {
    if (size - pos < kHeader) {
      *problem = cat("truncated record header at offset ", pos, " (", size - pos, " bytes left)");
      break;
    }
    file.read_at(pos, header, kHeader);
    if (check_crc && masked_crc32c(header, 8) != load_u32(header + 8)) {
      *problem = cat("length CRC mismatch at offset ", pos);
      break;
    }
    uint64_t len = load_u64(header);
    if (len > size - pos - kHeader || size - pos - kHeader - len < kFooter) {
      *problem = cat("record at offset ", pos, " declares ", len, " bytes but only ", size - pos - kHeader,
                     " remain in the file (truncated or corrupt)");
      break;
    }
    out.push_back({pos, kHeader + len + kFooter});
    pos += kHeader + len + kFooter;
  }
  return out;
}

bool starts_with_record(const File& file) {
  uint8_t header[kHeader];
  if (file.size() < kHeader + kFooter) return false;
  file.read_at(0, header, kHeader);
  return masked_crc32c(header, 8) == load_u32(header + 8) && load_u64(header) <= file.size() - kHeader - kFooter;
}

std::vector<RecordExtent> parse_index(std::string_view text, const std::string& index_path, uint64_t file_size) {
  std::vector<RecordExtent> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty()) continue;
    uint64_t offset = 0, size = 0;
    const char* p = line.data();
    const char* end = p + line.size();
    auto r1 = std::from_chars(p, end, offset);
    const char* q = r1.ptr;
    while (q < end && (*q == ' ' || *q == '\t')) ++q;
    auto r2 = std::from_chars(q, end, size);
    if (r1.ec != std::errc{} || q == r1.ptr || r2.ec != std::errc{} || r2.ptr != end)
      fail(Code::kCorruptData, "index '", index_path, "' line ", line_no, ": expected 'OFFSET SIZE', got '", line, "'");
    if (size < kHeader + kFooter || offset > file_size || size > file_size - offset)
      fail(Code::kCorruptData, "index '", index_path, "' line ", line_no, ": record ", offset, "+", size,
           " lies outside its shard of ", file_size, " bytes (stale index? delete it to rebuild)");
    out.push_back({offset, size});
  }
  return out;
}

std::string index_mismatch(const File& file, const std::vector<RecordExtent>& extents, bool check_crc) {
  uint64_t end = 0;
  for (size_t i = 0; i < extents.size(); ++i) {
    if (extents[i].offset != end)
      return cat("record ", i, " starts at offset ", extents[i].offset, " but the record before it ends at ", end);
    end += extents[i].size;
  }
  if (end != file.size())
    return cat("its ", extents.size(), " records end at offset ", end, " but the shard has ", file.size(), " bytes",
               end < file.size() ? " (records after that offset would be left out)" : "");
  const size_t n = extents.size();
  std::vector<size_t> picks;
  for (size_t k = 0; k < 10 && n > 0; ++k) picks.push_back(k == 9 ? n - 1 : k * (n - 1) / 9);
  uint8_t header[kHeader];
  for (size_t i : picks) {
    const RecordExtent& e = extents[i];
    file.read_at(e.offset, header, kHeader);
    if (check_crc && masked_crc32c(header, 8) != load_u32(header + 8))
      return cat("record ", i, " at offset ", e.offset, ": no record header there (length CRC mismatch)");
    if (load_u64(header) != e.size - kHeader - kFooter)
      return cat("record ", i, " at offset ", e.offset, ": the index says ", e.size, " bytes, its header ",
                 load_u64(header) + kHeader + kFooter);
  }
  return {};
}

std::string format_index(const std::vector<RecordExtent>& extents) {
  std::string out;
  for (const auto& e : extents) out += cat(e.offset, ' ', e.size, '\n');
  return out;
}

std::span<const uint8_t> parse_record(std::span<const uint8_t> bytes, bool check_crc, const std::string& origin) {
  if (bytes.size() < kHeader + kFooter)
    fail(Code::kCorruptData, origin, ": record of ", bytes.size(), " bytes is too short");
  const uint8_t* p = bytes.data();
  if (check_crc && masked_crc32c(p, 8) != load_u32(p + 8)) fail(Code::kCorruptData, origin, ": length CRC mismatch");
  uint64_t len = load_u64(p);
  if (len != bytes.size() - kHeader - kFooter)
    fail(Code::kCorruptData, origin, ": record declares ", len, " data bytes but its extent holds ",
         bytes.size() - kHeader - kFooter);
  if (check_crc && masked_crc32c(p + kHeader, len) != load_u32(p + kHeader + len))
    fail(Code::kCorruptData, origin, ": data CRC mismatch");
  return bytes.subspan(kHeader, len);
}

std::span<const uint8_t> read_record(const File& file, const RecordExtent& extent, bool check_crc,
                                     std::vector<uint8_t>& buf) {
  if (extent.offset > file.size() || extent.size > file.size() - extent.offset)
    fail(Code::kCorruptData, "'", file.path(), "' offset ", extent.offset, ": record of ", extent.size,
         " bytes runs past the end of the file");
  buf.resize(extent.size);
  file.read_at(extent.offset, buf.data(), buf.size());
  return parse_record(buf, check_crc, cat("'", file.path(), "' offset ", extent.offset));
}

std::vector<uint8_t> frame_record(std::span<const uint8_t> data) {
  std::vector<uint8_t> out(kHeader + data.size() + kFooter);
  store_u64(out.data(), data.size());
  store_u32(out.data() + 8, masked_crc32c(out.data(), 8));
  if (!data.empty()) std::memcpy(out.data() + kHeader, data.data(), data.size());
  store_u32(out.data() + kHeader + data.size(), masked_crc32c(data.data(), data.size()));
  return out;
}

TFRecordWriter::TFRecordWriter(std::string path) : path_(std::move(path)) {}

void TFRecordWriter::write(std::span<const uint8_t> data) {
  auto framed = frame_record(data);
  extents_.push_back({bytes_.size(), framed.size()});
  bytes_.insert(bytes_.end(), framed.begin(), framed.end());
}

void TFRecordWriter::close(const std::string& index_path) {
  write_file(path_, bytes_.data(), bytes_.size());
  if (!index_path.empty()) {
    std::string text = format_index(extents_);
    write_file(index_path, text.data(), text.size());
  }
}

}  // namespace cohort::data
