// The public structs that start with struct_size, field by field, so the shim keeps
// one promise for all of them: a caller's struct_size may be that of any version of
// the struct (today's or an older, smaller one), and fields beyond it are neither read
// nor written. A size that holds no field, cuts a field in two or is larger than this
// library knows is an error that consumes nothing.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>

#include "cohort/cohort.h"
#include "core/status.h"

namespace cohort::capi {

struct Field {
  size_t offset, size, align;
};

#define COHORT_FIELD(T, m) \
  ::cohort::capi::Field { offsetof(T, m), sizeof(T::m), alignof(decltype(T::m)) }

// Specialised below for every public struct with a struct_size: its fields after
// struct_size, in order.
template <typename T>
struct Fields;

#define COHORT_STRUCT_FIELDS(T, ...)                      \
  template <>                                             \
  struct Fields<T> {                                      \
    static constexpr const char* type = #T;               \
    static constexpr auto list = std::array{__VA_ARGS__}; \
  };                                                      \
  static_assert(covers<T>(), #T ": its field list in structs.h misses a field")

// True when the list names every field: each starts where the previous one ends
// (after alignment), and the last one ends the struct (after alignment).
template <typename T>
constexpr bool covers() {
  auto round_up = [](size_t n, size_t a) { return (n + a - 1) / a * a; };
  size_t end = sizeof(size_t);
  for (const Field& f : Fields<T>::list) {
    if (f.offset != round_up(end, f.align)) return false;
    end = f.offset + f.size;
  }
  return round_up(end, alignof(T)) == sizeof(T);
}

COHORT_STRUCT_FIELDS(cohort_runtime_info_t, COHORT_FIELD(cohort_runtime_info_t, rank),
                     COHORT_FIELD(cohort_runtime_info_t, size), COHORT_FIELD(cohort_runtime_info_t, local_rank),
                     COHORT_FIELD(cohort_runtime_info_t, local_size), COHORT_FIELD(cohort_runtime_info_t, cross_rank),
                     COHORT_FIELD(cohort_runtime_info_t, cross_size),
                     COHORT_FIELD(cohort_runtime_info_t, thread_budget),
                     COHORT_FIELD(cohort_runtime_info_t, device_type), COHORT_FIELD(cohort_runtime_info_t, device_id),
                     COHORT_FIELD(cohort_runtime_info_t, cuda_device_count),
                     COHORT_FIELD(cohort_runtime_info_t, mpi_thread_level),
                     COHORT_FIELD(cohort_runtime_info_t, collective_device_id));
COHORT_STRUCT_FIELDS(cohort_option_info_t, COHORT_FIELD(cohort_option_info_t, name),
                     COHORT_FIELD(cohort_option_info_t, type), COHORT_FIELD(cohort_option_info_t, default_value),
                     COHORT_FIELD(cohort_option_info_t, min), COHORT_FIELD(cohort_option_info_t, max),
                     COHORT_FIELD(cohort_option_info_t, choices), COHORT_FIELD(cohort_option_info_t, group),
                     COHORT_FIELD(cohort_option_info_t, help));
COHORT_STRUCT_FIELDS(cohort_build_info_t, COHORT_FIELD(cohort_build_info_t, cohort_version),
                     COHORT_FIELD(cohort_build_info_t, mpi_library), COHORT_FIELD(cohort_build_info_t, mpi_version),
                     COHORT_FIELD(cohort_build_info_t, mpi_subversion), COHORT_FIELD(cohort_build_info_t, cuda_built),
                     COHORT_FIELD(cohort_build_info_t, cuda_runtime), COHORT_FIELD(cohort_build_info_t, cuda_driver),
                     COHORT_FIELD(cohort_build_info_t, cudnn), COHORT_FIELD(cohort_build_info_t, nccl),
                     COHORT_FIELD(cohort_build_info_t, dnnl), COHORT_FIELD(cohort_build_info_t, dnnl_cpu_runtime),
                     COHORT_FIELD(cohort_build_info_t, jpeg_turbo), COHORT_FIELD(cohort_build_info_t, gpu_count),
                     COHORT_FIELD(cohort_build_info_t, gpu_note), COHORT_FIELD(cohort_build_info_t, cuda_trains));
COHORT_STRUCT_FIELDS(cohort_gpu_info_t, COHORT_FIELD(cohort_gpu_info_t, name),
                     COHORT_FIELD(cohort_gpu_info_t, pci_bus_id), COHORT_FIELD(cohort_gpu_info_t, total_memory),
                     COHORT_FIELD(cohort_gpu_info_t, compute_major), COHORT_FIELD(cohort_gpu_info_t, compute_minor),
                     COHORT_FIELD(cohort_gpu_info_t, multiprocessors));
COHORT_STRUCT_FIELDS(cohort_allreduce_options_t, COHORT_FIELD(cohort_allreduce_options_t, op),
                     COHORT_FIELD(cohort_allreduce_options_t, prescale),
                     COHORT_FIELD(cohort_allreduce_options_t, postscale));
COHORT_STRUCT_FIELDS(cohort_batch_t, COHORT_FIELD(cohort_batch_t, images), COHORT_FIELD(cohort_batch_t, labels),
                     COHORT_FIELD(cohort_batch_t, valid_mask), COHORT_FIELD(cohort_batch_t, valid),
                     COHORT_FIELD(cohort_batch_t, epoch), COHORT_FIELD(cohort_batch_t, step));
COHORT_STRUCT_FIELDS(cohort_pipeline_info_t, COHORT_FIELD(cohort_pipeline_info_t, dataset_size),
                     COHORT_FIELD(cohort_pipeline_info_t, steps_per_epoch),
                     COHORT_FIELD(cohort_pipeline_info_t, samples_per_epoch),
                     COHORT_FIELD(cohort_pipeline_info_t, batch_size),
                     COHORT_FIELD(cohort_pipeline_info_t, num_classes), COHORT_FIELD(cohort_pipeline_info_t, channels),
                     COHORT_FIELD(cohort_pipeline_info_t, height), COHORT_FIELD(cohort_pipeline_info_t, width),
                     COHORT_FIELD(cohort_pipeline_info_t, reader_threads),
                     COHORT_FIELD(cohort_pipeline_info_t, decode_threads),
                     COHORT_FIELD(cohort_pipeline_info_t, prefetch_depth));
COHORT_STRUCT_FIELDS(
    cohort_pipeline_stats_t, COHORT_FIELD(cohort_pipeline_stats_t, batches),
    COHORT_FIELD(cohort_pipeline_stats_t, images), COHORT_FIELD(cohort_pipeline_stats_t, decoded),
    COHORT_FIELD(cohort_pipeline_stats_t, errors), COHORT_FIELD(cohort_pipeline_stats_t, padded),
    COHORT_FIELD(cohort_pipeline_stats_t, read_busy_s), COHORT_FIELD(cohort_pipeline_stats_t, decode_busy_s),
    COHORT_FIELD(cohort_pipeline_stats_t, wait_s), COHORT_FIELD(cohort_pipeline_stats_t, elapsed_s),
    COHORT_FIELD(cohort_pipeline_stats_t, images_per_sec), COHORT_FIELD(cohort_pipeline_stats_t, wait_fraction),
    COHORT_FIELD(cohort_pipeline_stats_t, mean_ready_batches), COHORT_FIELD(cohort_pipeline_stats_t, mean_decode_queue),
    COHORT_FIELD(cohort_pipeline_stats_t, skipped), COHORT_FIELD(cohort_pipeline_stats_t, read_cpu_s),
    COHORT_FIELD(cohort_pipeline_stats_t, decode_cpu_s), COHORT_FIELD(cohort_pipeline_stats_t, augment_cpu_s),
    COHORT_FIELD(cohort_pipeline_stats_t, assemble_cpu_s), COHORT_FIELD(cohort_pipeline_stats_t, bytes_read),
    COHORT_FIELD(cohort_pipeline_stats_t, limiting_stage));
COHORT_STRUCT_FIELDS(cohort_train_stats_t, COHORT_FIELD(cohort_train_stats_t, loss),
                     COHORT_FIELD(cohort_train_stats_t, lr), COHORT_FIELD(cohort_train_stats_t, images),
                     COHORT_FIELD(cohort_train_stats_t, valid), COHORT_FIELD(cohort_train_stats_t, step),
                     COHORT_FIELD(cohort_train_stats_t, updated), COHORT_FIELD(cohort_train_stats_t, compute_s),
                     COHORT_FIELD(cohort_train_stats_t, comm_wait_s), COHORT_FIELD(cohort_train_stats_t, update_s),
                     COHORT_FIELD(cohort_train_stats_t, total_s));
COHORT_STRUCT_FIELDS(cohort_eval_result_t, COHORT_FIELD(cohort_eval_result_t, samples),
                     COHORT_FIELD(cohort_eval_result_t, top1), COHORT_FIELD(cohort_eval_result_t, top5),
                     COHORT_FIELD(cohort_eval_result_t, loss));
COHORT_STRUCT_FIELDS(cohort_checkpoint_info_t, COHORT_FIELD(cohort_checkpoint_info_t, epoch),
                     COHORT_FIELD(cohort_checkpoint_info_t, step),
                     COHORT_FIELD(cohort_checkpoint_info_t, pipeline_epoch),
                     COHORT_FIELD(cohort_checkpoint_info_t, pipeline_step),
                     COHORT_FIELD(cohort_checkpoint_info_t, ranks));
COHORT_STRUCT_FIELDS(cohort_rate_summary_t, COHORT_FIELD(cohort_rate_summary_t, count),
                     COHORT_FIELD(cohort_rate_summary_t, median), COHORT_FIELD(cohort_rate_summary_t, mean),
                     COHORT_FIELD(cohort_rate_summary_t, std_error), COHORT_FIELD(cohort_rate_summary_t, jitter),
                     COHORT_FIELD(cohort_rate_summary_t, data_wait), COHORT_FIELD(cohort_rate_summary_t, comm_exposed),
                     COHORT_FIELD(cohort_rate_summary_t, compute));
COHORT_STRUCT_FIELDS(cohort_run_summary_t, COHORT_FIELD(cohort_run_summary_t, model),
                     COHORT_FIELD(cohort_run_summary_t, ranks), COHORT_FIELD(cohort_run_summary_t, local_ranks),
                     COHORT_FIELD(cohort_run_summary_t, device), COHORT_FIELD(cohort_run_summary_t, precision),
                     COHORT_FIELD(cohort_run_summary_t, data), COHORT_FIELD(cohort_run_summary_t, batch_per_rank),
                     COHORT_FIELD(cohort_run_summary_t, global_batch), COHORT_FIELD(cohort_run_summary_t, steps),
                     COHORT_FIELD(cohort_run_summary_t, warmup_steps),
                     COHORT_FIELD(cohort_run_summary_t, images_per_sec), COHORT_FIELD(cohort_run_summary_t, epochs),
                     COHORT_FIELD(cohort_run_summary_t, loss), COHORT_FIELD(cohort_run_summary_t, has_top1),
                     COHORT_FIELD(cohort_run_summary_t, top1), COHORT_FIELD(cohort_run_summary_t, top5),
                     COHORT_FIELD(cohort_run_summary_t, wall_s), COHORT_FIELD(cohort_run_summary_t, extra_json),
                     COHORT_FIELD(cohort_run_summary_t, variable_update), COHORT_FIELD(cohort_run_summary_t, workers),
                     COHORT_FIELD(cohort_run_summary_t, servers), COHORT_FIELD(cohort_run_summary_t, has_staleness),
                     COHORT_FIELD(cohort_run_summary_t, staleness_mean),
                     COHORT_FIELD(cohort_run_summary_t, staleness_max), COHORT_FIELD(cohort_run_summary_t, input),
                     COHORT_FIELD(cohort_run_summary_t, threads));
COHORT_STRUCT_FIELDS(cohort_thread_cpu_t, COHORT_FIELD(cohort_thread_cpu_t, compute),
                     COHORT_FIELD(cohort_thread_cpu_t, engine), COHORT_FIELD(cohort_thread_cpu_t, other),
                     COHORT_FIELD(cohort_thread_cpu_t, has_input), COHORT_FIELD(cohort_thread_cpu_t, readers),
                     COHORT_FIELD(cohort_thread_cpu_t, decoders),
                     COHORT_FIELD(cohort_thread_cpu_t, compute_spread_median),
                     COHORT_FIELD(cohort_thread_cpu_t, compute_spread_p90));
COHORT_STRUCT_FIELDS(cohort_cpu_times_t, COHORT_FIELD(cohort_cpu_times_t, process_s),
                     COHORT_FIELD(cohort_cpu_times_t, calling_thread_s), COHORT_FIELD(cohort_cpu_times_t, engine_s));
COHORT_STRUCT_FIELDS(cohort_engine_stats_t, COHORT_FIELD(cohort_engine_stats_t, cycles),
                     COHORT_FIELD(cohort_engine_stats_t, full_exchanges),
                     COHORT_FIELD(cohort_engine_stats_t, cache_hits),
                     COHORT_FIELD(cohort_engine_stats_t, fused_batches), COHORT_FIELD(cohort_engine_stats_t, completed),
                     COHORT_FIELD(cohort_engine_stats_t, held));
COHORT_STRUCT_FIELDS(cohort_memory_stats_t, COHORT_FIELD(cohort_memory_stats_t, device_id),
                     COHORT_FIELD(cohort_memory_stats_t, in_use_bytes),
                     COHORT_FIELD(cohort_memory_stats_t, reserved_bytes),
                     COHORT_FIELD(cohort_memory_stats_t, peak_in_use_bytes),
                     COHORT_FIELD(cohort_memory_stats_t, peak_reserved_bytes),
                     COHORT_FIELD(cohort_memory_stats_t, requests), COHORT_FIELD(cohort_memory_stats_t, cache_hits),
                     COHORT_FIELD(cohort_memory_stats_t, device_allocations),
                     COHORT_FIELD(cohort_memory_stats_t, device_frees));
COHORT_STRUCT_FIELDS(cohort_step_record_t, COHORT_FIELD(cohort_step_record_t, step),
                     COHORT_FIELD(cohort_step_record_t, epoch), COHORT_FIELD(cohort_step_record_t, loss),
                     COHORT_FIELD(cohort_step_record_t, lr), COHORT_FIELD(cohort_step_record_t, step_s),
                     COHORT_FIELD(cohort_step_record_t, data_wait_s),
                     COHORT_FIELD(cohort_step_record_t, comm_exposed_s), COHORT_FIELD(cohort_step_record_t, images));
COHORT_STRUCT_FIELDS(cohort_optimizer_info_t, COHORT_FIELD(cohort_optimizer_info_t, variable_update),
                     COHORT_FIELD(cohort_optimizer_info_t, worker), COHORT_FIELD(cohort_optimizer_info_t, server),
                     COHORT_FIELD(cohort_optimizer_info_t, workers), COHORT_FIELD(cohort_optimizer_info_t, servers),
                     COHORT_FIELD(cohort_optimizer_info_t, worker_index),
                     COHORT_FIELD(cohort_optimizer_info_t, updates),
                     COHORT_FIELD(cohort_optimizer_info_t, staleness_sum),
                     COHORT_FIELD(cohort_optimizer_info_t, staleness_max),
                     COHORT_FIELD(cohort_optimizer_info_t, lockstep));

// Throws kInvalidArgument naming `what` unless `size` is the size of some version of T.
template <typename T>
void check_struct_size(size_t size, const char* what) {
  const auto& list = Fields<T>::list;
  bool ok = size >= list.front().offset + list.front().size && size <= sizeof(T);
  for (const Field& f : list) ok = ok && (size <= f.offset || size >= f.offset + f.size);
  if (!ok)
    fail(Code::kInvalidArgument, what, "->struct_size is ", size, ", which is not the size of any version of ",
         Fields<T>::type, ": set it to sizeof(", Fields<T>::type, ") (", sizeof(T), " in this version of cohort)");
}

// The caller's struct (struct_size checked, NULL refused) over `defaults`: the fields
// beyond its size keep their defaults and are never read.
template <typename T>
T read_in(const T* in, T defaults, const char* what) {
  if (!in) fail(Code::kInvalidArgument, what, " is NULL");
  check_struct_size<T>(in->struct_size, what);
  std::memcpy(static_cast<void*>(&defaults), in, in->struct_size);
  return defaults;
}

// Writes `full` into the caller's struct up to its struct_size (checked first, so a bad
// size writes nothing); struct_size itself stays.
template <typename T>
void write_out(T* out, const T& full, const char* what) {
  if (!out) fail(Code::kInvalidArgument, what, " is NULL");
  check_struct_size<T>(out->struct_size, what);
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              out->struct_size - sizeof(size_t));
}

}  // namespace cohort::capi
