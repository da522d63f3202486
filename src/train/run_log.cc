#include "train/run_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/config.h"
#include "core/status.h"
#include "data/tfrecord.h"

namespace cohort::train {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Protocol-buffer wire format: the few field kinds an Event needs.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | wire_type);
}
template <typename T>
void put_fixed(std::string& out, int field, T value) {  // double: wire type 1, float: 5
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as the wire format
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3,
// summary = 5. Summary: value = 1; Summary.Value: tag = 1, simple_value = 2 (float).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_fixed(e, 1, wall_time);
  put_key(e, 2, 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

std::string csv_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_fixed(v, 2, value);
    put_bytes(summary, 1, v);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

// A file written by appending whole pieces, each reaching the file before the call
// returns (a reader following the run sees only whole records).
class RunLog::Appender {
 public:
  explicit Appender(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(Code::kIo, "cannot open '", path_, "' for writing: ", std::strerror(errno));
  }
  ~Appender() {
    if (fd_ >= 0) ::close(fd_);
  }
  void append(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(Code::kIo, "cannot write to '", path_, "': ", std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  void append(const std::string& s) { append(s.data(), s.size()); }
  void record(const std::string& event) {
    append(data::frame_record({reinterpret_cast<const uint8_t*>(event.data()), event.size()}));
  }
  void append(const std::vector<uint8_t>& bytes) { append(bytes.data(), bytes.size()); }

 private:
  std::string path_;
  int fd_ = -1;
};

RunLog::RunLog(const std::string& tensorboard_dir, const std::string& csv_path) {
  if (!tensorboard_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(tensorboard_dir, ec);
    if (ec) fail(Code::kIo, "tensorboard_dir: cannot create '", tensorboard_dir, "': ", ec.message());
    const double now = now_s();
    event_path_ = (std::filesystem::path(tensorboard_dir) /
                   cat("events.out.tfevents.", static_cast<int64_t>(now), ".", host_name(), ".", ::getpid()))
                      .string();
    events_ = std::make_unique<Appender>(event_path_);
    events_->record(encode_file_version_event(now));
  }
  if (!csv_path.empty()) {
    csv_ = std::make_unique<Appender>(csv_path);
    csv_->append(std::string("step,epoch,loss,lr,step_time_s,data_wait_s,comm_exposed_s,images_per_sec\n"));
  }
}

RunLog::~RunLog() = default;

void RunLog::step(const StepRecord& r) {
  const double rate = r.step_s > 0 ? r.images / r.step_s : 0;
  const double wait = r.step_s > 0 ? r.data_wait_s / r.step_s : 0;
  if (events_)
    events_->record(encode_scalars_event(now_s(), r.step,
                                         {{"loss", static_cast<float>(r.loss)},
                                          {"learning_rate", static_cast<float>(r.lr)},
                                          {"images_per_sec", static_cast<float>(rate)},
                                          {"data_wait_fraction", static_cast<float>(wait)}}));
  if (csv_)
    csv_->append(cat(r.step, ",", csv_number(r.epoch), ",", csv_number(r.loss), ",", csv_number(r.lr), ",",
                     csv_number(r.step_s), ",", csv_number(r.data_wait_s), ",", csv_number(r.comm_exposed_s), ",",
                     csv_number(rate), "\n"));
}

void RunLog::evaluation(int64_t step, double top1, double top5, double loss) {
  if (events_)
    events_->record(encode_scalars_event(now_s(), step,
                                         {{"eval/top1", static_cast<float>(top1)},
                                          {"eval/top5", static_cast<float>(top5)},
                                          {"eval/loss", static_cast<float>(loss)}}));
}

std::unique_ptr<RunLog> open_run_log(const Config& config, int rank) {
  if (rank != 0) return nullptr;
  return std::make_unique<RunLog>(config.get_string("tensorboard_dir"), config.get_string("log_csv"));
}

}  // namespace cohort::train
