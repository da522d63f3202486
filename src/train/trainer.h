// The training step as an object: a model's distributed optimizer (update rule,
// learning-rate schedule, gradient exchange over the runtime's engine), one training
// step (forward and backward in the compute bracket, each gradient handed to the
// engine from the gradient-ready hook as soon as backward finishes it, the update),
// and checkpoints that every rank agrees on. The C API's optimizer handle is one;
// any other binding reuses it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "optim/distributed_optimizer.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/engine_collectives.h"
#include "train/exchange.h"
#include "train/instrument.h"
#include "train/model.h"

namespace cohort::train {

// What one training step did.
struct StepStats {
  double loss = 0;     // mean loss over this rank's valid samples (0 without any)
  double lr = 0;       // learning rate of the update (of the next one on an accumulation pass)
  int64_t images = 0;  // rows of the batch, padding included
  int64_t valid = 0;   // valid rows of this rank
  int64_t step = 0;    // optimizer updates taken after the call
  bool updated = false;
  double compute_s = 0, comm_wait_s = 0, update_s = 0, total_s = 0;
};

// Where a run stands, as a checkpoint stores it.
struct RunPosition {
  int64_t epoch = 0;  // completed epochs
  int64_t step = 0;   // optimizer updates taken
  int64_t pipeline_epoch = 0, pipeline_step = 0;
  int64_t saved_ranks = 0;  // loading: ranks of the run that saved it (0: not recorded)
};

// How many samples a run's steps take: batch_size per rank and pass, ranks, passes per
// optimizer step.
struct StepShape {
  int64_t batch_size = 0, ranks = 0, passes = 1;
  int64_t pipeline_batch() const { return batch_size * ranks; }
  int64_t update_batch() const { return batch_size * ranks * passes; }
};

// A position saved by a run of shape `saved`, as the same number of samples in a run of
// shape `now`: the optimizer's step count and the pipeline's step within its epoch are
// scaled by the ratio of their global batches, rounding down (the partial batch is seen
// again). `pipeline_steps_per_epoch` (0: unknown) moves a position at or past the end of
// an epoch to the start of the next.
RunPosition rescale_position(const RunPosition& position, const StepShape& saved, const StepShape& now,
                             int64_t pipeline_steps_per_epoch);

class Trainer {
 public:
  // Options from `config`: the optimizer, schedule and exchange keys, variable_update
  // and the ps_* keys (variable_update.h), precision, batch_size (with the workers for
  // the global batch), seed and keep_checkpoints. Materializes the model and installs
  // its gradient-ready hook. Not collective, but every rank creates the trainers of a
  // runtime in the same order: their collectives are named by creation order ("grad/…",
  // "grad1/…", …). A parameter server starts serving its workers at once.
  Trainer(std::shared_ptr<Model> model, const Config& config);
  // On a parameter server: waits until every worker's trainer is gone.
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  Model& model() const { return *model_; }

  // The run's length, for schedules that need it (0: unknown).
  void set_run_length(int64_t steps_per_epoch, int64_t total_steps);
  // The learning rate the next update will use.
  double next_lr();
  int64_t steps() const { return optimizer_->steps(); }
  const Optimizer& optimizer() const { return *optimizer_; }

  // Collective: parameters, batch-norm statistics and optimizer state become root's.
  void broadcast(int root);
  // Collective: throws kMismatch naming the first parameter that differs from rank 0's.
  void check_consistency();

  // One step over the first `valid` rows of `images` [N, ...] and `labels` [N];
  // collective on update passes (replicated; in the parameter-server modes it involves
  // this worker and the servers only). A rank without valid rows takes part with a zero
  // gradient. On a dedicated parameter server it does nothing (and reads no batch).
  StepStats train_step(const Tensor& images, const Tensor& labels, int64_t valid);
  // A step without a batch: what a dedicated parameter server, which reads no data,
  // takes. Throws kInvalidArgument on a rank that computes.
  StepStats train_step_without_batch();
  // What this rank does in its variable_update mode, and its server's counts.
  ExchangeInfo exchange_info() const { return exchange_->info(); }

  // Collective: rank 0 writes a checkpoint into `dir` (created when missing), then
  // every rank learns whether it worked; a failure throws the same error on every rank.
  // `position.step` is ignored: the optimizer's count is saved.
  void save_checkpoint(const std::string& dir, const RunPosition& position);
  // Collective: rank 0 restores the latest checkpoint of `dir`, whose values then reach
  // every rank. nullopt when `dir` has none (nothing changes). A failure throws the
  // same error on every rank. A checkpoint saved at another global batch (another rank
  // count) resumes at the same sample: rescale_position() converts the step count, which
  // the learning-rate schedule follows, and the pipeline position.
  std::optional<RunPosition> load_checkpoint(const std::string& dir);

  // The loss scale the next backward pass uses (dynamic loss scaling: precision=f16 or
  // loss_scaling=dynamic); 0 when the run does not scale its loss.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 0.0; }

 private:
  void check_open() const;
  const LrSchedule& lr_schedule();
  // Parameters and batch-norm statistics, as checkpoints name them.
  std::vector<NamedTensor> model_tensors() const;
  struct SavedHead;
  void restore_on_root(const std::string& dir, SavedHead& head);
  StepShape step_shape() const;

  std::shared_ptr<Model> model_;  // kept alive: the trainer writes into it
  Config config_;
  int64_t global_batch_ = 0;
  int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<EngineCollectives> comm_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<LossScaler> scaler_;  // precision=f16 only
  std::optional<LrSchedule> schedule_;
  uint64_t hook_token_ = 0;
  std::unique_ptr<instrument::OptimizerTrace> trace_;  // instrument_dir only
};

}  // namespace cohort::train
