#include "train/instrument.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/crc32c.h"
#include "core/logging.h"
#include "core/strings.h"
#include "core/json.h"

namespace cohort::instrument {
namespace {

// Steps at the start of a run that throughput leaves out (start-up, first allocations).
constexpr int64_t kUnmeasuredSteps = 5;
// The width a progress record is padded to (it is about 190 characters).
constexpr size_t kProgressWidth = 255;

// This process's rank in the launched job, from the launcher's environment: no MPI call
// (only the engine thread calls MPI), and right whatever the runtime spans.
int job_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

std::string trace_file(const Config& config) {
  const std::string dir = config.get_string("instrument_dir");
  if (dir.empty()) return "";
  return cat(dir, "/rank-", job_rank(), ".jsonl");
}

void append(const std::string& file, JsonObject line) {
  try {
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    std::ofstream out(file, std::ios::app);
    out << line.str() << '\n';
    if (!out.flush()) COHORT_LOG_WARN("instrument_dir: cannot write '", file, "'");
  } catch (const std::exception& e) {
    COHORT_LOG_WARN("instrument_dir: cannot write '", file, "': ", e.what());
  }
}

JsonObject header(const char* event) {
  JsonObject o;
  o.add_string("event", event).add_int("job_rank", job_rank());
  return o;
}

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 15];
  return s;
}

std::string params_checksum(const std::vector<Tensor>& params) {
  uint32_t crc = 0;
  for (const Tensor& t : params) crc = crc32c_extend(crc, t.data(), t.nbytes());
  return hex32(crc);
}

std::string bitmap_hex(const std::vector<uint8_t>& bits) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bits.size() * 2);
  for (uint8_t b : bits) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// The progress file beside a record file: rank-R.jsonl → rank-R.progress.json.
std::string progress_path(const std::string& file) {
  const std::string suffix = ".jsonl";
  const std::string stem = file.ends_with(suffix) ? file.substr(0, file.size() - suffix.size()) : file;
  return stem + ".progress.json";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

// CPU time of the calling thread.
double thread_cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double unix_time_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

ProgressFile::~ProgressFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressFile::write(const std::string& line) {
  if (failed_) return;
  if (fd_ < 0) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      failed_ = true;
      COHORT_LOG_WARN("instrument_dir: cannot write '", path_, "': ", std::strerror(errno));
      return;
    }
  }
  // One write of the whole record: a reader (or a kill) sees the old one or the new one.
  const auto written = ::pwrite(fd_, line.data(), line.size(), 0);
  if (written != static_cast<ssize_t>(line.size()) ||
      (line.size() < size_ && ::ftruncate(fd_, static_cast<off_t>(line.size())) != 0)) {
    failed_ = true;
    COHORT_LOG_WARN("instrument_dir: cannot write '", path_, "': ", std::strerror(errno));
    return;
  }
  size_ = line.size();
}

uint64_t init_seed(const Config& config, uint64_t seed) {
  if (config.get_string("instrument_dir").empty()) return seed;
  return seed + 7919u * static_cast<uint64_t>(job_rank());
}

std::unique_ptr<PipelineTrace> PipelineTrace::make(const Config& config, const data::PipelineOptions& options,
                                                   int64_t dataset_size) {
  std::string file = trace_file(config);
  if (file.empty()) return nullptr;
  return std::make_unique<PipelineTrace>(std::move(file), options, dataset_size);
}

PipelineTrace::PipelineTrace(std::string file, const data::PipelineOptions& options, int64_t dataset_size)
    : file_(std::move(file)),
      options_(options),
      dataset_size_(dataset_size),
      // The pipeline's own sampler, rebuilt: it says which samples batch (epoch, step) holds.
      sampler_(data::ShardOptions{dataset_size, options.rank, options.size, options.batch_size, options.augment.seed,
                                  options.shuffle, options.drop_remainder}),
      seen_(static_cast<size_t>((dataset_size + 7) / 8), 0) {}

void PipelineTrace::batch(int64_t epoch, int64_t step, int64_t valid) {
  ++batches_;
  valid_ += valid;
  last_epoch_ = epoch;
  if (epoch != 0) return;
  ++first_epoch_batches_;
  sampler_.batch(epoch, step, indices_);
  int64_t taken = 0;
  for (int64_t index : indices_) {
    if (taken == valid) break;
    if (index < 0) continue;
    ++taken;
    uint8_t& byte = seen_[static_cast<size_t>(index / 8)];
    const auto bit = static_cast<uint8_t>(1u << (index % 8));
    if (byte & bit) ++repeated_;
    byte |= bit;
    ++first_epoch_samples_;
  }
  // The first epoch is complete: its record stands even if the process never ends well.
  if (first_epoch_batches_ == sampler_.steps_per_epoch()) write();
}

PipelineTrace::~PipelineTrace() {
  try {
    write();
  } catch (...) {
    // A record that cannot be written is dropped (see the header).
  }
}

void PipelineTrace::write() {
  JsonObject o = header("pipeline");
  o.add_string("split", options_.source.split)
      .add_int("runtime_rank", options_.rank)
      .add_int("runtime_size", options_.size)
      .add_int("dataset_size", dataset_size_)
      .add_int("batch_size", options_.batch_size)
      .add_int("steps_per_epoch", sampler_.steps_per_epoch())
      .add_int("batches", batches_)
      .add_int("valid", valid_)
      .add_int("last_epoch", last_epoch_)
      .add_int("first_epoch_samples", first_epoch_samples_)
      .add_int("first_epoch_repeated", repeated_)
      .add_string("first_epoch_bitmap", bitmap_hex(seen_));
  append(file_, std::move(o));
}

std::unique_ptr<OptimizerTrace> OptimizerTrace::make(const Config& config, const Runtime& runtime,
                                                     std::vector<Tensor> params) {
  std::string file = trace_file(config);
  if (file.empty()) return nullptr;
  Setup setup;
  setup.params = std::move(params);
  setup.rank = runtime.rank();
  setup.size = runtime.size();
  setup.thread_budget = runtime.thread_budget();
  setup.compute_threads = static_cast<int>(config.get_int("compute_threads"));
  if (setup.compute_threads <= 0) setup.compute_threads = setup.thread_budget;
  setup.device = runtime.device().to_string();
  setup.variable_update = config.get_string("variable_update");
  setup.base_lr = config.get_float("lr");
  return std::make_unique<OptimizerTrace>(std::move(file), std::move(setup));
}

OptimizerTrace::OptimizerTrace(std::string file, Setup setup)
    : file_(std::move(file)), setup_(std::move(setup)), progress_(progress_path(file_)) {}

void OptimizerTrace::before_step(double lr) {
  const Clock::time_point now = Clock::now();
  const double cpu = thread_cpu_s();
  if (started_ == 0) first_start_ = now;
  if (started_ > kUnmeasuredSteps) {
    intervals_.push_back(std::chrono::duration<double>(now - last_start_).count());
    interval_cpu_.push_back(cpu - last_start_cpu_);
  }
  last_start_ = now;
  last_start_cpu_ = cpu;
  ++started_;
  if (started_ == 1) {
    first_lr_ = lr;
    JsonObject o = header("first_step");
    o.add_int("runtime_rank", setup_.rank)
        .add_int("runtime_size", setup_.size)
        .add_string("device", setup_.device)
        .add_string("variable_update", setup_.variable_update)
        .add_int("compute_threads", setup_.compute_threads)
        .add_int("thread_budget", setup_.thread_budget)
        .add_string("params_crc32c", params_checksum(setup_.params))
        .add_number("lr", lr)
        .add_number("base_lr", setup_.base_lr);
    append(file_, std::move(o));
  }
  last_lr_ = lr;
  if (lr > max_lr_) max_lr_ = lr;
  write_progress(true);
}

void OptimizerTrace::after_step(double loss, int64_t valid, double seconds) {
  last_end_ = Clock::now();
  ++steps_;
  images_ += valid;
  last_loss_ = loss;
  if (steps_ > kUnmeasuredSteps) {
    measured_images_ += valid;
    measured_s_ += seconds;
  }
  write_progress(false);
}

void OptimizerTrace::write_progress(bool in_step) {
  JsonObject o = header("progress");
  o.add_int("runtime_rank", setup_.rank)
      .add_int("runtime_size", setup_.size)
      .add_int("steps_started", started_)
      .add_int("steps", steps_)
      .add_bool("in_step", in_step)
      .add_number("lr", last_lr_)
      .add_number("time", unix_time_s());
  // Padded to one width, so that each rewrite covers the previous record exactly.
  std::string line = o.str();
  if (line.size() < kProgressWidth) line.append(kProgressWidth - line.size(), ' ');
  progress_.write(line + "\n");
}

OptimizerTrace::~OptimizerTrace() {
  try {
    write();
  } catch (...) {
    // A record that cannot be written is dropped (see the header).
  }
}

void OptimizerTrace::write() {
  JsonObject o = header("end");
  o.add_int("runtime_rank", setup_.rank)
      .add_int("runtime_size", setup_.size)
      .add_int("steps", steps_)
      .add_int("steps_started", started_)
      .add_int("images", images_)
      .add_string("params_crc32c", params_checksum(setup_.params))
      .add_number("first_lr", first_lr_)
      .add_number("max_lr", max_lr_)
      .add_number("last_lr", last_lr_)
      .add_number("base_lr", setup_.base_lr)
      .add_number("last_loss", last_loss_)
      .add_int("measured_images", measured_images_)
      .add_number("measured_s", measured_s_)
      .add_number("step_interval_median_s", median(intervals_))
      .add_number("step_cpu_median_s", median(interval_cpu_))
      .add_int("step_intervals", static_cast<int64_t>(intervals_.size()))
      .add_number("train_s", steps_ > 0 ? std::chrono::duration<double>(last_end_ - first_start_).count() : 0.0);
  append(file_, std::move(o));
}

}  // namespace cohort::instrument
