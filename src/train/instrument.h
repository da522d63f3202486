// What a program did, recorded for cohort-check (option `instrument_dir`): the
// parameters at the first training step and at the end (as checksums), the samples each
// training pipeline delivered in its first epoch, the learning rates, steps, losses and
// step times. Each process appends JSON lines to <instrument_dir>/rank-<R>.jsonl, R its
// rank in the launched job (MPI_COMM_WORLD), whatever its runtime spans, and keeps its
// progress (steps started and finished) in <instrument_dir>/rank-<R>.progress.json,
// rewritten in place at the start and the end of every step, so that a rank that hangs
// or is killed still says how far it got. When the option is empty nothing is recorded
// or computed. Recording never fails a program: a record that cannot be written is
// logged and dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/pipeline.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"

namespace cohort::instrument {

// One small JSON record rewritten in place (one pwrite at offset 0), so that its last
// state survives the process being killed. Opened on the first write.
class ProgressFile {
 public:
  explicit ProgressFile(std::string path) : path_(std::move(path)) {}
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;

  void write(const std::string& line);

 private:
  std::string path_;
  int fd_ = -1;
  bool failed_ = false;
  size_t size_ = 0;
};

// The seed a model initialises from: `seed`, plus 7919 × the job rank while recording,
// so that ranks start from different parameters, as independent programs would, and
// only a broadcast makes them equal.
uint64_t init_seed(const Config& config, uint64_t seed);

// The samples (source indices) a pipeline delivers in its first epoch. Written once the
// first epoch is delivered, and again when the pipeline is destroyed.
class PipelineTrace {
 public:
  // nullptr unless `instrument_dir` is set in `config`.
  static std::unique_ptr<PipelineTrace> make(const Config& config, const data::PipelineOptions& options,
                                             int64_t dataset_size);
  PipelineTrace(std::string file, const data::PipelineOptions& options, int64_t dataset_size);
  ~PipelineTrace();
  PipelineTrace(const PipelineTrace&) = delete;
  PipelineTrace& operator=(const PipelineTrace&) = delete;

  // One delivered batch: its first `valid` samples are real.
  void batch(int64_t epoch, int64_t step, int64_t valid);

 private:
  void write();

  std::string file_;
  data::PipelineOptions options_;
  int64_t dataset_size_;
  data::Sampler sampler_;
  std::vector<uint8_t> seen_;  // bitmap over the dataset: delivered in epoch 0
  std::vector<int64_t> indices_;
  int64_t first_epoch_samples_ = 0, repeated_ = 0, batches_ = 0, valid_ = 0, last_epoch_ = -1;
  int64_t first_epoch_batches_ = 0;
};

// An optimizer's run. The first line is written at the first step, the last when the
// optimizer is destroyed; the progress file at the start and the end of every step (of
// the optimizer that stepped last, should a process have several).
class OptimizerTrace {
 public:
  struct Setup {
    std::vector<Tensor> params;  // shares the parameters' storage (outlives the model)
    int rank = 0, size = 1, compute_threads = 1, thread_budget = 1;
    std::string device;
    std::string variable_update;  // replicated averages gradients; independent does not
    double base_lr = 0;
  };
  // nullptr unless `instrument_dir` is set in `config` (the optimizer's options).
  static std::unique_ptr<OptimizerTrace> make(const Config& config, const Runtime& runtime, std::vector<Tensor> params);
  OptimizerTrace(std::string file, Setup setup);
  ~OptimizerTrace();
  OptimizerTrace(const OptimizerTrace&) = delete;
  OptimizerTrace& operator=(const OptimizerTrace&) = delete;

  // Before the first update of a step (the parameters it starts from) and after it. A
  // step that throws gets no after_step(): it counts as started, not finished.
  void before_step(double lr);
  void after_step(double loss, int64_t valid, double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  void write();
  void write_progress(bool in_step);

  std::string file_;
  Setup setup_;
  int64_t started_ = 0, steps_ = 0, images_ = 0, measured_images_ = 0;
  double first_lr_ = 0, max_lr_ = 0, last_lr_ = 0, last_loss_ = 0, measured_s_ = 0;
  // From one step's start to the next one's, after the unmeasured steps: what a step
  // costs the program, its input and its own work between steps included; in wall time,
  // and in CPU time of the thread that trains (which other processes on the machine do
  // not lengthen, nor waits for the other ranks).
  std::vector<double> intervals_, interval_cpu_;
  Clock::time_point first_start_, last_start_, last_end_;
  double last_start_cpu_ = 0;
  ProgressFile progress_;
};

}  // namespace cohort::instrument
