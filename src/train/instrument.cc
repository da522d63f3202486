#include "train/instrument.h"

#include <cstdlib>
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

}  // namespace

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
  setup.base_lr = config.get_float("lr");
  return std::make_unique<OptimizerTrace>(std::move(file), std::move(setup));
}

OptimizerTrace::OptimizerTrace(std::string file, Setup setup) : file_(std::move(file)), setup_(std::move(setup)) {}

void OptimizerTrace::before_step(double lr) {
  if (steps_ == 0) {
    first_lr_ = lr;
    JsonObject o = header("first_step");
    o.add_int("runtime_rank", setup_.rank)
        .add_int("runtime_size", setup_.size)
        .add_string("device", setup_.device)
        .add_int("compute_threads", setup_.compute_threads)
        .add_int("thread_budget", setup_.thread_budget)
        .add_string("params_crc32c", params_checksum(setup_.params))
        .add_number("lr", lr)
        .add_number("base_lr", setup_.base_lr);
    append(file_, std::move(o));
  }
  last_lr_ = lr;
  if (lr > max_lr_) max_lr_ = lr;
}

void OptimizerTrace::after_step(double loss, int64_t valid, double seconds) {
  ++steps_;
  images_ += valid;
  last_loss_ = loss;
  if (steps_ > kUnmeasuredSteps) {
    measured_images_ += valid;
    measured_s_ += seconds;
  }
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
      .add_int("images", images_)
      .add_string("params_crc32c", params_checksum(setup_.params))
      .add_number("first_lr", first_lr_)
      .add_number("max_lr", max_lr_)
      .add_number("last_lr", last_lr_)
      .add_number("base_lr", setup_.base_lr)
      .add_number("last_loss", last_loss_)
      .add_int("measured_images", measured_images_)
      .add_number("measured_s", measured_s_);
  append(file_, std::move(o));
}

}  // namespace cohort::instrument
