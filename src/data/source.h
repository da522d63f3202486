// Sources: where samples come from. Each is an indexable, read-only list of samples
// (encoded images with labels and boxes, or raw u8 pixels) that many reader threads
// may read at once. Sharding and order are the sampler's job, not the source's.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/example.h"

namespace cohort::data {

enum class OnError { kSkip, kFail };

// One sample as a reader hands it to the decoders. Buffers are reused between reads.
struct Sample {
  enum class Kind { kEncoded, kRaw, kPad };
  Kind kind = Kind::kPad;
  int64_t index = -1;                // in the source
  std::vector<uint8_t> storage;      // bytes read from disk
  std::span<const uint8_t> encoded;  // JPEG bytes (kEncoded)
  const uint8_t* raw = nullptr;      // u8 HWC pixels (kRaw), owned by the source
  int raw_h = 0, raw_w = 0, raw_c = 0;
  int64_t label = 0;
  std::vector<BBox> boxes;
  ImageExample example;  // parse scratch
};

struct SourceOptions {
  std::string path;             // data_dir
  std::string kind = "auto";    // auto|tfrecord|folder|idx|synthetic
  std::string split = "train";  // train|validation
  bool crc_check = true;
  bool write_index = true;
  // A DALI index that does not match its shard: rebuilt from the shard (true) or an
  // error (false).
  bool rebuild_stale_index = true;
  int64_t label_offset = 0;
  int64_t num_classes = 0;  // > 0: labels must lie in [0, num_classes)
  OnError on_error = OnError::kSkip;
  // TFRecord: read every record's label when the source is opened (true) or only when
  // each record is read (false). The scan reads the shards once, scan_threads at a time;
  // a label out of range fails the open, a corrupt record follows on_error.
  bool check_labels = true;
  int scan_threads = 1;
  int error_log_limit = 5;  // corrupt records the scan logs (all are counted)
  // Under on_error=skip, the scan fails the open when more than this fraction of the
  // records is corrupt, or all of them.
  double max_skipped_fraction = 0.01;
  int64_t synthetic_samples = 12800;
  int64_t synthetic_classes = 1000;
};

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  // Reads sample `index` into out (thread-safe). Throws kCorruptData / kIo naming
  // the file and offset of the sample.
  virtual void read(int64_t index, Sample& out) const = 0;
  // Where sample `index` lives, for messages: "'train-0.tfrecord' offset 1234 (record 5)".
  virtual std::string origin(int64_t index) const = 0;
  virtual std::string kind() const = 0;
  // Samples are JPEG bytes (true) or raw pixels (false).
  virtual bool encoded() const { return true; }
  // Raw sources: the sample geometry.
  virtual int raw_height() const { return 0; }
  virtual int raw_width() const { return 0; }
  virtual int raw_channels() const { return 3; }
  // Classes when the source knows them (folder, IDX, memory), else 0.
  virtual int64_t classes() const { return 0; }
  // Class names for a folder source.
  virtual std::vector<std::string> class_names() const { return {}; }
  virtual std::string describe() const = 0;
  // Damage found while opening (a truncated shard), one line each.
  virtual std::vector<std::string> problems() const { return {}; }
};

// Opens the source named by options (auto: the kind detect_layout() finds; a shell
// pattern names TFRecord shards). Throws kIo / kInvalidArgument / kCorruptData for a
// missing path, a layout that is none of the kinds or is ambiguous, an empty dataset,
// a stale index under rebuild_stale_index=false, or a label out of range (TFRecord
// labels: when check_labels).
std::shared_ptr<Source> open_source(const SourceOptions& options);

// Caller memory: images u8 [N, H, W] or [N, H, W, C] (C = 1 or 3), labels int32/int64
// [N], both contiguous CPU DLTensors. The memory is borrowed for the source's life.
std::shared_ptr<Source> memory_source(const DLTensor& images, const DLTensor& labels, const SourceOptions& options);

}  // namespace cohort::data
