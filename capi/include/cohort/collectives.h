/**
 * @file collectives.h
 * @brief Named, asynchronous collectives on DLPack tensors: allreduce, allgather,
 *        broadcast, alltoall, reducescatter, barrier and join.
 *
 * Every collective is submitted under a name. Ranks may submit names in different
 * orders; the runtime's background engine agrees with the other ranks which names are
 * ready everywhere and runs them in the same order on every rank, fusing small
 * allreduces into one call. A name must not be submitted again on a rank while its
 * previous submission is still pending; reusing the same names every step is the
 * intended use (steady-state negotiation is then a bit-vector exchange).
 *
 * Collective calls: every rank must submit each name eventually (or have called
 * cohort_join_async()). If some rank submits a name with a different shape, dtype,
 * operation or root, the request fails on every rank with ::COHORT_ERR_MISMATCH and a
 * message naming the tensor and each rank's submission. With the option
 * `stall_shutdown_s` set, a name that some rank never submits fails with
 * ::COHORT_ERR_STALLED after that many seconds; `stall_warning_s` (default 60) logs
 * which ranks are missing which names. Once a rank has destroyed its runtime
 * (cohort_runtime_destroy(), typically after an error of its own), every name it never
 * submitted fails within an engine cycle or two on the ranks that submit it, pending or
 * later, with ::COHORT_ERR_PEER_SHUTDOWN naming that rank (so does a join, unless that
 * rank had joined, and a barrier); names it did submit still complete. Ranks that get it
 * should stop and destroy their runtime too.
 *
 * Memory: tensors are borrowed. The caller keeps every input and output alive and
 * unmodified until the request has completed (cohort_request_wait() returned or
 * cohort_request_test() reported done). Tensors must be contiguous; dtypes f32, f16,
 * bf16, f64, i32, i64 and u8 (DLPack codes kDLFloat 32/16/64, kDLBfloat 16, kDLInt
 * 32/64, kDLUInt 8).
 *
 * Devices: host tensors (kDLCPU, kDLCUDAHost) are moved over MPI. When every node runs
 * the same number of ranks (more than one), host allreduces go instead through a
 * shared-memory segment per node that its ranks map at runtime creation: each rank
 * reduces 1/n of every piece of `allreduce_shm_kb`, allreduces that part over MPI with
 * the ranks of the same local rank on the other nodes (if any), and copies the others'
 * parts, so results are bit-identical on the ranks of a node. On one node the engine's
 * steady-state negotiation (the exchange of cache bits) uses the segment too.
 * `allreduce_shm_kb=0` uses MPI_Allreduce. Tensors in GPU memory (kDLCUDA) are moved
 * over NCCL: every collective, with scales, averages and f16/bf16 computed on the GPU.
 * The tensor must be on this rank's GPU, cohort_runtime_info_t::collective_device_id
 * (device=auto picks cuda:local_rank when a GPU is visible; one GPU per rank); the
 * runtime's NCCL communicator is created at the first device collective, which every
 * rank takes part in. Device allreduces of one setting that are ready in the same engine
 * cycle share one NCCL call through a device fusion buffer; other device collectives
 * run as their own NCCL call, in place in the caller's memory (results of allgather,
 * alltoall and reducescatter are new device tensors). The caller's GPU work producing
 * an input must be complete (its stream synchronised) before submission: a tensor
 * handed in through DLPack carries no event to wait for. Results are complete when
 * cohort_request_wait() returns (it also waits for the GPU work), and
 * cohort_request_test() reports done only then. When ranks of a node share one GPU,
 * NCCL cannot serve them: device collectives then go through host memory on every
 * rank (the runtime's log says so). Mixing host and device tensors under one name across ranks is a
 * ::COHORT_ERR_MISMATCH. A device tensor on a runtime without a usable GPU (device=cpu,
 * no GPU found, or cohort built without CUDA and NCCL) fails at submission with
 * ::COHORT_ERR_UNSUPPORTED, naming the tensor and what would work (host memory); it is
 * never copied to the host silently. If some rank cannot create NCCL (for example it
 * has joined and has no GPU), a device collective fails on every rank with
 * ::COHORT_ERR_UNSUPPORTED naming those ranks. Reducescatter of device tensors needs a
 * first dimension divisible by the number of ranks.
 *
 * Thread safety: submission functions and request functions may be called from any
 * thread; one request handle must not be used by two threads at once.
 */
#ifndef COHORT_COLLECTIVES_H
#define COHORT_COLLECTIVES_H

#include <dlpack/dlpack.h>

#include "cohort/common.h"
#include "cohort/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque handle of one submitted collective (or group). Keeps its runtime alive. */
typedef struct cohort_request_t cohort_request_t;

/** How an allreduce or reducescatter combines the ranks' values. */
typedef enum cohort_reduce_op_t {
  COHORT_REDUCE_SUM = 0,              /**< Element-wise sum. */
  COHORT_REDUCE_AVERAGE = 1,          /**< Sum divided by the number of ranks (integers: truncated). */
  COHORT_REDUCE_MIN = 2,              /**< Element-wise minimum. */
  COHORT_REDUCE_MAX = 3,              /**< Element-wise maximum. */
  COHORT_REDUCE_PRODUCT = 4,          /**< Element-wise product. */
  COHORT_REDUCE_MAX_ENUM = 0x7FFFFFFF /**< Not an operation: keeps the enum 32-bit. */
} cohort_reduce_op_t;

/** Options of an allreduce; fill with cohort_allreduce_options_default(). A caller that
 *  fills it by hand sets struct_size; fields beyond it take their defaults. */
typedef struct cohort_allreduce_options_t {
  size_t struct_size;    /**< Set by the caller to sizeof(cohort_allreduce_options_t). */
  cohort_reduce_op_t op; /**< Reduction; default ::COHORT_REDUCE_SUM. */
  double prescale;       /**< Each rank's input is multiplied by this first; default 1. */
  double postscale;      /**< The result is multiplied by this last; default 1. */
} cohort_allreduce_options_t;

/**
 * @brief Fills @p options with the defaults (sum, no scaling) and sets struct_size.
 *
 * It does not read struct_size (callers leave it unset): it writes the fields of the
 * struct's first version (op, prescale, postscale) and sets struct_size to that size,
 * for every caller and in every later version, so it never writes past an older
 * caller's struct. Later fields, if any, then take their defaults.
 * @param[out] options Caller-owned.
 * @return ::COHORT_ERR_INVALID_ARGUMENT if @p options is NULL.
 */
COHORT_API cohort_status_t cohort_allreduce_options_default(cohort_allreduce_options_t* options);

/**
 * @brief Submits an allreduce. Collective (by name).
 * @param runtime The runtime whose engine runs it.
 * @param name Unique among this rank's pending collectives; copied.
 * @param input The local values (borrowed until completion).
 * @param output Where the result goes: same shape and dtype as @p input; NULL (or
 *   @p input itself) reduces in place, overwriting @p input.
 * @param options NULL for a plain sum. Every rank must pass the same op and scales.
 * @param[out] out The request, owned by the caller (cohort_request_destroy()).
 * @return ::COHORT_ERR_INVALID_ARGUMENT for a bad name, tensor or option;
 *   ::COHORT_ERR_UNSUPPORTED for device memory without a usable GPU (see the file
 *   documentation); ::COHORT_ERR_PEER_LOST once the runtime is poisoned. Errors agreed between ranks come from
 * cohort_request_wait().
 */
COHORT_API cohort_status_t cohort_allreduce_async(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                                  DLTensor* output, const cohort_allreduce_options_t* options,
                                                  cohort_request_t** out);

/**
 * @brief Blocking allreduce: cohort_allreduce_async() then cohort_request_wait().
 * @param runtime, name, input, output, options As cohort_allreduce_async().
 */
COHORT_API cohort_status_t cohort_allreduce(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                            DLTensor* output, const cohort_allreduce_options_t* options);

/**
 * @brief Submits many allreduces as one unit (a gradient set): one request that
 *        completes when all of them have. Collective (by name).
 * @param runtime The runtime.
 * @param count Number of tensors (at least 1).
 * @param names @p count distinct names.
 * @param inputs @p count tensors (borrowed until completion).
 * @param outputs NULL (all in place) or @p count entries, each NULL for in place.
 * @param options As cohort_allreduce_async(); applies to every tensor.
 * @param[out] out The request, owned by the caller.
 */
COHORT_API cohort_status_t cohort_grouped_allreduce_async(cohort_runtime_t* runtime, size_t count,
                                                          const char* const* names, DLTensor* const* inputs,
                                                          DLTensor* const* outputs,
                                                          const cohort_allreduce_options_t* options,
                                                          cohort_request_t** out);

/**
 * @brief Blocking grouped allreduce.
 * @param runtime, count, names, inputs, outputs, options As cohort_grouped_allreduce_async().
 */
COHORT_API cohort_status_t cohort_grouped_allreduce(cohort_runtime_t* runtime, size_t count, const char* const* names,
                                                    DLTensor* const* inputs, DLTensor* const* outputs,
                                                    const cohort_allreduce_options_t* options);

/**
 * @brief Submits a broadcast of @p root's tensor to every rank. Collective (by name).
 * @param runtime The runtime.
 * @param name The collective's name.
 * @param input The root's values; on other ranks the receive buffer when @p output is NULL.
 * @param output NULL (or @p input) to receive in place; otherwise receives the values
 *   on every rank (root included), same shape and dtype as @p input.
 * @param root The sending rank, 0..size-1, the same on every rank.
 * @param[out] out The request, owned by the caller.
 */
COHORT_API cohort_status_t cohort_broadcast_async(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                                  DLTensor* output, int root, cohort_request_t** out);

/**
 * @brief Blocking broadcast.
 * @param runtime, name, input, output, root As cohort_broadcast_async().
 */
COHORT_API cohort_status_t cohort_broadcast(cohort_runtime_t* runtime, const char* name, DLTensor* input,
                                            DLTensor* output, int root);

/**
 * @brief Submits an allgather: every rank's tensor concatenated along the first
 *        dimension, in rank order. The first dimension may differ per rank; the
 *        others and the dtype must agree. Collective (by name).
 * @param runtime The runtime.
 * @param name The collective's name.
 * @param input At least one dimension (borrowed until completion).
 * @param[out] out The request; the result comes from cohort_request_output().
 */
COHORT_API cohort_status_t cohort_allgather_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                  cohort_request_t** out);

/**
 * @brief Blocking allgather.
 * @param runtime, name, input As cohort_allgather_async().
 * @param[out] result A new tensor owned by the caller, who calls its deleter once.
 */
COHORT_API cohort_status_t cohort_allgather(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                            DLManagedTensor** result);

/**
 * @brief Submits an alltoall: rows [sum(send_splits[0..r-1]), +send_splits[r]) of the
 *        first dimension go to rank r; the result holds the rows received from each
 *        rank in rank order. Collective (by name).
 * @param runtime The runtime.
 * @param name The collective's name.
 * @param input At least one dimension (borrowed until completion).
 * @param send_splits NULL for equal parts (the first dimension must divide by the
 *   number of ranks), else one row count per rank, summing to the first dimension; copied.
 * @param num_send_splits Entries of @p send_splits: the number of ranks (0 with NULL).
 * @param[out] out The request; results from cohort_request_output() and
 *   cohort_request_recv_splits().
 * @return ::COHORT_ERR_INVALID_ARGUMENT when @p num_send_splits is not the number of
 *   ranks, besides the errors of cohort_allreduce_async().
 */
COHORT_API cohort_status_t cohort_alltoallv_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                  const int64_t* send_splits, size_t num_send_splits,
                                                  cohort_request_t** out);

/**
 * @brief Blocking alltoall.
 * @param runtime, name, input, send_splits, num_send_splits As cohort_alltoallv_async().
 * @param[out] result A new tensor owned by the caller.
 * @param[out] recv_splits NULL, or room for @p num_recv_splits counts: rows received
 *   from each rank.
 * @param num_recv_splits At least the number of ranks when @p recv_splits is not NULL.
 */
COHORT_API cohort_status_t cohort_alltoallv(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                            const int64_t* send_splits, size_t num_send_splits,
                                            DLManagedTensor** result, int64_t* recv_splits, size_t num_recv_splits);

/**
 * @brief Deprecated: cohort_alltoallv_async() with the number of ranks as the length of
 *        @p splits, which this call has to trust. Removed after the next minor version.
 */
COHORT_API COHORT_DEPRECATED(cohort_alltoallv_async) cohort_status_t
    cohort_alltoall_async(cohort_runtime_t* runtime, const char* name, const DLTensor* input, const int64_t* splits,
                          cohort_request_t** out);

/**
 * @brief Deprecated: cohort_alltoallv() with the number of ranks as the length of
 *        @p splits and @p recv_splits, which this call has to trust. Removed after the
 *        next minor version.
 */
COHORT_API COHORT_DEPRECATED(cohort_alltoallv) cohort_status_t
    cohort_alltoall(cohort_runtime_t* runtime, const char* name, const DLTensor* input, const int64_t* splits,
                    DLManagedTensor** result, int64_t* recv_splits);

/**
 * @brief Submits a reducescatter: the element-wise reduction of every rank's tensor,
 *        of which rank r keeps a block of rows of the first dimension (the first
 *        `rows % size` ranks get one row more). Collective (by name).
 * @param runtime The runtime.
 * @param name The collective's name.
 * @param input Same shape on every rank, at least one dimension.
 * @param op The reduction, the same on every rank.
 * @param[out] out The request; the block comes from cohort_request_output().
 */
COHORT_API cohort_status_t cohort_reducescatter_async(cohort_runtime_t* runtime, const char* name,
                                                      const DLTensor* input, cohort_reduce_op_t op,
                                                      cohort_request_t** out);

/**
 * @brief Blocking reducescatter.
 * @param runtime, name, input, op As cohort_reducescatter_async().
 * @param[out] result A new tensor owned by the caller.
 */
COHORT_API cohort_status_t cohort_reducescatter(cohort_runtime_t* runtime, const char* name, const DLTensor* input,
                                                cohort_reduce_op_t op, DLManagedTensor** result);

/**
 * @brief Submits a barrier through the engine (ordered with the other collectives).
 *        Collective: every rank calls it the same number of times.
 * @param runtime The runtime.
 * @param[out] out The request, owned by the caller.
 */
COHORT_API cohort_status_t cohort_barrier_async(cohort_runtime_t* runtime, cohort_request_t** out);

/**
 * @brief Blocking engine barrier.
 * @param runtime The runtime.
 */
COHORT_API cohort_status_t cohort_barrier(cohort_runtime_t* runtime);

/**
 * @brief Declares that this rank has no more data (uneven steps per rank). Until every
 *        rank has joined, this rank takes part in the others' collectives without data
 *        of its own, so the ranks that still have data go on:
 *        - allreduce: it contributes zeros (so min, max and product see a zero, and an
 *          average still divides by every rank);
 *        - allgather: it contributes no rows;
 *        - broadcast: it receives nothing, the others still get the root's data; a
 *          broadcast whose root has joined fails on every rank that submitted it with
 *          ::COHORT_ERR_MISMATCH, naming the tensor and the root;
 *        - reducescatter: it contributes zeros;
 *        - alltoall: it sends and receives zero-size blocks: the others receive zero
 *          rows from it (recv split 0), and the rows they address to it are dropped;
 *        - barrier: it counts as arrived.
 *
 *        Completes on every rank when every rank has joined; barrier numbering then
 *        starts afresh on every rank. Collective.
 * @param runtime The runtime.
 * @param[out] out The request; cohort_request_last_joined() gives the last rank to join.
 */
COHORT_API cohort_status_t cohort_join_async(cohort_runtime_t* runtime, cohort_request_t** out);

/**
 * @brief Blocking join.
 * @param runtime The runtime.
 * @param[out] last_rank NULL, or receives the rank that joined last.
 */
COHORT_API cohort_status_t cohort_join(cohort_runtime_t* runtime, int* last_rank);

/**
 * @brief Whether the request has completed, without blocking.
 * @param request The request.
 * @param[out] done 1 when completed (successfully or not), else 0.
 * @return ::COHORT_OK when @p done was set (the collective's own result comes from
 *   cohort_request_wait(), which then returns at once).
 */
COHORT_API cohort_status_t cohort_request_test(cohort_request_t* request, int* done);

/**
 * @brief Blocks until the request completes and returns its result.
 * @param request The request.
 * @return ::COHORT_OK, or the collective's error (::COHORT_ERR_MISMATCH,
 *   ::COHORT_ERR_STALLED, ::COHORT_ERR_CANCELLED at shutdown, ::COHORT_ERR_PEER_SHUTDOWN
 *   when another rank shut down without submitting it, ::COHORT_ERR_PEER_LOST, ...)
 *   with the message in cohort_last_error().
 */
COHORT_API cohort_status_t cohort_request_wait(cohort_request_t* request);

/**
 * @brief The result tensor of a completed allgather, alltoall or reducescatter.
 * @param request A completed, successful request.
 * @param[out] result A new tensor owned by the caller, who calls its deleter once; it
 *   stays valid after the request is destroyed. A device result (kDLCUDA) is memory of
 *   the runtime's cache on the NCCL stream: its deleter gives it back for the next
 *   device collectives, which do not wait for the caller's streams, so call it only
 *   once the GPU work that reads the result is complete (that stream synchronised), as
 *   for an input.
 * @return ::COHORT_ERR_INVALID_STATE if the request has not completed or has no result.
 */
COHORT_API cohort_status_t cohort_request_output(cohort_request_t* request, DLManagedTensor** result);

/**
 * @brief Rows received from each rank by a completed alltoall.
 * @param request A completed alltoall request.
 * @param[out] splits Room for @p count values.
 * @param count At least the number of ranks.
 */
COHORT_API cohort_status_t cohort_request_recv_splits(cohort_request_t* request, int64_t* splits, size_t count);

/**
 * @brief The rank that joined last, for a completed join request.
 * @param request A completed join request.
 * @param[out] last_rank Receives the rank.
 */
COHORT_API cohort_status_t cohort_request_last_joined(cohort_request_t* request, int* last_rank);

/**
 * @brief Releases a request. NULL is a no-op. Not collective.
 *
 * An unfinished request is waited for first, because the engine still uses the
 * caller's tensors, but never for longer than the option `request_destroy_wait_s`
 * (default 10 s) of the request's runtime: a collective that some rank never submits
 * cannot hang the destroy. Past that bound the handle is released with a warning in
 * the log, and the collective stays pending: the caller must keep its tensors alive
 * until it completes on every rank or until cohort_runtime_destroy(), which cancels
 * it. After cohort_runtime_destroy() every request has completed (cancelled if it was
 * still pending), so destroying it returns at once.
 * @param request The request (invalid afterwards).
 */
COHORT_API void cohort_request_destroy(cohort_request_t* request);

#ifdef __cplusplus
}
#endif

#endif /* COHORT_COLLECTIVES_H */
