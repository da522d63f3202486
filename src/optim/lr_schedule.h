// Learning-rate schedules: constant, step, polynomial and cosine decay, behind a linear
// warm-up, with the linear scaling rule (Goyal et al. 2017) as an option.
//
// target = lr × k, where k = global_batch / base_batch_size with lr_scaling=linear and
// 1 otherwise. During warm-up (W steps: lr_warmup_steps, or warmup_epochs × steps per
// epoch) lr(s) = start + (target − start)·s/W with start = target/k = lr: the gradual
// warm-up of Goyal et al. from the unscaled to the scaled lr, and exactly Horovod's
// warm-up callback, target/k × (1 + e·(k − 1)/W_e) at the fractional epoch e, for k > 1.
// With k <= 1 (no scaling, or a global batch no larger than base_batch_size) there is no
// smaller lr to start from, and warm-up starts from 0 instead; Horovod's callback at
// size 1 would keep the lr constant, cohort honours the warm-up that was asked for.
// After warm-up the decay applies to target: step multiplies by lr_decay_factor at each
// epoch in lr_decay_epochs; poly and cosine go from target to lr_end over the steps
// between the end of warm-up and total_steps (and stay at lr_end after).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cohort {

class Config;

enum class LrScheduleKind { kConstant, kStep, kPoly, kCosine };

// "constant|step|poly|cosine" (also "polynomial"); throws kInvalidArgument listing them.
LrScheduleKind parse_lr_schedule(std::string_view name);

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double base_lr = 0.1;
  bool linear_scaling = false;
  int64_t base_batch_size = 256;
  int64_t global_batch = 0;  // needed with linear_scaling
  double warmup_epochs = 0;
  int64_t warmup_steps = 0;     // > 0 overrides warmup_epochs
  int64_t steps_per_epoch = 0;  // needed for epoch-based warm-up and the step schedule
  int64_t total_steps = 0;      // needed for poly and cosine
  std::vector<double> decay_epochs = {30, 60, 80};
  double decay_factor = 0.1;
  double poly_power = 2;
  double end_lr = 0;

  // From the keys lr, lr_schedule, lr_scaling, base_batch_size, warmup_epochs,
  // lr_warmup_steps, lr_decay_epochs, lr_decay_factor, lr_poly_power, lr_end; the run's
  // geometry comes from the caller.
  static LrScheduleOptions from_config(const Config& config, int64_t global_batch, int64_t steps_per_epoch,
                                       int64_t total_steps);
};

class LrSchedule {
 public:
  // Validates the options; errors name the option key that is missing or wrong.
  explicit LrSchedule(LrScheduleOptions options);

  // The learning rate of step `step` (0-based count of optimizer steps taken before it).
  double lr_at(int64_t step) const;

  double scale_factor() const { return k_; }
  double target_lr() const { return options_.base_lr * k_; }
  double warmup_steps() const { return warmup_; }  // may be fractional (epochs × steps/epoch)
  const LrScheduleOptions& options() const { return options_; }

 private:
  double decayed(int64_t step) const;

  LrScheduleOptions options_;
  double k_ = 1;
  double warmup_ = 0;
};

// "30,60,80" → {30, 60, 80}; must be increasing and >= 0. Throws kInvalidArgument
// naming `key` and the bad item.
std::vector<double> parse_epoch_list(std::string_view text, std::string_view key);

}  // namespace cohort
