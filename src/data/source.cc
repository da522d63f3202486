#include "data/source.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "core/logging.h"
#include "core/status.h"
#include "core/threads.h"
#include "data/detect.h"
#include "data/file.h"
#include "data/idx.h"
#include "data/tfrecord.h"

namespace cohort::data {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- TFRecord shards ----
class TFRecordSource : public Source {
 public:
  TFRecordSource(const std::vector<std::string>& paths, const SourceOptions& o) : options_(o) {
    for (const auto& path : paths) {
      // Shards are opened per read, not held open: ImageNet has over a thousand of them,
      // more than the usual limit of open files.
      File file(path);
      Shard shard{path, {}};
      if (!read_index(file, shard.extents)) shard.extents = scan_shard_file(file);
      total_ += static_cast<int64_t>(shard.extents.size());
      starts_.push_back(total_);
      shards_.push_back(std::move(shard));
    }
    if (total_ == 0) fail(Code::kInvalidArgument, "data_dir '", o.path, "': the TFRecord shards hold no records");
    if (o.check_labels) scan_labels();
  }

  int64_t size() const override { return total_; }
  std::string kind() const override { return "tfrecord"; }
  std::vector<std::string> problems() const override { return problems_; }
  std::string describe() const override {
    return cat(total_, " records in ", shards_.size(), " TFRecord shards at '", options_.path, "'");
  }

  std::string origin(int64_t index) const override {
    auto [s, r] = locate(index);
    return cat("'", shards_[s].path, "' offset ", shards_[s].extents[r].offset, " (record ", r, ")");
  }

  void read(int64_t index, Sample& out) const override {
    auto [s, r] = locate(index);
    const Shard& shard = shards_[s];
    File file(shard.path);
    auto data = read_record(file, shard.extents[r], options_.crc_check, out.storage);
    parse_image_example(data, origin(index), out.example);
    if (!out.example.has_label) fail(Code::kCorruptData, origin(index), ": the Example has no image/class/label");
    out.kind = Sample::Kind::kEncoded;
    out.encoded = out.example.image;
    std::string problem = label_problem(out.example.label);
    if (!problem.empty()) fail(Code::kCorruptData, origin(index), ": ", problem);
    out.label = out.example.label + options_.label_offset;
    out.boxes = out.example.boxes;
  }

 private:
  struct Shard {
    std::string path;
    std::vector<RecordExtent> extents;
  };
  // Reads <shard>.idx into extents when there is one that matches the shard. A stale
  // index fails under rebuild_stale_index=false; otherwise it is rebuilt (false).
  bool read_index(const File& file, std::vector<RecordExtent>& extents) {
    const std::string index_path = file.path() + ".idx";
    if (!is_regular_file(index_path)) return false;
    std::string problem;
    try {
      auto text = read_file(index_path, uint64_t(1) << 32);
      extents = parse_index({reinterpret_cast<const char*>(text.data()), text.size()}, index_path, file.size());
      problem = index_mismatch(file, extents, options_.crc_check);
    } catch (const Error& e) {
      if (e.code() != Code::kCorruptData) throw;
      problem = e.what();
    }
    if (problem.empty()) return true;
    if (!options_.rebuild_stale_index)
      fail(Code::kCorruptData, "index '", index_path, "' does not match its shard: ", problem,
           " (stale_index=fail; delete the index to rebuild it, or set stale_index=rebuild)");
    COHORT_LOG_WARN("index '", index_path, "' does not match its shard: ", problem,
                    "; rebuilding it from the shard (stale_index=rebuild)");
    problems_.push_back(cat("index '", index_path, "' does not match its shard: ", problem, " (rebuilt)"));
    extents.clear();
    return false;
  }

  // Walks the record headers of a shard without a usable index, and writes the index
  // when write_index and the whole shard could be indexed.
  std::vector<RecordExtent> scan_shard_file(const File& file) {
    const std::string& path = file.path();
    std::string problem;
    auto extents = scan_tfrecord(file, options_.crc_check, &problem);
    if (!problem.empty()) {
      Content content = extents.empty() ? sniff_content(path) : Content::kTFRecord;
      if (content != Content::kTFRecord && content != Content::kUnknown)
        fail(Code::kInvalidArgument, "'", path, "' is ", describe_content(path), ", not a TFRecord shard (", problem,
             "); data_source=tfrecord reads files of TFRecord records");
      if (options_.on_error == OnError::kFail) fail(Code::kCorruptData, "'", path, "': ", problem, " (on_error=fail)");
      COHORT_LOG_WARN("'", path, "': ", problem, "; using the ", extents.size(), " records before it");
      problems_.push_back(cat("'", path, "': ", problem));
    } else if (options_.write_index) {
      try {
        std::string text = format_index(extents);
        replace_file(path + ".idx", text.data(), text.size());
      } catch (const Error& e) {
        COHORT_LOG_DEBUG("index kept in memory: ", e.what());
      }
    }
    return extents;
  }

  std::pair<size_t, size_t> locate(int64_t index) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), index);
    size_t s = static_cast<size_t>(it - starts_.begin());
    int64_t first = s == 0 ? 0 : starts_[s - 1];
    return {s, static_cast<size_t>(index - first)};
  }

  static std::string where(const Shard& shard, size_t r) {
    return cat("'", shard.path, "' offset ", shard.extents[r].offset, " (record ", r, ")");
  }

  // Why a label (as stored) is out of range after label_offset, and what would fix it;
  // empty when it is in range. Without num_classes the bound is what an int32 batch
  // label holds.
  std::string label_problem(int64_t stored) const {
    const int64_t offset = options_.label_offset, classes = options_.num_classes;
    const int64_t bound = classes > 0 ? classes : int64_t(1) << 31;
    int64_t label = 0;
    const bool overflow = __builtin_add_overflow(stored, offset, &label);
    if (!overflow && label >= 0 && label < bound) return {};
    std::string head = cat("label ", stored, " as stored + label_offset ", offset);
    std::string range = cat("[0, ", bound, ") (num_classes ", classes, classes > 0 ? ")" : ": the int32 label range)");
    if (overflow) return cat(head, " is outside ", range, ": not a class label");
    head += cat(" = ", label, " is outside ", range, ": ");
    if (label < -(int64_t(1) << 31) || label >= int64_t(1) << 31) return cat(head, "not a class label");
    if (label < 0)
      return cat(head, "labels must not be negative after label_offset; label_offset=", offset - label,
                 stored >= 0 ? " maps this label to 0" : " would make it 0 (or the dataset labels differently)");
    if (label == classes && offset == 0)
      return cat(head, "labels that start at 1, as in ImageNet TFRecords, need label_offset=-1",
                 "; a model with a class 0 of its own (background) needs num_classes=", classes + 1);
    return cat(head, "num_classes=", classes, " is too small for this dataset (label ", label,
               " needs num_classes=", label + 1, " or more), or data_dir / label_offset is wrong");
  }

  // What the label scan found in one shard.
  struct ShardScan {
    bool failed = false;  // stop: code and message are the error to report
    Code code = Code::kOk;
    std::string message;
    int64_t corrupt = 0;  // skipped under on_error=skip
    std::vector<std::string> logged;
  };

  // Reads the labels of shard s, stopping at the first failure or once an earlier shard
  // has failed (its error is the one reported).
  ShardScan scan_shard(size_t s, const std::atomic<size_t>& first_failed) const {
    const Shard& shard = shards_[s];
    const size_t limit = static_cast<size_t>(std::max(0, options_.error_log_limit));
    ShardScan out;
    auto stop = [&](Code code, std::string message) {
      out.failed = true;
      out.code = code;
      out.message = std::move(message);
      return out;
    };
    try {
      File file(shard.path);
      std::vector<uint8_t> buf;
      for (size_t r = 0; r < shard.extents.size(); ++r) {
        if (r % 64 == 0 && s > first_failed.load()) return out;
        int64_t stored = 0;
        try {
          buf.resize(shard.extents[r].size);
          file.read_at(shard.extents[r].offset, buf.data(), buf.size());
          auto data = parse_record(buf, options_.crc_check, where(shard, r));
          if (!parse_example_label(data, where(shard, r), &stored))
            fail(Code::kCorruptData, where(shard, r), ": the Example has no image/class/label");
        } catch (const Error& e) {
          if (e.code() != Code::kCorruptData) throw;
          if (options_.on_error == OnError::kFail)
            return stop(e.code(), cat(e.what(), " (on_error=fail; found by check_labels=create)"));
          ++out.corrupt;
          if (out.logged.size() < limit) out.logged.push_back(e.what());
          continue;
        }
        std::string problem = label_problem(stored);
        if (!problem.empty())
          return stop(Code::kInvalidArgument,
                      cat(where(shard, r), ": ", problem,
                          " (found by check_labels=create, which reads every label when the dataset is opened)"));
      }
    } catch (const Error& e) {
      return stop(e.code(), e.what());
    }
    return out;
  }

  // Reads every record's label when the source is opened (the Example is parsed only for
  // image/class/label; the image is never decoded), one shard per task on scan_threads
  // threads. A label out of range fails; a corrupt record (CRC, not an Example, no label)
  // fails under on_error=fail and is counted and logged under skip (reading it fails
  // again and is skipped then). The error reported is the first in shard and record
  // order, whatever the thread count.
  void scan_labels() {
    std::vector<ShardScan> found(shards_.size());
    std::atomic<size_t> first_failed{std::numeric_limits<size_t>::max()};
    auto scan = [&](size_t s) {
      if (s > first_failed.load()) return;
      found[s] = scan_shard(s, first_failed);
      if (!found[s].failed) return;
      size_t cur = first_failed.load();
      while (s < cur && !first_failed.compare_exchange_weak(cur, s)) {
      }
    };
    const int threads = std::min<int>(std::max(1, options_.scan_threads), static_cast<int>(shards_.size()));
    if (threads <= 1) {
      for (size_t s = 0; s < shards_.size(); ++s) scan(s);
    } else {
      ThreadPool pool(threads - 1);
      pool.parallel_for(shards_.size(), scan);
    }
    for (const auto& f : found)
      if (f.failed) fail(f.code, f.message);
    int64_t corrupt = 0;
    size_t logged = 0;
    for (const auto& f : found) {
      corrupt += f.corrupt;
      for (const auto& line : f.logged)
        if (logged++ < static_cast<size_t>(std::max(0, options_.error_log_limit)))
          COHORT_LOG_WARN("corrupt record (skipped when read): ", line);
    }
    if (corrupt > 0) {
      std::string first;
      for (const auto& f : found)
        if (first.empty() && !f.logged.empty()) first = f.logged.front();
      const double fraction = static_cast<double>(corrupt) / static_cast<double>(total_);
      if (corrupt == total_ || fraction > options_.max_skipped_fraction)
        fail(
            Code::kCorruptData, "data_dir '", options_.path, "': ",
            corrupt == total_ ? cat("every one of the ", total_, " records") : cat(corrupt, " of ", total_, " records"),
            " could not be read (found by check_labels=create), more than max_skipped_fraction=",
            options_.max_skipped_fraction, " allows", first.empty() ? "" : cat("; the first: ", first),
            ". Check the data with cohort-data verify, or raise max_skipped_fraction");
      std::string line = cat(corrupt, " of ", total_, " records could not be read while checking labels",
                             " (on_error=skip: they are skipped when read)");
      COHORT_LOG_WARN("data_dir '", options_.path, "': ", line);
      problems_.push_back(line);
    }
  }

  SourceOptions options_;
  std::vector<std::string> problems_;
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;  // cumulative record counts
  int64_t total_ = 0;
};

// ---- image folder: one sub-folder per class, sorted ----
class FolderSource : public Source {
 public:
  explicit FolderSource(const SourceOptions& o) : options_(o) {
    std::vector<std::string> empty, ignored;
    for (const auto& name : list_directory(o.path)) {
      std::string dir = join_path(o.path, name);
      if (!is_directory(dir)) continue;
      auto images = image_files(dir, &ignored);
      if (images.empty()) empty.push_back(name);
      int64_t label = static_cast<int64_t>(classes_.size());
      classes_.push_back(name);
      for (auto& path : images) files_.push_back({std::move(path), label});
    }
    const std::string layout =
        cat("an image folder has one sub-folder per class holding its images ('", o.path, "/CLASS/IMAGE.jpg')");
    if (classes_.empty()) fail(Code::kInvalidArgument, "data_dir '", o.path, "' has no class sub-folders: ", layout);
    if (!empty.empty()) {
      std::string names;
      for (size_t i = 0; i < empty.size() && i < 3; ++i) names += cat(i ? ", " : "", "'", empty[i], "/'");
      fail(Code::kInvalidArgument, "data_dir '", o.path, "': ", empty.size(), " of its ", classes_.size(),
           " sub-folders hold no images (", names, empty.size() > 3 ? ", ..." : "",
           "); every sub-folder is a class and ", layout, ": move the others out");
    }
    if (!ignored.empty())
      COHORT_LOG_INFO("data_dir '", o.path, "': ignoring ", ignored.size(),
                      ignored.size() == 1 ? " file that is not an image: '" : " files that are not images, e.g. '",
                      ignored.front(), "'");
    if (o.num_classes > 0 && static_cast<int64_t>(classes_.size()) + o.label_offset > o.num_classes)
      fail(Code::kInvalidArgument, "data_dir '", o.path, "' has ", classes_.size(), " classes but num_classes is ",
           o.num_classes);
  }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  std::string kind() const override { return "folder"; }
  int64_t classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  std::string describe() const override {
    return cat(files_.size(), " images in ", classes_.size(), " classes at '", options_.path, "'");
  }
  std::string origin(int64_t index) const override { return cat("'", files_[static_cast<size_t>(index)].path, "'"); }
  void read(int64_t index, Sample& out) const override {
    const auto& f = files_[static_cast<size_t>(index)];
    File file(f.path);
    if (file.size() > (uint64_t(1) << 30)) fail(Code::kCorruptData, origin(index), ": file larger than 1 GiB");
    out.storage.resize(file.size());
    if (file.size()) file.read_at(0, out.storage.data(), out.storage.size());
    out.kind = Sample::Kind::kEncoded;
    out.encoded = out.storage;
    out.label = f.label + options_.label_offset;
    out.boxes.clear();
  }

 private:
  struct Entry {
    std::string path;
    int64_t label;
  };
  SourceOptions options_;
  std::vector<std::string> classes_;
  std::vector<Entry> files_;
};

// ---- raw u8 pixels with labels (MNIST IDX, caller memory) ----
class RawSource : public Source {
 public:
  RawSource(std::string kind, std::string where, int64_t n, int h, int w, int c, const uint8_t* pixels,
            std::vector<int64_t> labels, const SourceOptions& o)
      : kind_(std::move(kind)),
        where_(std::move(where)),
        n_(n),
        h_(h),
        w_(w),
        c_(c),
        pixels_(pixels),
        labels_(std::move(labels)) {
    if (n_ == 0) fail(Code::kInvalidArgument, where_, ": the dataset is empty");
    int64_t max_label = 0;
    for (int64_t i = 0; i < n_; ++i) {
      labels_[static_cast<size_t>(i)] += o.label_offset;
      int64_t l = labels_[static_cast<size_t>(i)];
      if (l < 0 || (o.num_classes > 0 && l >= o.num_classes))
        fail(Code::kInvalidArgument, where_, ": label ", l, " of sample ", i, " is outside [0, ",
             o.num_classes > 0 ? o.num_classes : INT64_MAX, ") (label_offset ", o.label_offset, ")");
      max_label = std::max(max_label, l);
    }
    classes_ = max_label + 1;
  }
  int64_t size() const override { return n_; }
  std::string kind() const override { return kind_; }
  bool encoded() const override { return false; }
  int raw_height() const override { return h_; }
  int raw_width() const override { return w_; }
  int raw_channels() const override { return c_; }
  int64_t classes() const override { return classes_; }
  std::string describe() const override { return cat(n_, " images of ", h_, "x", w_, "x", c_, " from ", where_); }
  std::string origin(int64_t index) const override { return cat(where_, " sample ", index); }
  void read(int64_t index, Sample& out) const override {
    out.kind = Sample::Kind::kRaw;
    out.raw = pixels_ + static_cast<size_t>(index) * static_cast<size_t>(h_) * w_ * c_;
    out.raw_h = h_;
    out.raw_w = w_;
    out.raw_c = c_;
    out.label = labels_[static_cast<size_t>(index)];
    out.boxes.clear();
  }

 protected:
  std::string kind_, where_;
  int64_t n_;
  int h_, w_, c_;
  const uint8_t* pixels_;
  std::vector<int64_t> labels_;
  int64_t classes_ = 0;
};

class IdxSource : public RawSource {
 public:
  IdxSource(IdxArray images, IdxArray labels, const std::string& images_path, const SourceOptions& o)
      : RawSource("idx", cat("'", images_path, "'"), check(images, labels, images_path),
                  static_cast<int>(images.dims[1]), static_cast<int>(images.dims[2]), 1, nullptr,
                  std::vector<int64_t>(labels.data.begin(), labels.data.end()), o),
        images_(std::move(images)) {
    pixels_ = images_.data.data();
  }

 private:
  static int64_t check(const IdxArray& images, const IdxArray& labels, const std::string& path) {
    if (images.dims.size() != 3) fail(Code::kCorruptData, "'", path, "': MNIST images must have 3 dimensions");
    if (labels.dims.size() != 1 || labels.dims[0] != images.dims[0])
      fail(Code::kCorruptData, "'", path, "': ", images.dims[0], " images but ",
           labels.dims.empty() ? 0 : labels.dims[0], " labels");
    if (images.dims[1] <= 0 || images.dims[2] <= 0 || images.dims[1] > 65535 || images.dims[2] > 65535)
      fail(Code::kCorruptData, "'", path, "': bad image size");
    return images.dims[0];
  }
  IdxArray images_;
};

class SyntheticSource : public Source {
 public:
  explicit SyntheticSource(const SourceOptions& o) : n_(o.synthetic_samples), classes_(o.synthetic_classes) {}
  int64_t size() const override { return n_; }
  std::string kind() const override { return "synthetic"; }
  bool encoded() const override { return false; }
  int64_t classes() const override { return classes_; }
  std::string describe() const override { return cat("synthetic data (", n_, " samples per epoch)"); }
  std::string origin(int64_t index) const override { return cat("synthetic sample ", index); }
  void read(int64_t, Sample& out) const override { out.kind = Sample::Kind::kPad; }

 private:
  int64_t n_, classes_;
};

std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {"", ".gz"}) {
    std::string p = join_path(dir, stem + suffix);
    if (is_regular_file(p)) return p;
  }
  return {};
}

std::shared_ptr<Source> open_idx(const SourceOptions& o) {
  std::string images, labels;
  if (is_directory(o.path)) {
    std::string prefix = o.split == "train" ? "train" : "t10k";
    images = find_idx(o.path, prefix + "-images-idx3-ubyte");
    labels = find_idx(o.path, prefix + "-labels-idx1-ubyte");
    if (images.empty() || labels.empty())
      fail(Code::kInvalidArgument, "data_dir '", o.path, "': no ", prefix, "-images-idx3-ubyte[.gz] and ", prefix,
           "-labels-idx1-ubyte[.gz] files");
  } else {
    images = o.path;
    auto pos = images.find("images-idx3");
    if (pos == std::string::npos)
      fail(Code::kInvalidArgument, "data_dir '", o.path,
           "': an MNIST path must name the *-images-idx3-ubyte[.gz] file or its folder");
    labels = images;
    labels.replace(pos, 11, "labels-idx1");
    if (!is_regular_file(labels)) fail(Code::kIo, "MNIST labels '", labels, "' not found beside '", images, "'");
  }
  return std::make_shared<IdxSource>(read_idx(images), read_idx(labels), images, o);
}

// Every file of a shell pattern, the shard a path names, or the files of a directory.
std::vector<std::string> tfrecord_files(const SourceOptions& o) {
  std::vector<std::string> out;
  if (o.path.find_first_of("*?[") != std::string::npos) {
    for (auto& p : glob_paths(o.path))
      if (!ends_with(p, ".idx") && is_regular_file(p)) out.push_back(p);
    if (out.empty()) fail(Code::kIo, "data_dir '", o.path, "' matches no files");
    return out;
  }
  if (is_regular_file(o.path)) return {o.path};
  for (const auto& name : list_directory(o.path)) {
    std::string p = join_path(o.path, name);
    if (!ends_with(name, ".idx") && is_regular_file(p)) out.push_back(p);
  }
  if (out.empty()) fail(Code::kInvalidArgument, "data_dir '", o.path, "' holds no files");
  return out;
}

// The shards of the split: those named <split>-* or <split>.*; all of them when none is
// named by either split. Shards of the other split only are an error, not a fallback.
std::vector<std::string> split_shards(const std::vector<std::string>& paths, const SourceOptions& o) {
  const std::string mine = o.split == "train" ? "train" : "validation";
  const std::string other = o.split == "train" ? "validation" : "train";
  std::vector<std::string> ours;
  size_t theirs = 0;
  for (const auto& p : paths) {
    if (named_by_split(base_name(p), mine)) ours.push_back(p);
    if (named_by_split(base_name(p), other)) ++theirs;
  }
  if (!ours.empty()) return ours;
  if (theirs > 0)
    fail(Code::kInvalidArgument, "data_dir '", o.path, "' has no ", mine, "-* shards for data_split=", o.split,
         " (it holds ", theirs, " ", other, "-* shards): name the shards of this split ", mine, "-*");
  return paths;
}

}  // namespace

std::shared_ptr<Source> open_source(const SourceOptions& o) {
  std::string kind = o.kind;
  if (kind == "synthetic" || (kind == "auto" && o.path.empty())) return std::make_shared<SyntheticSource>(o);
  if (o.path.empty()) fail(Code::kInvalidArgument, "data_source '", kind, "' needs data_dir");
  bool pattern = o.path.find_first_of("*?[") != std::string::npos;
  if (!pattern && !path_exists(o.path)) fail(Code::kIo, "data_dir '", o.path, "' does not exist");
  std::vector<std::string> shards;
  if (kind == "auto" && pattern) kind = "tfrecord";
  if (kind == "auto") {
    Layout layout = detect_layout(o.path);
    for (const auto& note : layout.notes) COHORT_LOG_INFO("data_dir '", o.path, "': ", note);
    kind = layout.kind;
    shards = std::move(layout.shards);
  }
  if (kind == "idx") return open_idx(o);
  if (kind == "folder") return std::make_shared<FolderSource>(o);
  if (kind == "tfrecord") {
    if (shards.empty()) shards = tfrecord_files(o);
    // A pattern or a single file names exactly the shards to read.
    return std::make_shared<TFRecordSource>(pattern || !is_directory(o.path) ? shards : split_shards(shards, o), o);
  }
  fail(Code::kInvalidArgument, "data_source '", kind, "' is not one of auto|tfrecord|folder|idx|synthetic");
}

std::shared_ptr<Source> memory_source(const DLTensor& images, const DLTensor& labels, const SourceOptions& o) {
  if (images.device.device_type != kDLCPU && images.device.device_type != kDLCUDAHost)
    fail(Code::kInvalidArgument, "images must be in CPU memory");
  if (images.dtype.code != kDLUInt || images.dtype.bits != 8 || images.dtype.lanes != 1)
    fail(Code::kInvalidArgument, "images must be uint8 (got code ", int(images.dtype.code), " bits ",
         int(images.dtype.bits), ")");
  if (images.ndim != 3 && images.ndim != 4)
    fail(Code::kInvalidArgument, "images must be [N, H, W] or [N, H, W, C], got ", images.ndim, " dimensions");
  int64_t c = images.ndim == 4 ? images.shape[3] : 1;
  if (c != 1 && c != 3) fail(Code::kInvalidArgument, "images must have 1 or 3 channels, got ", c);
  if (images.strides) {
    int64_t expect = 1;
    for (int i = images.ndim - 1; i >= 0; --i) {
      if (images.shape[i] != 1 && images.strides[i] != expect)
        fail(Code::kInvalidArgument, "images must be contiguous");
      expect *= images.shape[i];
    }
  }
  if (labels.ndim != 1 || labels.shape[0] != images.shape[0])
    fail(Code::kInvalidArgument, "labels must be [N] with N = ", images.shape[0]);
  if (labels.dtype.code != kDLInt || (labels.dtype.bits != 32 && labels.dtype.bits != 64) || labels.dtype.lanes != 1)
    fail(Code::kInvalidArgument, "labels must be int32 or int64");
  if (labels.strides && labels.shape[0] > 1 && labels.strides[0] != 1)
    fail(Code::kInvalidArgument, "labels must be contiguous");
  if (images.shape[1] <= 0 || images.shape[2] <= 0 || images.shape[1] > 65535 || images.shape[2] > 65535)
    fail(Code::kInvalidArgument, "images have a bad height or width");
  int64_t n = images.shape[0];
  std::vector<int64_t> l(static_cast<size_t>(n));
  const char* base = static_cast<const char*>(labels.data) + labels.byte_offset;
  for (int64_t i = 0; i < n; ++i) {
    if (labels.dtype.bits == 32) {
      int32_t v;
      std::memcpy(&v, base + 4 * i, 4);
      l[static_cast<size_t>(i)] = v;
    } else {
      std::memcpy(&l[static_cast<size_t>(i)], base + 8 * i, 8);
    }
  }
  const auto* pixels = static_cast<const uint8_t*>(images.data) + images.byte_offset;
  return std::make_shared<RawSource>("memory", "caller memory", n, static_cast<int>(images.shape[1]),
                                     static_cast<int>(images.shape[2]), static_cast<int>(c), pixels, std::move(l), o);
}

}  // namespace cohort::data
