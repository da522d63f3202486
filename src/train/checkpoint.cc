#include "train/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include "core/crc32c.h"
#include "core/files.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian");

namespace {

constexpr char kMagic[8] = {'C', 'O', 'H', 'O', 'R', 'T', 'C', 'K'};
constexpr size_t kHeaderSize = 32;
constexpr size_t kChunk = size_t{1} << 20;
constexpr uint32_t kMaxNdim = 16;
constexpr uint32_t kMaxString = 1u << 20;
constexpr std::string_view kLatest = "latest";

std::string sys_error() { return std::strerror(errno); }

// Streams the payload into an AtomicFile, computing its size and CRC on the way.
class PayloadWriter {
 public:
  PayloadWriter(AtomicFile& file, const CheckpointWriteOptions& options) : file_(file), options_(options) {}

  template <typename T>
  void pod(T v) {
    buffer_.append(reinterpret_cast<const char*>(&v), sizeof v);
    if (buffer_.size() >= kChunk) flush();
  }
  void str(std::string_view s) {
    require(s.size() < kMaxString, "checkpoint: a name of ", s.size(), " bytes is too long");
    pod(static_cast<uint32_t>(s.size()));
    buffer_.append(s);
  }
  void tensor(const NamedTensor& t) {
    const Tensor& x = t.tensor;
    require(x.device().is_host() && x.is_contiguous() && (x.numel() == 0 || x.data() != nullptr),
            "checkpoint: tensor '", t.name, "' must be a contiguous host tensor (got ", x.describe(), ")");
    str(t.name);
    DLDataType dl = to_dlpack(x.dtype());
    pod(static_cast<uint8_t>(dl.code));
    pod(static_cast<uint8_t>(dl.bits));
    pod(static_cast<uint32_t>(x.ndim()));
    for (int64_t d : x.shape()) pod(d);
    pod(static_cast<uint64_t>(x.nbytes()));
    flush();
    const char* p = static_cast<const char*>(x.data());
    for (size_t off = 0; off < x.nbytes(); off += kChunk) emit(p + off, std::min(kChunk, x.nbytes() - off));
  }
  void flush() {
    if (!buffer_.empty()) emit(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
  uint64_t size() const { return size_; }
  uint32_t crc() const { return crc_; }

 private:
  void emit(const char* p, size_t n) {
    file_.write(p, n);
    crc_ = crc32c_extend(crc_, p, n);
    size_ += n;
    if (options_.on_progress) options_.on_progress(kHeaderSize + size_);
  }

  AtomicFile& file_;
  const CheckpointWriteOptions& options_;
  std::string buffer_;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
};

void check_unique(const std::vector<NamedTensor>& ts, std::string_view what) {
  std::set<std::string_view> seen;
  for (const NamedTensor& t : ts)
    require(seen.insert(t.name).second, "checkpoint: ", what, " '", t.name, "' appears twice");
}

// Bounds-checked reading of the payload.
class Cursor {
 public:
  Cursor(std::string_view data, size_t begin, const fs::path& file) : d_(data), pos_(begin), file_(file) {}

  [[noreturn]] void malformed(std::string_view what) const {
    fail(Code::kCorruptData, "checkpoint '", file_.string(), "' is malformed at byte ", pos_, ": ", what,
         " (the checksum matched, so it was written this way: a cohort bug or a foreign file)");
  }
  const char* take(uint64_t n, std::string_view what) {
    if (n > d_.size() - pos_) malformed(cat(what, " runs past the end of the file"));
    const char* p = d_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T pod(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  std::string str(std::string_view what) {
    uint32_t n = pod<uint32_t>(what);
    if (n >= kMaxString) malformed(cat(what, " has an implausible length ", n));
    return std::string(take(n, what), n);
  }
  NamedTensor tensor() {
    NamedTensor t;
    t.name = str("a tensor name");
    DLDataType dl{pod<uint8_t>("a dtype"), pod<uint8_t>("a dtype"), 1};
    DType dtype;
    try {
      dtype = from_dlpack(dl);
    } catch (const Error&) {
      malformed(cat("tensor '", t.name, "' has an unknown dtype (code ", int(dl.code), ", bits ", int(dl.bits), ")"));
    }
    uint32_t ndim = pod<uint32_t>("a rank");
    if (ndim > kMaxNdim) malformed(cat("tensor '", t.name, "' has rank ", ndim));
    Shape shape(ndim);
    for (auto& d : shape) {
      d = pod<int64_t>("a dimension");
      if (d < 0 || d > (int64_t{1} << 40)) malformed(cat("tensor '", t.name, "' has dimension ", d));
    }
    uint64_t nbytes = pod<uint64_t>("a byte count");
    int64_t numel = 0;
    try {
      numel = shape_numel(shape);
    } catch (const Error&) {
      malformed(cat("tensor '", t.name, "' has an impossible shape ", shape_string(shape)));
    }
    if (nbytes != static_cast<uint64_t>(numel) * dtype_size(dtype))
      malformed(cat("tensor '", t.name, "' holds ", nbytes, " bytes for shape ", shape_string(shape)));
    const char* p = take(nbytes, cat("tensor '", t.name, "'"));
    t.tensor = Tensor::empty(shape, dtype);
    if (nbytes > 0) std::memcpy(t.tensor.data(), p, nbytes);
    return t;
  }
  size_t remaining() const { return d_.size() - pos_; }

 private:
  std::string_view d_;
  size_t pos_;
  const fs::path& file_;
};

// A read-only mapping of a whole file: no copy out of the page cache (a checkpoint is
// as large as the model).
class MappedFile {
 public:
  explicit MappedFile(const fs::path& file) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(Code::kIo, "cannot open checkpoint '", file.string(), "': ", sys_error());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      std::string e = sys_error();
      ::close(fd);
      fail(Code::kIo, "cannot stat checkpoint '", file.string(), "': ", e);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        std::string e = sys_error();
        ::close(fd);
        fail(Code::kIo, "cannot map checkpoint '", file.string(), "': ", e);
      }
      data_ = static_cast<const char*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

template <typename T, typename Bytes>
T load_at(const Bytes& d, size_t offset) {
  T v;
  std::memcpy(&v, d.data() + offset, sizeof v);
  return v;
}

}  // namespace

void write_checkpoint(const fs::path& file, const Checkpoint& ck, const CheckpointWriteOptions& options) {
  check_unique(ck.params, "parameter");
  check_unique(ck.optimizer_state, "optimizer state");
  AtomicFile out(file);
  char header[kHeaderSize] = {};
  out.write(header, sizeof header);  // filled in once the payload's size and CRC are known

  PayloadWriter w(out, options);
  w.str(ck.model);
  for (int64_t v : {ck.epoch, ck.step, ck.pipeline_epoch, ck.pipeline_step}) w.pod(v);
  w.pod(ck.seed);
  w.pod(ck.rng_counter);
  w.pod(static_cast<uint32_t>(ck.metadata.size()));
  for (const auto& [k, v] : ck.metadata) {
    w.str(k);
    w.str(v);
  }
  w.pod(static_cast<uint32_t>(ck.params.size()));
  for (const NamedTensor& t : ck.params) w.tensor(t);
  w.pod(static_cast<uint32_t>(ck.optimizer_state.size()));
  for (const NamedTensor& t : ck.optimizer_state) w.tensor(t);
  w.flush();

  std::memcpy(header, kMagic, 8);
  const uint32_t version = kCheckpointVersion, header_size = kHeaderSize;
  const uint64_t payload_size = w.size();
  const uint32_t payload_crc = w.crc();
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 12, &header_size, 4);
  std::memcpy(header + 16, &payload_size, 8);
  std::memcpy(header + 24, &payload_crc, 4);
  const uint32_t header_crc = crc32c(header, 28);
  std::memcpy(header + 28, &header_crc, 4);
  out.pwrite_at(header, sizeof header, 0);
  out.commit();
}

Checkpoint read_checkpoint(const fs::path& file) {
  const MappedFile mapped(file);
  return parse_checkpoint(mapped.view(), file);
}

Checkpoint parse_checkpoint(std::string_view d, const fs::path& file) {
  const std::string name = file.string();
  auto corrupt = [&](const auto&... what) { fail(Code::kCorruptData, "checkpoint '", name, "' ", what...); };
  if (d.empty()) corrupt("is empty (0 bytes)");
  if (d.size() < 8 && std::memcmp(d.data(), kMagic, d.size()) == 0)
    corrupt("is truncated: ", d.size(), " bytes, shorter than the ", kHeaderSize, "-byte header");
  if (d.size() < 8 || std::memcmp(d.data(), kMagic, 8) != 0)
    corrupt("is not a cohort checkpoint (bad magic: the first 8 bytes are not \"COHORTCK\")");
  if (d.size() < kHeaderSize)
    corrupt("is truncated: ", d.size(), " bytes, shorter than the ", kHeaderSize, "-byte header");
  const uint32_t version = load_at<uint32_t>(d, 8);
  if (version != kCheckpointVersion)
    corrupt("has format version ", version, "; this cohort reads version ", kCheckpointVersion,
            version > kCheckpointVersion ? " (written by a newer cohort)" : "");
  if (load_at<uint32_t>(d, 28) != crc32c(d.data(), 28)) corrupt("has a corrupt header (header checksum mismatch)");
  if (load_at<uint32_t>(d, 12) != kHeaderSize) corrupt("has an unexpected header size ", load_at<uint32_t>(d, 12));
  const uint64_t payload = load_at<uint64_t>(d, 16);
  const uint64_t have = d.size() - kHeaderSize;
  if (have < payload)
    corrupt("is truncated: the header announces ", payload + kHeaderSize, " bytes, the file has ", d.size());
  if (have > payload)
    corrupt("has ", have - payload, " unexpected bytes after its end (", payload + kHeaderSize,
            " bytes expected, the file has ", d.size(), ")");
  const uint32_t stored = load_at<uint32_t>(d, 24);
  const uint32_t computed = crc32c(d.data() + kHeaderSize, payload);
  if (stored != computed)
    corrupt("is corrupt: checksum mismatch (stored CRC32C ", stored, ", computed ", computed, ")");

  Cursor c(d, kHeaderSize, file);
  Checkpoint ck;
  ck.model = c.str("the model name");
  ck.epoch = c.pod<int64_t>("the epoch");
  ck.step = c.pod<int64_t>("the step");
  ck.pipeline_epoch = c.pod<int64_t>("the pipeline epoch");
  ck.pipeline_step = c.pod<int64_t>("the pipeline step");
  ck.seed = c.pod<uint64_t>("the seed");
  ck.rng_counter = c.pod<uint64_t>("the RNG counter");
  for (uint32_t i = 0, n = c.pod<uint32_t>("the metadata count"); i < n; ++i) {
    std::string k = c.str("a metadata key");
    ck.metadata[k] = c.str("a metadata value");
  }
  for (uint32_t i = 0, n = c.pod<uint32_t>("the parameter count"); i < n; ++i) ck.params.push_back(c.tensor());
  for (uint32_t i = 0, n = c.pod<uint32_t>("the state count"); i < n; ++i) ck.optimizer_state.push_back(c.tensor());
  if (c.remaining() != 0) c.malformed(cat(c.remaining(), " bytes left over after the last tensor"));
  return ck;
}

void check_checkpoint_matches(const Checkpoint& ck, std::string_view model, std::span<const NamedTensor> params,
                              const fs::path& file) {
  const std::string name = file.string();
  require(ck.model == model, "checkpoint '", name, "' was saved for model '", ck.model, "', this run's model is '",
          model, "'");
  std::map<std::string_view, const Tensor*> saved;
  for (const NamedTensor& t : ck.params) saved[t.name] = &t.tensor;
  std::set<std::string_view> wanted;
  for (const NamedTensor& p : params) {
    wanted.insert(p.name);
    auto it = saved.find(p.name);
    require(it != saved.end(), "checkpoint '", name, "' has no parameter '", p.name, "' that model '", model,
            "' needs");
    const Tensor& s = *it->second;
    require(s.dtype() == p.tensor.dtype() && s.shape() == p.tensor.shape(), "checkpoint '", name, "': parameter '",
            p.name, "' is ", dtype_name(s.dtype()), shape_string(s.shape()), " in the checkpoint but ",
            dtype_name(p.tensor.dtype()), shape_string(p.tensor.shape()), " in the model");
  }
  for (const NamedTensor& t : ck.params)
    require(wanted.count(t.name) != 0, "checkpoint '", name, "' has parameter '", t.name, "' that model '", model,
            "' does not have");
}

void restore_parameters(const Checkpoint& ck, std::string_view model, std::span<const NamedTensor> params,
                        const fs::path& file) {
  check_checkpoint_matches(ck, model, params, file);
  std::map<std::string_view, const Tensor*> saved;
  for (const NamedTensor& t : ck.params) saved[t.name] = &t.tensor;
  for (const NamedTensor& p : params) {
    require(p.tensor.is_contiguous(), "restore: parameter '", p.name, "' must be contiguous, got ",
            p.tensor.describe());
    copy(p.tensor, *saved[p.name]);  // to the parameter's device (complete on return)
  }
}

void store_optimizer_state(Checkpoint& ck, const Optimizer& optimizer) {
  ck.optimizer_state.clear();
  for (const NamedTensor& e : optimizer.export_state()) ck.optimizer_state.push_back({e.name, clone_host(e.tensor)});
  ck.metadata["optimizer"] = std::string(optimizer_kind_name(optimizer.options().kind));
}

void restore_optimizer_state(const Checkpoint& ck, Optimizer& optimizer, const fs::path& file) {
  const std::string_view kind = optimizer_kind_name(optimizer.options().kind);
  auto saved = ck.metadata.find("optimizer");
  if (saved != ck.metadata.end() && saved->second != kind)
    fail(Code::kInvalidArgument, "checkpoint '", file.string(), "' holds the state of optimizer=", saved->second,
         "; this run uses optimizer=", kind, " (set optimizer=", saved->second, " to resume it)");
  try {
    optimizer.import_state(ck.optimizer_state);
  } catch (const Error& e) {
    fail(e.code(), "checkpoint '", file.string(), "': ", e.what());
  }
}

CheckpointDir::CheckpointDir(fs::path dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  require(!dir_.empty(), "checkpoint_dir is empty");
  require(keep >= 1, "keep_checkpoints must be >= 1, got ", keep);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) fail(Code::kIo, "cannot create checkpoint_dir '", dir_.string(), "': ", ec.message());
}

fs::path CheckpointDir::save(const Checkpoint& ck, const CheckpointWriteOptions& options) {
  require(ck.step >= 0, "checkpoint: step must be >= 0, got ", ck.step);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))  // leftovers of interrupted writes
    if (e.path().filename().string().starts_with(kTempFilePrefix)) fs::remove(e.path(), ec);

  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%012lld.cohort", static_cast<long long>(ck.step));
  const fs::path file = dir_ / name;
  write_checkpoint(file, ck, options);
  replace_file_atomically(dir_ / kLatest, std::string(name) + "\n");
  std::vector<fs::path> all;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("ckpt-") && f.ends_with(".cohort")) all.push_back(e.path());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i)
    if (all[i] != file) fs::remove(all[i], ec);
  return file;
}

std::optional<fs::path> CheckpointDir::latest() const {
  const fs::path pointer = dir_ / kLatest;
  std::error_code ec;
  if (!fs::exists(pointer, ec)) return std::nullopt;
  if (fs::file_size(pointer, ec) > 4096)
    fail(Code::kCorruptData, "'", pointer.string(), "' is ", fs::file_size(pointer, ec),
         " bytes; it should hold one checkpoint file name");
  const MappedFile raw(pointer);
  const std::string name = trim(raw.view());
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    fail(Code::kCorruptData, "'", pointer.string(), "' should name a checkpoint file in '", dir_.string(),
         "', it holds '", name, "'");
  const fs::path file = dir_ / name;
  if (!fs::exists(file, ec))
    fail(Code::kCorruptData, "'", pointer.string(), "' names '", name, "', which does not exist in '", dir_.string(),
         "'");
  return file;
}

Checkpoint CheckpointDir::load_latest() const {
  std::optional<fs::path> file = latest();
  if (!file) fail(Code::kIo, "no checkpoint in '", dir_.string(), "' (no '", kLatest, "' file) to resume from");
  return read_checkpoint(*file);
}

}  // namespace cohort
