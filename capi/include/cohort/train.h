/**
 * @file train.h
 * @brief Data-parallel training: the distributed optimizer, the training step,
 * checkpoints and the run metrics that cohort-train prints.
 *
 * A training program creates a model (model.h), an input pipeline for it
 * (cohort_pipeline_create_for_model()) and an optimizer over the model with
 * cohort_optimizer_create(); broadcasts rank 0's parameters with
 * cohort_optimizer_broadcast(); then calls cohort_optimizer_train_step() once per
 * batch. Inside a step each gradient goes to the collective engine as soon as
 * backward has produced it, so the allreduce overlaps the rest of backward; the update
 * waits for all of them and applies the averaged gradient on every rank.
 *
 * Collective calls (marked "Collective") must be made by every rank of the runtime in
 * the same order. Batch-norm running statistics are not averaged: each rank keeps the
 * statistics of its own batches (as Horovod does); checkpoints store rank 0's.
 */
#ifndef COHORT_TRAIN_H
#define COHORT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/common.h"
#include "cohort/config.h"
#include "cohort/model.h"
#include "cohort/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief An optimizer bound to one model: update rule, learning-rate schedule and
 * gradient exchange across the ranks of the model's runtime. */
typedef struct cohort_optimizer_t cohort_optimizer_t;

/**
 * @brief Creates the distributed optimizer of a model.
 *
 * How gradients become updates is the `variable_update` option, as tf_cnn_benchmarks
 * spells it: `replicated` (the default: allreduce during backward, every rank applies the
 * averaged update), `parameter_server` (workers push gradients to the ranks holding the
 * variables, `ps_ranks` of them, and pull the updated variables back: one averaged update
 * per step), `async_parameter_server` (each push is applied as it comes; a worker never
 * waits for the others, up to `ps_max_lead` steps apart) or `independent` (no exchange:
 * one model per rank). With `ps_dedicated` the server ranks (the last `ps_ranks`) compute
 * nothing: see cohort_optimizer_info(). A parameter server serves from a thread of its
 * own from creation on.
 * Options come from @p config (NULL: the runtime's configuration): `optimizer`
 * (sgd|momentum|nesterov|adam|adamw|lars), `lr`, `momentum`, `weight_decay`,
 * `adam_beta1`, `adam_beta2`, `adam_epsilon`, `lars_eta`, `lr_schedule`,
 * `warmup_epochs`, `lr_warmup_steps`, `lr_scaling` (linear: lr × global batch /
 * `base_batch_size`, global batch = `batch_size` × ranks × `backward_passes_per_step`),
 * `lr_decay_epochs`, `lr_decay_factor`, `lr_poly_power`, `lr_end`,
 * `backward_passes_per_step`, `compression` (none|f16 on the wire),
 * `gradient_predivide_factor`, `precision` (the CPU backend trains in f32 only).
 * Materializes the model's parameters and installs the model's gradient-ready
 * callback (replacing any set with cohort_model_set_grad_ready()).
 *
 * @param model  The optimizer keeps it alive (destroying the model first only releases
 *               the caller's reference). One optimizer per model.
 * @param config Borrowed for the call; NULL uses the runtime's configuration.
 * @param out    Receives the new optimizer, owned by the caller
 *               (cohort_optimizer_destroy()); NULL on failure.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT naming a bad option;
 *         ::COHORT_ERR_UNSUPPORTED when the precision cannot run on this device.
 * Not collective, but every rank must create the optimizers of a runtime in the same
 * order: their collectives are named by creation order ("grad/…", "grad1/…", …).
 * Not thread-safe with other calls on the same model.
 */
COHORT_API cohort_status_t cohort_optimizer_create(cohort_model_t* model, const cohort_config_t* config,
                                                   cohort_optimizer_t** out);

/**
 * @brief Destroys an optimizer, removes its gradient-ready callback from the model and
 * releases its reference to the model. Not collective, but in the parameter-server modes
 * a server rank's call returns only once every worker has destroyed its optimizer (or the
 * runtime has stopped): destroy optimizers before their runtime.
 * @param optimizer The optimizer; NULL is a no-op.
 */
COHORT_API void cohort_optimizer_destroy(cohort_optimizer_t* optimizer);

/**
 * @brief Tells the learning-rate schedule how long the run is.
 *
 * Needed by epoch-based warm-up (`warmup_epochs`) and the step schedule
 * (@p steps_per_epoch), and by poly and cosine decay (@p total_steps). Until it is
 * called both are 0 and a schedule that needs them fails at the first step.
 * @param optimizer       The optimizer.
 * @param steps_per_epoch Optimizer steps per epoch (0: unknown).
 * @param total_steps     Optimizer steps of the whole run (0: unknown).
 * @return ::COHORT_OK or ::COHORT_ERR_INVALID_ARGUMENT naming the option that needs a
 *         length. Not collective.
 */
COHORT_API cohort_status_t cohort_optimizer_set_run_length(cohort_optimizer_t* optimizer, int64_t steps_per_epoch,
                                                           int64_t total_steps);

/**
 * @brief The learning rate the next update will use, and the updates taken so far.
 * @param optimizer The optimizer.
 * @param lr        Receives the learning rate (may be NULL).
 * @param steps     Receives the number of optimizer updates taken (may be NULL).
 * @return ::COHORT_OK or an error. Not collective.
 */
COHORT_API cohort_status_t cohort_optimizer_state(const cohort_optimizer_t* optimizer, double* lr, int64_t* steps);

/**
 * @brief Collective: every rank's parameters, batch-norm statistics and optimizer state
 * (step count included) become @p root's. Call after creation and after restoring.
 * @param optimizer The optimizer.
 * @param root      The rank whose values win (usually 0).
 * @return ::COHORT_OK or an error (::COHORT_ERR_INVALID_ARGUMENT for a bad root).
 */
COHORT_API cohort_status_t cohort_optimizer_broadcast(cohort_optimizer_t* optimizer, int root);

/**
 * @brief Collective: compares a checksum of every parameter with rank 0's.
 * @param optimizer The optimizer.
 * @return ::COHORT_OK when all ranks agree; ::COHORT_ERR_MISMATCH naming the first
 *         parameter that differs (cohort_last_error()).
 */
COHORT_API cohort_status_t cohort_optimizer_check_consistency(cohort_optimizer_t* optimizer);

/** @brief What a rank does in its `variable_update` mode (filled by cohort_optimizer_info()). */
typedef struct cohort_optimizer_info_t {
  size_t struct_size;          /**< Set by the caller to sizeof(cohort_optimizer_info_t). */
  const char* variable_update; /**< "replicated", "parameter_server", "async_parameter_server" or
                                    "independent" (static text). */
  int worker;                  /**< 1 when this rank computes gradients (and reads data); 0 on a
                                    dedicated parameter server (`ps_dedicated`). */
  int server;                  /**< 1 when this rank holds variables (parameter-server modes). */
  int workers;                 /**< Ranks that compute. */
  int servers;                 /**< Ranks that hold variables (0 outside the parameter-server modes). */
  int64_t worker_index;        /**< This rank among the workers (its data shard); -1 on a dedicated server. */
  int64_t updates;             /**< Updates this rank's server has applied (0 when it holds none). */
  double staleness_sum;        /**< Over those updates: how many updates the variables had moved since the
                                    pushing worker pulled them (always 0 with `parameter_server`). */
  int64_t staleness_max;       /**< The most of them; at most (workers - 1) x (2 x `ps_max_lead` + 1). */
  int lockstep;                /**< 1 when the workers' steps move together (replicated, parameter_server):
                                    one update takes every worker's gradients, so one worker's step time is
                                    every worker's. 0 when each runs at its own pace (async_parameter_server,
                                    independent): images/sec is then each worker's own rate, summed. */
} cohort_optimizer_info_t;

/**
 * @brief What this rank does in the optimizer's `variable_update` mode, and what its
 * parameter server (if any) has done so far. Not collective: sum or take the maximum
 * over ranks (cohort_allreduce()) for the run's figures.
 * @param optimizer The optimizer.
 * @param info      Receives it; set its struct_size.
 * @return ::COHORT_OK or ::COHORT_ERR_INVALID_ARGUMENT.
 */
COHORT_API cohort_status_t cohort_optimizer_info(const cohort_optimizer_t* optimizer, cohort_optimizer_info_t* info);

/** @brief What one training step did (filled by cohort_optimizer_train_step()). */
typedef struct cohort_train_stats_t {
  size_t struct_size; /**< Set by the caller to sizeof(cohort_train_stats_t). */
  double loss;        /**< Mean loss over this rank's valid samples (0 when it had none). */
  double lr;          /**< Learning rate of the update (of the next one on an accumulation pass). */
  int64_t images;     /**< Samples in the batch, padding included. */
  int64_t valid;      /**< Valid samples of this rank in the batch. */
  int64_t step;       /**< Optimizer updates taken after this call. */
  int updated;        /**< 1 when the parameters were updated; 0 on an accumulation pass
                           (backward_passes_per_step > 1) or a step skipped for overflow. */
  double compute_s;   /**< Seconds in forward and backward (gradient exchange overlaps it). */
  double comm_wait_s; /**< Seconds waiting for gradient exchanges after backward (not hidden). */
  double update_s;    /**< Seconds applying the update. */
  double total_s;     /**< Seconds of the whole call. */
} cohort_train_stats_t;

/**
 * @brief One training step of the optimizer's model: forward and backward over the
 * batch's valid samples, the gradient exchange (started from the gradient-ready
 * callback, overlapping backward), and, on the last of `backward_passes_per_step`
 * passes, the update.
 *
 * Padded samples (rows past @p batch->valid) are not part of the loss or the gradient.
 * A rank whose batch has no valid sample still takes part with a zero gradient.
 * Collective on update passes with `variable_update=replicated`: every rank calls it the
 * same number of times. In the parameter-server modes a step involves this worker and
 * the servers only, and on a dedicated server (cohort_optimizer_info() worker = 0) it
 * does nothing. With `independent` it involves no other rank.
 * @param optimizer The optimizer.
 * @param batch     Borrowed for the call: f32 images in the model's layout, int32 labels;
 *                  set its struct_size. May be NULL on a dedicated parameter server.
 * @param stats     Receives what the step did (may be NULL); set its struct_size.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for shapes;
 *         communication errors (::COHORT_ERR_MPI, ::COHORT_ERR_PEER_LOST, …), among them
 *         ::COHORT_ERR_PEER_SHUTDOWN when another rank has left (destroyed its runtime,
 *         usually after an error of its own) without exchanging this step's gradients:
 *         the message names it; stop and destroy the runtime too.
 */
COHORT_API cohort_status_t cohort_optimizer_train_step(cohort_optimizer_t* optimizer, const cohort_batch_t* batch,
                                                       cohort_train_stats_t* stats);

/**
 * @brief Deprecated: cohort_optimizer_train_step(), which knows the model from the
 * optimizer. @p model must be the optimizer's (::COHORT_ERR_INVALID_ARGUMENT
 * otherwise). Removed after the next minor version.
 */
COHORT_API COHORT_DEPRECATED(cohort_optimizer_train_step) cohort_status_t
    cohort_model_train_step(cohort_model_t* model, cohort_optimizer_t* optimizer, const cohort_batch_t* batch,
                            cohort_train_stats_t* stats);

/** @brief Where a training run stands, as a checkpoint stores it. */
typedef struct cohort_checkpoint_info_t {
  size_t struct_size;     /**< Set by the caller to sizeof(cohort_checkpoint_info_t). */
  int64_t epoch;          /**< Completed epochs. */
  int64_t step;           /**< Optimizer updates taken (saving: ignored, the optimizer's count is used). */
  int64_t pipeline_epoch; /**< Where the input pipeline continues (cohort_pipeline_seek()). */
  int64_t pipeline_step;  /**< Batch within that epoch. */
  int64_t ranks;          /**< Loading: ranks of the run that saved it (0: not recorded). Saving: ignored. */
} cohort_checkpoint_info_t;

/**
 * @brief Collective: saves parameters, batch-norm statistics, optimizer state and
 * @p info into @p dir (`ckpt-<step>.cohort` plus a `latest` pointer, replaced
 * atomically; the newest `keep_checkpoints` are kept). Rank 0 writes; every rank then
 * returns rank 0's outcome, so a failed write (a full disk, a read-only directory, a
 * path through a file) is the same error on every rank and no rank is left waiting.
 *
 * Every rank calls it, in the same order as its other collective calls: unlike a
 * Horovod program, which saves under `if (hvd.rank() == 0)`, never put it under
 * `if (rank == 0)`. A rank that skips it leaves the others waiting in it until that
 * rank shuts down its runtime (then they fail with ::COHORT_ERR_PEER_SHUTDOWN) or
 * until `stall_shutdown_s` passes (::COHORT_ERR_STALLED; with the default 0 they wait
 * for ever, and rank 0 logs a stall warning after `stall_warning_s`), with a message
 * that says "every rank must call cohort_optimizer_save_checkpoint".
 * @param optimizer The optimizer (its model is saved too).
 * @param dir       Directory, created when missing (only rank 0's value is used).
 * @param info      The run's position; set its struct_size (fields beyond an older
 *                  struct's size are saved as 0).
 * @return ::COHORT_OK, or on every rank ::COHORT_ERR_IO with the same message: "rank 0
 *         could not save a checkpoint in '<dir>': " and what failed, naming the file.
 */
COHORT_API cohort_status_t cohort_optimizer_save_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            const cohort_checkpoint_info_t* info);

/**
 * @brief Collective: rank 0 loads the latest checkpoint of @p dir, then its values are
 * broadcast to every rank (as cohort_optimizer_broadcast()).
 *
 * Every rank calls it (a Horovod program loads on rank 0, then broadcasts; here the
 * call does both): a rank that skips it leaves the others waiting, as for
 * cohort_optimizer_save_checkpoint(), and their error says "every rank must call
 * cohort_optimizer_load_checkpoint".
 *
 * A checkpoint saved at another global batch (another number of ranks, after a restart
 * on fewer hosts) resumes at the same sample: the optimizer's step count, which the
 * learning-rate schedule follows, and @p info's step and pipeline position are scaled
 * by the ratio of the global batches (rounding down, so a partial batch is seen again);
 * @p info->ranks tells the caller the rank count it was saved at. Call
 * cohort_optimizer_set_run_length() with this run's lengths first, so that a position
 * past the end of an epoch moves to the next one.
 * @param optimizer The optimizer.
 * @param dir       The checkpoint directory.
 * @param info      Receives the saved position (the same on every rank); set its struct_size.
 * @param found     Receives 1 when a checkpoint was loaded, 0 when @p dir has none
 *                  (nothing changes then).
 * @return ::COHORT_OK; ::COHORT_ERR_CORRUPT_DATA for a damaged file; ::COHORT_ERR_INVALID_ARGUMENT
 *         when it belongs to another model or optimizer. Every rank fails alike, with
 *         the same message: "rank 0 could not load the checkpoint in '<dir>': " and
 *         the file and the problem.
 */
COHORT_API cohort_status_t cohort_optimizer_load_checkpoint(cohort_optimizer_t* optimizer, const char* dir,
                                                            cohort_checkpoint_info_t* info, int* found);

/** @brief Throughput statistics over measured steps, as tf_cnn_benchmarks reports them.
 *  Embedded by value in ::cohort_run_summary_t, so it never grows: new rates go to the
 *  end of cohort_run_summary_t instead. */
typedef struct cohort_rate_summary_t {
  size_t struct_size;  /**< Set by the caller to sizeof(cohort_rate_summary_t). */
  int64_t count;       /**< Steps measured (warm-up excluded). */
  double median;       /**< Median per-step images/sec. */
  double mean;         /**< Total images / total seconds. */
  double std_error;    /**< Population standard deviation of the per-step rates / sqrt(count). */
  double jitter;       /**< 1.4826 × median absolute deviation of the per-step rates. */
  double data_wait;    /**< Fraction of measured time waiting for the input pipeline. */
  double comm_exposed; /**< Fraction waiting for communication that backward did not hide. */
  double compute;      /**< The rest of the measured time. */
} cohort_rate_summary_t;

/** @brief Accumulates per-step timings; the first warm-up steps are not measured. */
typedef struct cohort_metrics_t cohort_metrics_t;

/**
 * @brief Creates a step-metrics accumulator.
 * @param warmup_steps Steps excluded from the statistics (at least one step is measured).
 * @param out          Receives the accumulator, owned by the caller (cohort_metrics_destroy()).
 * @return ::COHORT_OK or ::COHORT_ERR_INVALID_ARGUMENT. Not collective; one thread at a time.
 */
COHORT_API cohort_status_t cohort_metrics_create(int64_t warmup_steps, cohort_metrics_t** out);

/**
 * @brief Destroys an accumulator.
 * @param metrics The accumulator; NULL is a no-op.
 */
COHORT_API void cohort_metrics_destroy(cohort_metrics_t* metrics);

/**
 * @brief Records one step.
 * @param metrics        The accumulator.
 * @param seconds        Wall time of the step.
 * @param data_wait_s    Part of it spent waiting for the input pipeline.
 * @param comm_exposed_s Part of it spent waiting for communication after backward.
 * @param images         Images of the step on all ranks.
 * @return ::COHORT_OK or ::COHORT_ERR_INVALID_ARGUMENT for negative values.
 */
COHORT_API cohort_status_t cohort_metrics_record(cohort_metrics_t* metrics, double seconds, double data_wait_s,
                                                 double comm_exposed_s, double images);

/**
 * @brief The statistics of the steps measured so far.
 * @param metrics The accumulator.
 * @param out     Receives them; set its struct_size.
 * @return ::COHORT_OK or an error.
 */
COHORT_API cohort_status_t cohort_metrics_summary(const cohort_metrics_t* metrics, cohort_rate_summary_t* out);

/** @brief A per-rank figure over the ranks that compute: the median rank's value and the
 *  largest. Embedded by value, so it never grows. */
typedef struct cohort_over_ranks_t {
  double median; /**< The median over ranks (the mean of the two middle values for an even count). */
  double max;    /**< The largest. */
} cohort_over_ranks_t;

/** @brief Where the ranks' time went during the measured steps (the run summary's "threads" and
 *  "compute_spread_s"): the CPU seconds per step of each kind of thread of a rank, over the ranks
 *  that compute, and how far apart the ranks' compute times were, step by step. A program fills it
 *  from cohort_runtime_cpu_times(), cohort_pipeline_stats() and cohort_train_stats_t::compute_s
 *  taken on every rank (cohort-train gathers them once, at the end). */
typedef struct cohort_thread_cpu_t {
  size_t struct_size;           /**< Set by the caller to sizeof(cohort_thread_cpu_t). */
  cohort_over_ranks_t compute;  /**< The thread that runs the steps: forward, backward, update, and its
                                     waits for the collective engine. */
  cohort_over_ranks_t engine;   /**< The collective engine's thread. */
  cohort_over_ranks_t other;    /**< The rest of the process: the other threads of compute's OpenMP team
                                     (threads_per_rank > 1), MPI's own threads. */
  int has_input;                /**< 1 when the input pipeline has reader and decode threads: "readers"
                                     and "decoders" are written. */
  cohort_over_ranks_t readers;  /**< The pipeline's reader threads (its read stage). */
  cohort_over_ranks_t decoders; /**< Its decode threads (decode, augment and assemble stages). */
  double compute_spread_median; /**< Per measured step, the longest forward and backward of the ranks
                                     minus the shortest, in seconds: the median over the steps. */
  double compute_spread_p90;    /**< The same: the 90th percentile over the steps. */
} cohort_thread_cpu_t;

/** @brief The run summary of the schema `cohort.run/1` (one JSON line). Fields beyond
 *  an older struct's struct_size are written as if zero (absent top1, no extra_json). */
typedef struct cohort_run_summary_t {
  size_t struct_size;                   /**< Set by the caller to sizeof(cohort_run_summary_t). */
  const char* model;                    /**< Model name (borrowed for the call). */
  int64_t ranks;                        /**< Ranks of the run. */
  int64_t local_ranks;                  /**< Ranks on this host. */
  const char* device;                   /**< "cpu" or "cuda". */
  const char* precision;                /**< "f32", "f16" or "bf16". */
  const char* data;                     /**< "synthetic" or the data path. */
  int64_t batch_per_rank;               /**< Samples per batch on each rank. */
  int64_t global_batch;                 /**< Samples per step on all ranks. */
  int64_t steps;                        /**< Steps run. */
  int64_t warmup_steps;                 /**< Steps excluded from images/sec. */
  cohort_rate_summary_t images_per_sec; /**< Global rates and time fractions. */
  double epochs;                        /**< Epochs run. */
  double loss;                          /**< Final training loss (non-finite is written as null). */
  int has_top1;                         /**< 1 when top1/top5 are known (an evaluation ran). */
  double top1;                          /**< Top-1 accuracy in [0, 1]. */
  double top5;                          /**< Top-5 accuracy in [0, 1]. */
  double wall_s;                        /**< Seconds of the whole run. */
  const char* extra_json;               /**< NULL, or further `"key": value` members (JSON, comma-separated,
                                             without braces) appended after the fixed ones, values as written.
                                             Text that is not such members, or a key that repeats one written
                                             before it (a field of the summary or an earlier extra one), is
                                             ::COHORT_ERR_INVALID_ARGUMENT naming it. */
  const char* variable_update;          /**< NULL, or the mode (cohort_optimizer_info()): written with
                                             "workers" and "servers" after "wall_s". */
  int64_t workers;                      /**< With variable_update: ranks that compute. */
  int64_t servers;                      /**< With variable_update: ranks that hold variables. */
  int has_staleness;                    /**< 1: "staleness": {"mean", "max"} is written too. */
  double staleness_mean;                /**< Updates behind per applied gradient, over all servers. */
  int64_t staleness_max;                /**< The most updates behind. */
  const cohort_pipeline_stats_t* input; /**< NULL, or the training pipeline's statistics (summed over
                                             ranks if you like): written as "input": {"cpu_s_per_image":
                                             {"read", "decode", "augment", "assemble", "total"},
                                             "read_bytes_per_s", "limiting_stage"}. Borrowed for the call. */
  const cohort_thread_cpu_t* threads;   /**< NULL, or where the ranks' time went: written as "threads":
                                             {"compute", "engine", "other", ["readers", "decoders"]}, each
                                             {"median", "max"} CPU seconds per step, and "compute_spread_s":
                                             {"median", "p90"}. Borrowed for the call. */
} cohort_run_summary_t;

/**
 * @brief Writes the run summary as one JSON line (no newline) into @p buffer.
 * @param summary The summary.
 * @param buffer  Output buffer (may be NULL when @p size is 0).
 * @param size    Bytes available in @p buffer.
 * @param needed  Receives the bytes needed, terminating NUL included (may be NULL).
 * @return ::COHORT_OK, or ::COHORT_ERR_INVALID_ARGUMENT when @p buffer is too small
 *         (then @p needed says how much) or `extra_json` is not valid (see its field).
 */
COHORT_API cohort_status_t cohort_run_summary_json(const cohort_run_summary_t* summary, char* buffer, size_t size,
                                                   size_t* needed);

/** @brief A run's log in files that tools read: TensorBoard event files and a per-step CSV. */
typedef struct cohort_run_log_t cohort_run_log_t;

/** @brief One training step, as a run log records it (cohort_run_log_step()). */
typedef struct cohort_step_record_t {
  size_t struct_size;    /**< Set by the caller to sizeof(cohort_step_record_t). */
  int64_t step;          /**< Steps done, this one included. */
  double epoch;          /**< Epochs done (fractional). */
  double loss;           /**< Loss of the step. */
  double lr;             /**< Learning rate of the step. */
  double step_s;         /**< Wall time of the step. */
  double data_wait_s;    /**< Part of it waiting for the input pipeline. */
  double comm_exposed_s; /**< Part of it waiting for communication that backward did not hide. */
  double images;         /**< Images of the step on all ranks (for images/sec). */
} cohort_step_record_t;

/**
 * @brief Opens the logs that the options `tensorboard_dir` and `log_csv` name.
 *
 * `tensorboard_dir` (created when missing) receives an event file
 * `events.out.tfevents.<seconds>.<host>.<pid>`: TFRecord-framed tensorflow.Event
 * records with the scalars `loss`, `learning_rate`, `images_per_sec` and
 * `data_wait_fraction` per step and `eval/top1`, `eval/top5`, `eval/loss` per
 * evaluation, which TensorBoard reads (also while the run goes on). `log_csv` receives
 * the header `step,epoch,loss,lr,step_time_s,data_wait_s,comm_exposed_s,images_per_sec`
 * and one line per step. Only rank 0 writes: on other ranks the log records nothing.
 * @param runtime Gives the rank (NULL: rank 0).
 * @param config  Options (NULL: the runtime's, or the defaults without one); read once.
 * @param out     Receives the log, owned by the caller (cohort_run_log_destroy()).
 * @return ::COHORT_OK, or ::COHORT_ERR_IO naming the directory or file that cannot be
 *         created. Not collective.
 */
COHORT_API cohort_status_t cohort_run_log_create(const cohort_runtime_t* runtime, const cohort_config_t* config,
                                                 cohort_run_log_t** out);

/** @brief Closes the log's files. @param log The log; NULL is a no-op. */
COHORT_API void cohort_run_log_destroy(cohort_run_log_t* log);

/**
 * @brief Records one step (a TensorBoard event and a CSV line).
 * @param log    The log.
 * @param record The step; set its struct_size.
 * @return ::COHORT_OK, or ::COHORT_ERR_IO naming the file a write failed on.
 */
COHORT_API cohort_status_t cohort_run_log_step(cohort_run_log_t* log, const cohort_step_record_t* record);

/**
 * @brief Records an evaluation at @p step (TensorBoard's eval/top1, eval/top5, eval/loss).
 * @param log    The log.
 * @param step   The training step it follows.
 * @param result What cohort_model_evaluate() gave.
 * @return ::COHORT_OK, or ::COHORT_ERR_IO naming the file a write failed on.
 */
COHORT_API cohort_status_t cohort_run_log_eval(cohort_run_log_t* log, int64_t step, const cohort_eval_result_t* result);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_TRAIN_H */
