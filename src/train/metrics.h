// Throughput and time-split metrics of a training run, computed as tf_cnn_benchmarks
// reports them: per-step global images/sec with warm-up steps excluded; the mean is
// total images / total time (= batch / mean step time), the uncertainty is the
// population standard deviation of the per-step rates / √n, and the jitter is
// 1.4826 × median(|x − median(x)|) over the per-step rates.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace cohort {

struct RateSummary {
  int64_t count = 0;  // steps measured
  double median = 0;
  double mean = 0;
  double std_error = 0;
  double jitter = 0;
};

// Median of the values (the mean of the two middle ones for an even count); 0 if empty.
double median_of(std::vector<double> values);

// From the global images and the seconds of each measured step (equal lengths).
RateSummary summarize_rates(std::span<const double> images, std::span<const double> seconds);

// rate_n / rate_1, and speedup / ranks (the labs' scaling tables).
double speedup(double rate_n, double rate_1);
double efficiency(double rate_n, double rate_1, int ranks);

// Where step time went: waiting for the input pipeline, in communication that backward
// did not hide, and the rest (compute). Fractions of the measured steps' total time.
struct TimeFractions {
  double data_wait = 0;
  double comm_exposed = 0;
  double compute = 0;
};

// One training step as the trainer timed it on this rank.
struct StepTiming {
  double seconds = 0;         // wall time of the whole step
  double data_wait_s = 0;     // blocked on the pipeline
  double comm_exposed_s = 0;  // blocked on the collective engine after backward
  double images = 0;          // global images of the step (valid samples on all ranks)
};

// Accumulates step timings; the first `warmup_steps` are counted but not measured.
class StepMetrics {
 public:
  explicit StepMetrics(int64_t warmup_steps);

  void record(const StepTiming& step);

  int64_t steps() const { return steps_; }
  int64_t warmup_steps() const { return warmup_; }
  int64_t measured_steps() const { return static_cast<int64_t>(seconds_.size()); }
  RateSummary images_per_sec() const;
  TimeFractions time_fractions() const;
  double measured_seconds() const { return total_seconds_; }

 private:
  int64_t warmup_;
  int64_t steps_ = 0;
  std::vector<double> images_;
  std::vector<double> seconds_;
  double total_seconds_ = 0;
  double data_wait_ = 0;
  double comm_exposed_ = 0;
};

// Times the phases of one step on this rank: begin() before asking the pipeline for a
// batch, data_ready() once it is in hand, comm_wait_begin()/comm_wait_end() around each
// wait for collectives that backward did not hide, end(images) when the step is over.
class StepClock {
 public:
  using Now = std::function<double()>;  // seconds; defaults to std::chrono::steady_clock
  explicit StepClock(Now now = {});

  void begin();
  void data_ready();
  void comm_wait_begin();
  void comm_wait_end();
  // Throws kInvalidState when the calls came out of order.
  StepTiming end(double images);

 private:
  Now now_;
  bool in_step_ = false, waiting_data_ = false, in_comm_ = false;
  double start_ = 0, comm_start_ = 0;
  StepTiming t_;
};

// tf_cnn_benchmarks' lines: "images/sec: 1234.5 +/- 1.2 (jitter = 3.4)",
// "<step>\timages/sec: … (jitter = …)\t<loss %.3f>", and "total images/sec: 1234.57".
std::string format_rate(const RateSummary& r);
std::string format_step_line(int64_t step, const RateSummary& r, double loss);
std::string format_total_line(double images_per_sec);

}  // namespace cohort
