/**
 * @file pipeline.h
 * @brief The input pipeline: batches of images and labels from TFRecord shards, an
 *        image folder, MNIST IDX files, synthetic data or caller memory.
 *
 * A pipeline reads this rank's disjoint share of every epoch (shuffled by
 * (`seed`, epoch), the same on every run), decodes JPEGs with libjpeg-turbo (only the
 * crop window, at the smallest DCT scale that covers the output), augments them and
 * writes them straight into reused batch buffers on `decode_threads` threads,
 * `prefetch_depth` batches ahead of the caller. Every rank yields the same number of
 * batches per epoch (`remainder=pad|drop`), so uneven data never hangs a collective;
 * padded and skipped samples are not counted in cohort_batch_t::valid. Synthetic data
 * (no `data_dir`) is drawn per rank from (`seed`, rank): ranks get different batches.
 *
 * The kind of dataset is detected from the files' names and content (TFRecord shards,
 * MNIST IDX files, or an image folder with one sub-folder per class); an ambiguous or
 * unknown layout is an error at create that says what was found. A JPEG's verdict
 * (used or skipped) is found once per file by a decode of all its data, whatever the
 * crop. The guide docs/guides/pipeline.md describes the layouts and the checks.
 *
 * Options (all in the registry; see `cohort-options data`): `data_dir`, `data_source`,
 * `data_split`, `batch_size`, `image_size`, `data_format`, `image_dtype`, `augment`
 * (auto|none|simple|standard|complex|padcrop) and one key per augmentation step,
 * `reader_threads`, `decode_threads`, `prefetch_depth`, `jpeg_dct`, `exif_orientation`,
 * `on_error`, `max_skipped_fraction`, `label_offset`, `max_image_pixels`, `crc_check`,
 * `write_index`, `stale_index`, `seed`.
 *
 * Thread-safety: one pipeline is used by one thread at a time; different pipelines
 * are independent. No pipeline call is collective: ranks agree on the batch count
 * because they compute it from the same dataset size and options.
 */
#ifndef COHORT_PIPELINE_H
#define COHORT_PIPELINE_H

#include <dlpack/dlpack.h>

#include "cohort/common.h"
#include "cohort/config.h"
#include "cohort/data.h"
#include "cohort/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque input pipeline. It keeps its runtime alive. */
typedef struct cohort_pipeline_t cohort_pipeline_t;

/* The model type of model.h, declared here without its typedef (C99 allows one). */
struct cohort_model_t;

/**
 * @brief One batch, filled by cohort_pipeline_next().
 *
 * The tensors are CPU views owned by the pipeline, valid until the next
 * cohort_pipeline_next() or cohort_pipeline_destroy() on the same pipeline; the caller
 * must not free them. The first `valid` samples are real; the rest (padding at the
 * end of an epoch, or bad samples skipped under `on_error=skip`) are zero-filled with
 * label 0 and must not be counted in metrics.
 */
typedef struct cohort_batch_t {
  size_t struct_size;  /**< Set by the caller to sizeof(cohort_batch_t). */
  DLTensor images;     /**< [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC); f32, f16 or u8. */
  DLTensor labels;     /**< int32 [N]. */
  DLTensor valid_mask; /**< uint8 [N]: 1 for a real sample (the first `valid` ones). */
  int64_t valid;       /**< Number of real samples, 0..N. */
  int64_t epoch;       /**< Epoch of this batch, from 0. */
  int64_t step;        /**< Batch index within the epoch, from 0. */
} cohort_batch_t;

/** @brief Geometry and size of a pipeline, filled by cohort_pipeline_info(). */
typedef struct cohort_pipeline_info_t {
  size_t struct_size;        /**< Set by the caller to sizeof(cohort_pipeline_info_t). */
  int64_t dataset_size;      /**< Samples in the whole dataset (all ranks). */
  int64_t steps_per_epoch;   /**< Batches per epoch, the same on every rank. */
  int64_t samples_per_epoch; /**< Valid samples this rank sees per epoch. */
  int64_t batch_size;        /**< Samples per batch (N). */
  int64_t num_classes;       /**< Classes when the source knows them (folder, IDX, memory, synthetic), else 0. */
  int channels;              /**< C: 3 for JPEG and synthetic sources, 1 or 3 for raw ones. */
  int height;                /**< H of the images in a batch. */
  int width;                 /**< W of the images in a batch. */
  int reader_threads;        /**< Reader threads in use (0 for synthetic data). */
  int decode_threads;        /**< Decode threads in use (0 for synthetic data). */
  int prefetch_depth;        /**< Batches prepared ahead of the caller. */
} cohort_pipeline_info_t;

/** @brief Per-stage statistics, filled by cohort_pipeline_stats(). */
typedef struct cohort_pipeline_stats_t {
  size_t struct_size;   /**< Set by the caller to sizeof(cohort_pipeline_stats_t). */
  int64_t batches;      /**< Batches returned by cohort_pipeline_next(). */
  int64_t images;       /**< Valid samples in those batches. */
  int64_t decoded;      /**< Samples decoded (includes prefetched ones). */
  int64_t errors;       /**< Bad samples skipped under `on_error=skip`. */
  int64_t padded;       /**< Padding samples produced. */
  double read_busy_s;   /**< Seconds the readers spent reading, summed over reader threads. */
  double decode_busy_s; /**< Seconds spent decoding and augmenting, summed over decode threads. */
  double wait_s;    /**< Seconds the caller waited inside cohort_pipeline_next(), after the first call (start-up). */
  double elapsed_s; /**< Seconds from the end of the first to the end of the last cohort_pipeline_next(). */
  double images_per_sec;     /**< Valid images delivered after the first batch / elapsed_s. */
  double wait_fraction;      /**< wait_s / elapsed_s: above ~0.05 the step is input-bound. */
  double mean_ready_batches; /**< Batches already prepared when the caller asked (queue occupancy). */
  double mean_decode_queue;  /**< Samples waiting for a decode thread at those times. */
  int64_t skipped;       /**< Bad samples left out of the batches returned so far (`on_error=skip`); unlike `errors`,
                              samples of prefetched batches do not count. */
  double read_cpu_s;     /**< CPU seconds of the read stage (the readers' own CPU time). The four stages sum
                              to the pipeline's CPU; divided by `decoded`, CPU seconds per image. */
  double decode_cpu_s;   /**< CPU seconds decoding JPEGs. */
  double augment_cpu_s;  /**< CPU seconds cropping, resizing, flipping, colour jitter and normalising. */
  double assemble_cpu_s; /**< CPU seconds of the rest of batch assembly (padding, labels, hand-over). */
  int64_t bytes_read;    /**< Bytes the readers took from storage (0 for data held in memory); divided by
                              `elapsed_s`, the read rate. */
  const char* limiting_stage; /**< "read", "decode", "augment" or "assemble": the stage that bounds the
                                   pipeline's rate ("" before any image and for synthetic data); static text.
                                   Fields a smaller, older struct_size leaves out are not written. */
} cohort_pipeline_stats_t;

/**
 * @brief Opens the dataset named by the `data_dir` option (synthetic data when empty)
 *        and starts the pipeline's threads.
 * @param runtime Gives rank, size and the thread budget (thread counts of 0 take
 *   their defaults from it). May be NULL: one rank, the budget of this process's cores.
 *   Borrowed; the pipeline keeps the runtime alive. `image_size=0` means 224 for
 *   encoded and synthetic images here, whatever model they feed: a pipeline for a model
 *   comes from cohort_pipeline_create_for_model().
 * @param config Options (NULL = defaults); copied.
 * @param[out] out Receives the pipeline, owned by the caller (cohort_pipeline_destroy()).
 * @return ::COHORT_ERR_IO for a missing path; ::COHORT_ERR_INVALID_ARGUMENT for a bad
 *   option, a layout that is ambiguous or none of the kinds, an empty dataset or a
 *   dataset too small for one batch per rank with `remainder=drop`;
 *   ::COHORT_ERR_CORRUPT_DATA for an index that does not match its shard under
 *   `stale_index=fail`, a damaged shard under `on_error=fail`, more corrupt records than
 *   `max_skipped_fraction` allows (found by `check_labels=create`) or a label out of range.
 */
COHORT_API cohort_status_t cohort_pipeline_create(const cohort_runtime_t* runtime, const cohort_config_t* config,
                                                  cohort_pipeline_t** out);

/**
 * @brief Opens the dataset of the `data_dir` option (synthetic data when empty) as
 *        cohort_pipeline_create() does, for @p model: the image size (`image_size`),
 *        the channels of synthetic images (`synthetic_channels`) and the classes
 *        (`num_classes`) are the model's (cohort_model_io_shape()).
 * @param model The model (borrowed for the call); gives the runtime too, which the
 *   pipeline keeps alive.
 * @param config Options (NULL = the runtime's); copied. Setting one of the three options
 *   above to another value than the model's is an error. The data is sharded over the
 *   ranks that compute: with `ps_dedicated` (cohort_optimizer_create()) the parameter
 *   servers are left out, and creating a pipeline on one of them is an error.
 * @param[out] out Receives the pipeline, owned by the caller (cohort_pipeline_destroy()).
 * @return As cohort_pipeline_create(), and ::COHORT_ERR_INVALID_ARGUMENT (naming the
 *   dataset, the model and both values) for an option that disagrees with the model, a
 *   dataset whose images have other channels than the model takes or more classes than
 *   it has outputs, or a model that does not take square images.
 */
COHORT_API cohort_status_t cohort_pipeline_create_for_model(const struct cohort_model_t* model,
                                                            const cohort_config_t* config, cohort_pipeline_t** out);

/**
 * @brief A pipeline over arrays in caller memory (DLPack).
 * @param runtime As for cohort_pipeline_create() (may be NULL).
 * @param config Options (NULL = defaults; `data_dir` is ignored); copied.
 * @param images uint8 CPU tensor [N, H, W] or [N, H, W, C] with C = 1 or 3, contiguous.
 *   Borrowed: the memory must stay valid and unchanged until the pipeline is destroyed.
 * @param labels int32 or int64 CPU tensor [N], contiguous; read once during this call.
 * @param[out] out Receives the pipeline, owned by the caller.
 * @return ::COHORT_ERR_INVALID_ARGUMENT for a wrong dtype, shape, device or layout, or
 *   a label out of [0, num_classes) when `num_classes` is set.
 */
COHORT_API cohort_status_t cohort_pipeline_create_from_memory(const cohort_runtime_t* runtime,
                                                              const cohort_config_t* config, const DLTensor* images,
                                                              const DLTensor* labels, cohort_pipeline_t** out);

/** @brief Stops the threads and frees the pipeline and its batch buffers. NULL is a no-op. */
COHORT_API void cohort_pipeline_destroy(cohort_pipeline_t* pipeline);

/**
 * @brief Waits for the next batch and fills `batch` with views of it.
 * @param pipeline The pipeline.
 * @param[in,out] batch Caller struct with struct_size set; filled on success.
 * @return ::COHORT_ERR_CORRUPT_DATA or ::COHORT_ERR_JPEG (with the file and offset or
 *   record in cohort_last_error()) when a bad sample was met under `on_error=fail`;
 *   ::COHORT_ERR_CORRUPT_DATA under `on_error=skip` when every sample of an epoch was
 *   bad, or when the skipped samples exceed `max_skipped_fraction` of those this rank
 *   reads by the end of the current epoch (checked at every batch); ::COHORT_ERR_IO
 *   when a file could not be read. The pipeline then stays failed and every later call
 *   returns the same error. Not collective: the error is this rank's own.
 */
COHORT_API cohort_status_t cohort_pipeline_next(cohort_pipeline_t* pipeline, cohort_batch_t* batch);

/**
 * @brief Restarts the pipeline at batch `step` of `epoch` (resuming a run). Batches
 *        are then exactly those an uninterrupted run yields from that point on.
 *        Views from earlier batches become invalid.
 * @return ::COHORT_ERR_INVALID_ARGUMENT when epoch < 0 or step is not in
 *   [0, steps_per_epoch).
 */
COHORT_API cohort_status_t cohort_pipeline_seek(cohort_pipeline_t* pipeline, int64_t epoch, int64_t step);

/**
 * @brief Where the batch the next cohort_pipeline_next() returns lies: its epoch and its
 *        step within the epoch. After the last batch of an epoch that is step 0 of the
 *        next epoch. These are the `pipeline_epoch` and `pipeline_step` a checkpoint saved
 *        now records, and what cohort_pipeline_seek() takes to resume there.
 * @param pipeline The pipeline.
 * @param epoch    Receives the epoch (may be NULL).
 * @param step     Receives the step (may be NULL).
 * @return ::COHORT_OK, or ::COHORT_ERR_INVALID_ARGUMENT for a NULL pipeline. Not collective.
 */
COHORT_API cohort_status_t cohort_pipeline_position(const cohort_pipeline_t* pipeline, int64_t* epoch, int64_t* step);

/** @brief Fills the pipeline's geometry and epoch size. Thread-safe with next(). */
COHORT_API cohort_status_t cohort_pipeline_info(const cohort_pipeline_t* pipeline, cohort_pipeline_info_t* info);

/**
 * @brief Batches per epoch on every rank (the epoch size).
 * @param pipeline The pipeline.
 * @param[out] steps Receives the count.
 */
COHORT_API cohort_status_t cohort_pipeline_steps_per_epoch(const cohort_pipeline_t* pipeline, int64_t* steps);

/** @brief Fills per-stage statistics. Thread-safe with next(). */
COHORT_API cohort_status_t cohort_pipeline_stats(const cohort_pipeline_t* pipeline, cohort_pipeline_stats_t* stats);

/**
 * @brief A one-line verdict the trainer can print, e.g. "input-bound: the step waited
 *        for data 43% of the time; decode limits it (CPU per image: read … ms (3%),
 *        decode … ms (71%), …)", naming the stage that limits.
 * @param pipeline The pipeline.
 * @param buffer Receives the NUL-terminated text; may be NULL when size is 0.
 * @param size Bytes available in buffer.
 * @param[out] needed Receives the bytes the whole text needs, NUL included (may be NULL).
 * @return ::COHORT_ERR_INVALID_ARGUMENT when the buffer is too small (`needed` is
 *   still set: call with size 0 first to learn it).
 */
COHORT_API cohort_status_t cohort_pipeline_verdict(const cohort_pipeline_t* pipeline, char* buffer, size_t size,
                                                   size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_PIPELINE_H */
