// How long a run is: steps per epoch, total steps and the steps excluded from the
// images/sec statistics, from num_iter / num_epochs / num_warmup_batches, the size of
// an epoch and the global batch. As in Horovod's recipe, an epoch is split across the
// ranks (each step consumes a global batch); the last step of an epoch is padded
// rather than dropped, so steps per epoch = ⌈images / global batch⌉.
#pragma once

#include <cstdint>

namespace cohort {

class Config;

struct RunPlan {
  int64_t steps_per_epoch = 0;  // 0 when the epoch size is unknown (synthetic data)
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;  // excluded from images/sec; at least one step is measured

  // Epochs done after `step` steps (fractional); 0 when steps_per_epoch is unknown.
  double epochs_at(int64_t step) const;
};

// images_per_epoch: 0 when unknown. Throws kInvalidArgument naming the keys when the
// run's length cannot be known (num_epochs with an unknown epoch size).
RunPlan make_run_plan(int64_t num_iter, double num_epochs, int64_t num_warmup_batches, int64_t images_per_epoch,
                      int64_t global_batch);
RunPlan make_run_plan(const Config& config, int64_t images_per_epoch, int64_t global_batch);

}  // namespace cohort
