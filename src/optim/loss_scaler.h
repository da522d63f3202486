// Dynamic loss scaling for reduced-precision training (f16): the loss is multiplied by
// scale() before backward so small gradients survive in f16; unscale() divides the
// gradients back and reports an overflow (inf/NaN), in which case the step is skipped
// and the scale backs off; after growth_interval good steps in a row it grows again.
// Use it on the averaged gradients (after the allreduce), so every rank decides alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optim/named_tensor.h"
#include "tensor/device.h"

namespace cohort {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool dynamic = true;  // false: a fixed scale, overflows still reported
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }

  // Divides every gradient (f32, contiguous, all on the device of `stream`) by scale()
  // and counts the results that are inf or NaN (kernels::reduce_into); returns false
  // when there is any: the caller skips the optimizer step. With a device stream it
  // waits for the count (one copy to the host per call).
  bool unscale(std::span<const ParamGrad> params, const Stream& stream = {}) const;

  // Records a step's outcome: an overflow multiplies the scale by backoff_factor and
  // resets the count of good steps; growth_interval good steps multiply it by
  // growth_factor.
  void update(bool finite);

  int64_t good_steps() const { return good_steps_; }
  int64_t skipped_steps() const { return skipped_; }

  // "loss_scale/scale" (f64[1]) and "loss_scale/good_steps" (i64[1]) for checkpoints.
  std::vector<NamedTensor> export_state() const;
  void import_state(std::span<const NamedTensor> state);
  // The same state as numbers (a checkpoint's metadata); throws kInvalidArgument for a
  // scale that is not finite and > 0 or a negative count.
  void set_state(double scale, int64_t good_steps);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace cohort
