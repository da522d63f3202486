/**
 * @file runtime.h
 * @brief The process-level object: MPI life cycle, ranks, the thread budget and the
 *        compute device.
 *
 * The first cohort_runtime_create() in a process initializes MPI with
 * MPI_THREAD_MULTIPLE, unless MPI is already initialized (then cohort uses it and
 * never finalizes it; a thread level below MPI_THREAD_SERIALIZED is an error). Each
 * runtime duplicates MPI_COMM_WORLD, so several runtimes may live in sequence or side
 * by side; with the option `world=process` it duplicates MPI_COMM_SELF instead and is
 * this process alone (N launched copies then run as N independent programs). A program
 * started without `mpirun` runs as a single rank.
 */
#ifndef COHORT_RUNTIME_H
#define COHORT_RUNTIME_H

#include "cohort/common.h"
#include "cohort/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque runtime. Child objects (models, optimizers, pipelines, requests) keep its
 *  memory alive; cohort_runtime_destroy() tears it down all the same. */
typedef struct cohort_runtime_t cohort_runtime_t;

/** Kind of compute device a runtime uses. */
typedef enum cohort_device_type_t {
  COHORT_DEVICE_CPU = 0,              /**< The host CPU (oneDNN). */
  COHORT_DEVICE_CUDA = 1,             /**< An NVIDIA GPU (cuDNN, cuBLAS, NCCL). */
  COHORT_DEVICE_MAX_ENUM = 0x7FFFFFFF /**< Not a device: keeps the enum 32-bit. */
} cohort_device_type_t;

/** What a runtime sees, filled by cohort_runtime_info(). */
typedef struct cohort_runtime_info_t {
  size_t struct_size;               /**< Set by the caller to sizeof(cohort_runtime_info_t). */
  int rank;                         /**< This process's rank in the job, 0..size-1. */
  int size;                         /**< Number of ranks in the job. */
  int local_rank;                   /**< Rank among the ranks on this node. */
  int local_size;                   /**< Ranks on this node. */
  int cross_rank;                   /**< Index of this node among nodes with this local_rank. */
  int cross_size;                   /**< Number of nodes with a rank of this local_rank. */
  int thread_budget;                /**< Threads this rank may use: the cores it may run on / the local ranks
                                         that may run on them too, or threads_per_rank. */
  cohort_device_type_t device_type; /**< Where models compute: the CPU in this version, GPUs or not. */
  int device_id;                    /**< CUDA device ordinal models compute on, or -1 for the CPU. */
  int cuda_device_count;            /**< GPUs visible to this process (0 without GPU or without CUDA). */
  int mpi_thread_level;             /**< The thread level MPI provides (MPI_THREAD_*). */
  int collective_device_id;         /**< CUDA ordinal that collectives of CUDA tensors (kDLCUDA) use on this
                                         rank, or -1 when they cannot run (device=cpu, no GPU, or no CUDA). */
} cohort_runtime_info_t;

/**
 * @brief Creates a runtime. Collective: every rank must call it, in the same order
 *        as other collective calls.
 * @param config Options (may be NULL for defaults); copied, so it may be destroyed afterwards.
 * @param[out] out Receives the runtime, owned by the caller (cohort_runtime_destroy()).
 * @return ::COHORT_ERR_INVALID_STATE after cohort_finalize() or once a peer was lost;
 *   ::COHORT_ERR_MPI if MPI cannot be initialized or provides less than
 *   MPI_THREAD_SERIALIZED; ::COHORT_ERR_UNSUPPORTED if `device=cuda` is asked for and no
 *   GPU is usable, or this build has no CUDA backend. With `device=auto` models compute
 *   on the local rank's GPU where one is visible (local rank modulo the node's GPUs),
 *   which also serves collectives of CUDA tensors
 *   (cohort_runtime_info_t::collective_device_id), and on the CPU otherwise.
 */
COHORT_API cohort_status_t cohort_runtime_create(const cohort_config_t* config, cohort_runtime_t** out);

/**
 * @brief Tears the runtime down, here and now. Collective: every rank calls it, in the
 *        same order as its other collective calls. NULL is a no-op.
 *
 * It is the one call that shuts down the collective engine (every pending request
 * completes with ::COHORT_ERR_CANCELLED) and frees the communicators, whether or not
 * objects made from the runtime are still alive. Those objects keep only memory
 * alive afterwards: destroying them, in any order, frees it and never communicates or
 * blocks. Any other call on a model, optimizer or request of a destroyed runtime fails
 * with ::COHORT_ERR_INVALID_STATE; pipelines never communicate and keep working. No
 * other call on the runtime or its objects may run on another thread meanwhile. See
 * docs/guides/collective-calls.md for the whole list of collective calls.
 *
 * It returns once every rank has called it. Meanwhile the other ranks learn within an
 * engine cycle or two that this rank is shutting down: their collectives that it never
 * submitted, pending or later (and their joins, unless it had joined), fail with
 * ::COHORT_ERR_PEER_SHUTDOWN naming this rank. So a rank that stops early on an error of
 * its own, and still calls this, does not leave the others waiting: they stop and call
 * it too. Collectives that every rank submitted still complete.
 */
COHORT_API void cohort_runtime_destroy(cohort_runtime_t* runtime);

/**
 * @brief Fills @p info. Thread-safe.
 * @param[in,out] info Caller-owned; set info->struct_size = sizeof(*info) first. A
 *   smaller struct_size from an older header is accepted and filled up to its size.
 */
COHORT_API cohort_status_t cohort_runtime_info(const cohort_runtime_t* runtime, cohort_runtime_info_t* info);

/** @brief CPU time this process has used so far, by thread (filled by cohort_runtime_cpu_times()). */
typedef struct cohort_cpu_times_t {
  size_t struct_size;      /**< Set by the caller to sizeof(cohort_cpu_times_t). */
  double process_s;        /**< CPU seconds of every thread of this process. */
  double calling_thread_s; /**< CPU seconds of the thread that makes the call. */
  double engine_s;         /**< CPU seconds of the runtime's collective engine thread. */
} cohort_cpu_times_t;

/**
 * @brief CPU seconds used so far by this process, by the calling thread and by the
 *        runtime's collective engine thread: two readings, taken around a stretch of a
 *        program, say where its CPU time went (the thread that runs the training steps,
 *        the engine, the rest). Thread-safe; not collective; cheap (a few system calls).
 * @param runtime The runtime.
 * @param[in,out] times Caller-owned; set times->struct_size = sizeof(*times) first.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for NULL arguments or a bad
 *   struct_size; ::COHORT_ERR_INVALID_STATE once the runtime is shut down.
 */
COHORT_API cohort_status_t cohort_runtime_cpu_times(const cohort_runtime_t* runtime, cohort_cpu_times_t* times);

/** @brief What the runtime's collective engine has done so far (filled by
 *         cohort_runtime_engine_stats()). Counts only grow. */
typedef struct cohort_engine_stats_t {
  size_t struct_size;      /**< Set by the caller to sizeof(cohort_engine_stats_t). */
  uint64_t cycles;         /**< Negotiation cycles: each is a barrier of every rank, so every rank counts the same. */
  uint64_t full_exchanges; /**< Cycles that exchanged the operations' descriptions, not just the cache's bits. */
  uint64_t cache_hits;     /**< Operations agreed through the response cache (one bit each). */
  uint64_t fused_batches;  /**< Allreduce calls that carried more than one tensor. */
  uint64_t completed;      /**< Operations completed (collectives submitted; barriers and joins not counted). */
  uint64_t held;           /**< Reductions put off while compute ran (comm_during_compute=hold). */
} cohort_engine_stats_t;

/**
 * @brief The collective engine's counters so far: two readings, taken around a stretch of
 *        a program, say how many negotiation barriers and collectives it cost (cohort-train
 *        reports them per step in its run summary). Thread-safe; not collective; cheap.
 * @param runtime The runtime.
 * @param[in,out] stats Caller-owned; set stats->struct_size = sizeof(*stats) first.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for NULL arguments or a bad
 *   struct_size; ::COHORT_ERR_INVALID_STATE once the runtime is shut down.
 */
COHORT_API cohort_status_t cohort_runtime_engine_stats(const cohort_runtime_t* runtime, cohort_engine_stats_t* stats);

/** @brief What the memory cache of the device a runtime's models compute on holds and has
 *         done (filled by cohort_runtime_memory_stats()). Bytes are counted as the cache
 *         rounds requests: up to 1 MiB to a multiple of 512 bytes, larger ones to at
 *         most 25 % above them. The cache serves every tensor cohort
 *         makes on the device: parameters, gradients, optimizer state, activations,
 *         workspaces, input batches, collectives' buffers. What cuDNN, cuBLAS and NCCL
 *         allocate for themselves, and the CUDA context, are not counted. */
typedef struct cohort_memory_stats_t {
  size_t struct_size;           /**< Set by the caller to sizeof(cohort_memory_stats_t). */
  int device_id;                /**< The CUDA device the figures are for, or -1 when models compute on the
                                     CPU, whose memory is neither cached nor counted (every figure 0). */
  uint64_t in_use_bytes;        /**< Handed out to tensors that are alive now. */
  uint64_t reserved_bytes;      /**< Held from the device: in use, cached for reuse, or waiting for a
                                     stream that still reads it. */
  uint64_t peak_in_use_bytes;   /**< The most in use at once so far. */
  uint64_t peak_reserved_bytes; /**< The most held at once so far. */
  uint64_t requests;            /**< Allocations asked of the cache. */
  uint64_t cache_hits;          /**< Of those, served from memory it held. */
  uint64_t device_allocations;  /**< Blocks it asked the device for (cudaMalloc). */
  uint64_t device_frees;        /**< Blocks it gave back (cohort_runtime_empty_cache(), or to retry an
                                     allocation the device refused). */
} cohort_memory_stats_t;

/**
 * @brief The memory cache of the runtime's compute device so far (see
 *        ::cohort_memory_stats_t): how much a run holds at its peak, and whether its
 *        steps still ask the device for memory (after the first steps they should not).
 *        Thread-safe; not collective; cheap.
 * @param runtime The runtime.
 * @param[in,out] stats Caller-owned; set stats->struct_size = sizeof(*stats) first.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for NULL arguments or a bad
 *   struct_size; ::COHORT_ERR_INVALID_STATE once the runtime is shut down.
 */
COHORT_API cohort_status_t cohort_runtime_memory_stats(const cohort_runtime_t* runtime, cohort_memory_stats_t* stats);

/**
 * @brief Gives the device memory that the runtime's caches hold, and that no tensor and
 *        no stream still uses, back to the device, for another program or library on the
 *        same GPU. Tensors stay valid; later allocations ask the device again, which costs
 *        time. Peaks are kept. A no-op when models compute on the CPU. Thread-safe; not
 *        collective.
 * @param runtime The runtime.
 * @return ::COHORT_OK; ::COHORT_ERR_INVALID_ARGUMENT for a NULL runtime;
 *   ::COHORT_ERR_INVALID_STATE once the runtime is shut down.
 */
COHORT_API cohort_status_t cohort_runtime_empty_cache(cohort_runtime_t* runtime);

/** @brief This process's rank. Thread-safe. */
COHORT_API cohort_status_t cohort_runtime_rank(const cohort_runtime_t* runtime, int* rank);

/** @brief Number of ranks. Thread-safe. */
COHORT_API cohort_status_t cohort_runtime_size(const cohort_runtime_t* runtime, int* size);

/**
 * @brief Where models compute, as text: "cpu" or "cuda:N".
 * @param buffer, size, needed As cohort_config_get().
 */
COHORT_API cohort_status_t cohort_runtime_device(const cohort_runtime_t* runtime, char* buffer, size_t size,
                                                 size_t* needed);

/**
 * @brief The runtime's effective configuration (explicit values, environment, defaults).
 * @param[out] out A new config owned by the caller.
 */
COHORT_API cohort_status_t cohort_runtime_config(const cohort_runtime_t* runtime, cohort_config_t** out);

/** @brief Blocks until every rank has called it. Collective. */
COHORT_API cohort_status_t cohort_runtime_barrier(cohort_runtime_t* runtime);

/**
 * @brief Marks a step boundary in the timeline (option `timeline_file`), for programs
 *        that drive forward and backward themselves. Cheap; a no-op without a
 *        timeline. Thread-safe; not collective.
 * @param runtime The runtime.
 */
COHORT_API cohort_status_t cohort_runtime_mark_step(cohort_runtime_t* runtime);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_RUNTIME_H */
