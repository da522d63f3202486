#include "train/run_plan.h"

#include <algorithm>
#include <cmath>

#include "core/config.h"
#include "core/status.h"

namespace cohort {

double RunPlan::epochs_at(int64_t step) const {
  return steps_per_epoch > 0 ? static_cast<double>(step) / static_cast<double>(steps_per_epoch) : 0.0;
}

RunPlan make_run_plan(int64_t num_iter, double num_epochs, int64_t num_warmup_batches, int64_t images_per_epoch,
                      int64_t global_batch) {
  require(global_batch > 0, "run length: the global batch must be > 0, got ", global_batch);
  require(num_iter >= 0 && num_epochs >= 0 && num_warmup_batches >= 0 && images_per_epoch >= 0,
          "run length: num_iter, num_epochs, num_warmup_batches and the epoch size must be >= 0");
  RunPlan p;
  if (images_per_epoch > 0) p.steps_per_epoch = (images_per_epoch + global_batch - 1) / global_batch;
  if (num_iter > 0) {
    p.total_steps = num_iter;
  } else {
    require(p.steps_per_epoch > 0, "num_epochs=", num_epochs,
            " needs the number of images in an epoch, which this data source does not know (synthetic data?); "
            "set num_iter instead");
    require(num_epochs > 0, "num_iter is 0 and num_epochs is 0: nothing to run; set one of them");
    p.total_steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(num_epochs * p.steps_per_epoch - 1e-9)));
  }
  p.warmup_steps = std::min(num_warmup_batches, p.total_steps - 1);
  return p;
}

RunPlan make_run_plan(const Config& config, int64_t images_per_epoch, int64_t global_batch) {
  return make_run_plan(config.get_int("num_iter"), config.get_float("num_epochs"), config.get_int("num_warmup_batches"),
                       images_per_epoch, global_batch);
}

}  // namespace cohort
