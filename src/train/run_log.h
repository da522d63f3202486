// A run's log in the files tools read: TensorBoard event files (tensorboard_dir) with
// scalars for the loss, learning rate, images/sec and data-wait fraction of every step
// and top-1/top-5 at each evaluation, and a per-step CSV (log_csv) with step, epoch,
// loss, lr, step time, data wait and exposed communication. Event files are TFRecord
// framing (masked CRC32C) around tensorflow.Event protocol buffers, as TensorBoard's
// readers expect; every record is written (and reaches the file) as it happens, so
// TensorBoard can follow a run live.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cohort {
class Config;
}

namespace cohort::train {

// One step as the trainer saw it.
struct StepRecord {
  int64_t step = 0;  // steps done, this one included
  double epoch = 0;  // epochs done (fractional)
  double loss = 0;
  double lr = 0;
  double step_s = 0;          // wall time of the step
  double data_wait_s = 0;     // waiting for the input pipeline
  double comm_exposed_s = 0;  // waiting for communication that backward did not hide
  double images = 0;          // images of the step on all ranks
};

class RunLog {
 public:
  // Opens the files that are named (an empty name: none); the event file is
  // `events.out.tfevents.<seconds>.<host>.<pid>` in tensorboard_dir, created when
  // missing. Throws kIo naming the path and the reason.
  RunLog(const std::string& tensorboard_dir, const std::string& csv_path);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // Throw kIo naming the file when a write fails.
  void step(const StepRecord& r);
  void evaluation(int64_t step, double top1, double top5, double loss);

  const std::string& event_file() const { return event_path_; }

 private:
  class Appender;
  std::unique_ptr<Appender> events_, csv_;
  std::string event_path_;
};

// The log of a run on `rank`, in the files the options tensorboard_dir and log_csv of
// `config` name. Only rank 0 writes: on every other rank, nullptr (a log that records
// nothing), and no file is touched.
std::unique_ptr<RunLog> open_run_log(const Config& config, int rank);

// The tensorflow.Event protocol buffers written, one record each (for tests).
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step,
                                 const std::vector<std::pair<std::string, float>>& scalars);

}  // namespace cohort::train
