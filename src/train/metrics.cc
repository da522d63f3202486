#include "train/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/status.h"

namespace cohort {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

RateSummary summarize_rates(std::span<const double> images, std::span<const double> seconds) {
  require(images.size() == seconds.size(), "summarize_rates: ", images.size(), " image counts for ", seconds.size(),
          " step times");
  RateSummary r;
  r.count = static_cast<int64_t>(seconds.size());
  if (seconds.empty()) return r;
  std::vector<double> rates(seconds.size());
  double total_images = 0, total_seconds = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    require(seconds[i] > 0 && std::isfinite(seconds[i]), "summarize_rates: step ", i, " took ", seconds[i],
            " s (must be > 0)");
    rates[i] = images[i] / seconds[i];
    total_images += images[i];
    total_seconds += seconds[i];
  }
  r.mean = total_images / total_seconds;
  r.median = median_of(rates);
  double avg = 0;
  for (double x : rates) avg += x;
  avg /= static_cast<double>(rates.size());
  double var = 0;
  for (double x : rates) var += (x - avg) * (x - avg);
  var /= static_cast<double>(rates.size());  // numpy's np.std: ddof = 0
  r.std_error = std::sqrt(var) / std::sqrt(static_cast<double>(rates.size()));
  std::vector<double> dev(rates.size());
  for (size_t i = 0; i < rates.size(); ++i) dev[i] = std::abs(rates[i] - r.median);
  r.jitter = 1.4826 * median_of(std::move(dev));
  return r;
}

double speedup(double rate_n, double rate_1) { return rate_1 > 0 ? rate_n / rate_1 : 0.0; }

double efficiency(double rate_n, double rate_1, int ranks) { return ranks > 0 ? speedup(rate_n, rate_1) / ranks : 0.0; }

StepMetrics::StepMetrics(int64_t warmup_steps) : warmup_(warmup_steps) {
  require(warmup_steps >= 0, "metrics: warm-up steps must be >= 0, got ", warmup_steps);
}

void StepMetrics::record(const StepTiming& s) {
  require(s.seconds > 0 && std::isfinite(s.seconds), "metrics: step time must be > 0, got ", s.seconds);
  require(s.data_wait_s >= 0 && s.comm_exposed_s >= 0 && s.images >= 0,
          "metrics: negative data wait, communication time or image count");
  ++steps_;
  if (steps_ <= warmup_) return;
  images_.push_back(s.images);
  seconds_.push_back(s.seconds);
  total_seconds_ += s.seconds;
  data_wait_ += std::min(s.data_wait_s, s.seconds);
  comm_exposed_ += std::min(s.comm_exposed_s, s.seconds);
}

RateSummary StepMetrics::images_per_sec() const { return summarize_rates(images_, seconds_); }

TimeFractions StepMetrics::time_fractions() const {
  TimeFractions f;
  if (total_seconds_ <= 0) return f;
  f.data_wait = data_wait_ / total_seconds_;
  f.comm_exposed = comm_exposed_ / total_seconds_;
  f.compute = std::max(0.0, 1.0 - f.data_wait - f.comm_exposed);
  return f;
}

StepClock::StepClock(Now now) : now_(std::move(now)) {
  if (!now_)
    now_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
}

void StepClock::begin() {
  if (in_step_) fail(Code::kInvalidState, "step clock: begin() twice without end()");
  in_step_ = waiting_data_ = true;
  in_comm_ = false;
  t_ = {};
  start_ = now_();
}

void StepClock::data_ready() {
  if (!in_step_ || !waiting_data_) fail(Code::kInvalidState, "step clock: data_ready() outside a step or twice");
  waiting_data_ = false;
  t_.data_wait_s = now_() - start_;
}

void StepClock::comm_wait_begin() {
  if (!in_step_ || in_comm_) fail(Code::kInvalidState, "step clock: comm_wait_begin() outside a step or nested");
  in_comm_ = true;
  comm_start_ = now_();
}

void StepClock::comm_wait_end() {
  if (!in_comm_) fail(Code::kInvalidState, "step clock: comm_wait_end() without comm_wait_begin()");
  in_comm_ = false;
  t_.comm_exposed_s += now_() - comm_start_;
}

StepTiming StepClock::end(double images) {
  if (!in_step_ || in_comm_) fail(Code::kInvalidState, "step clock: end() outside a step or inside a comm wait");
  in_step_ = false;
  t_.seconds = now_() - start_;
  t_.images = images;
  return t_;
}

std::string format_rate(const RateSummary& r) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "images/sec: %.1f +/- %.1f (jitter = %.1f)", r.mean, r.std_error, r.jitter);
  return buf;
}

std::string format_step_line(int64_t step, const RateSummary& r, double loss) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "\t%.3f", loss);
  return std::to_string(step) + "\t" + format_rate(r) + buf;
}

std::string format_total_line(double images_per_sec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "total images/sec: %.2f", images_per_sec);
  return buf;
}

}  // namespace cohort
