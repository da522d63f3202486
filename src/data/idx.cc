#include "data/idx.h"

#include <zlib.h>

#include <cstring>

#include "core/status.h"
#include "data/file.h"

namespace cohort::data {
namespace {

// The largest ratio deflate reaches (about 1032:1); bounds what a .gz can declare.
constexpr uint64_t kMaxDeflateRatio = 1040;

struct Header {
  std::vector<int64_t> dims;
  uint64_t payload = 0;
  size_t header_bytes = 0;
};

Header parse_header(std::span<const uint8_t> bytes, const std::string& origin) {
  if (bytes.size() < 4) fail(Code::kCorruptData, origin, ": not an IDX file (", bytes.size(), " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0)
    fail(Code::kCorruptData, origin, ": not an IDX file (magic must start with two zero bytes)");
  if (bytes[2] != 0x08)
    fail(Code::kCorruptData, origin, ": IDX element type 0x", std::hex, int(bytes[2]),
         " is not supported (only unsigned byte, 0x08)");
  int ndim = bytes[3];
  if (ndim < 1 || ndim > 4) fail(Code::kCorruptData, origin, ": IDX rank ", ndim, " is not in [1, 4]");
  Header h;
  h.header_bytes = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < h.header_bytes) fail(Code::kCorruptData, origin, ": truncated IDX header");
  uint64_t total = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint8_t* p = bytes.data() + 4 + 4 * i;
    uint64_t d = uint64_t(p[0]) << 24 | uint64_t(p[1]) << 16 | uint64_t(p[2]) << 8 | p[3];
    h.dims.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(total, d, &total) || total > (uint64_t(1) << 40))
      fail(Code::kCorruptData, origin, ": IDX header declares an absurd size");
  }
  h.payload = total;
  return h;
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> bytes, const std::string& origin) {
  Header h = parse_header(bytes, origin);
  if (bytes.size() - h.header_bytes != h.payload)
    fail(Code::kCorruptData, origin, ": IDX header declares ", h.payload, " bytes of data but the file holds ",
         bytes.size() - h.header_bytes);
  IdxArray out;
  out.dims = h.dims;
  out.data.assign(bytes.begin() + static_cast<ptrdiff_t>(h.header_bytes), bytes.end());
  return out;
}

IdxArray read_idx(const std::string& path) {
  File file(path);
  uint8_t magic[2] = {0, 0};
  if (file.size() >= 2) file.read_at(0, magic, 2);
  if (!(magic[0] == 0x1f && magic[1] == 0x8b)) return parse_idx(read_file(path), cat("'", path, "'"));

  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) fail(Code::kIo, "cannot open '", path, "'");
  struct Closer {
    gzFile g;
    ~Closer() { gzclose(g); }
  } closer{gz};
  uint8_t head[20];
  int got = gzread(gz, head, 4);
  if (got != 4) fail(Code::kCorruptData, "'", path, "': truncated or corrupt gzip IDX header");
  size_t header_bytes = 4 + 4 * static_cast<size_t>(head[3] <= 4 ? head[3] : 0);
  if (header_bytes > 4) {
    got = gzread(gz, head + 4, static_cast<unsigned>(header_bytes - 4));
    if (got != static_cast<int>(header_bytes - 4)) fail(Code::kCorruptData, "'", path, "': truncated gzip IDX header");
  }
  Header h = parse_header({head, header_bytes}, cat("'", path, "'"));
  if (h.payload > file.size() * kMaxDeflateRatio)
    fail(Code::kCorruptData, "'", path, "': IDX header declares ", h.payload, " bytes, more than a ", file.size(),
         "-byte gzip file can hold");
  IdxArray out;
  out.dims = h.dims;
  out.data.resize(h.payload);
  uint64_t done = 0;
  while (done < h.payload) {
    unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(h.payload - done, 1u << 30));
    int n = gzread(gz, out.data.data() + done, chunk);
    if (n <= 0) {
      int err = 0;
      const char* msg = gzerror(gz, &err);
      fail(Code::kCorruptData, "'", path, "': IDX data ends after ", done, " of ", h.payload, " bytes",
           err ? cat(" (", msg, ")") : std::string());
    }
    done += static_cast<uint64_t>(n);
  }
  return out;
}

std::vector<uint8_t> encode_idx(const IdxArray& array) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(array.dims.size())};
  for (int64_t d : array.dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(d) >> s));
  out.insert(out.end(), array.data.begin(), array.data.end());
  return out;
}

}  // namespace cohort::data
