#include "runtime/runtime.h"

#include <type_traits>

#include "core/threads.h"
#include "handles.h"
#include "runtime/mpi_process.h"
#include "shim.h"
#include "structs.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {
// The runtime behind a handle, const as the handle is.
template <typename Handle>
auto& live(Handle* rt) {
  need(rt, "runtime");
  mpi_process::check_not_poisoned();
  using R = std::conditional_t<std::is_const_v<Handle>, const Runtime, Runtime>;
  return static_cast<R&>(*rt->runtime);
}
}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_runtime_create(const cohort_config_t* config, cohort_runtime_t** out) {
  return guard("cohort_runtime_create", [&] {
    need(out, "out");
    *out = nullptr;
    Config cfg = config ? config->config : Config{};
    auto handle = std::make_unique<cohort_runtime_t>();
    handle->runtime = std::make_shared<Runtime>(cfg);
    *out = handle.release();
  });
}

COHORT_API void cohort_runtime_destroy(cohort_runtime_t* runtime) {
  if (!runtime) return;
  try {
    // Collective, here and now: the objects made from the runtime that are still alive
    // only free memory when they go.
    runtime->runtime->shutdown();
  } catch (...) {
    // Destruction never throws across the boundary.
  }
  delete runtime;
}

COHORT_API cohort_status_t cohort_runtime_info(const cohort_runtime_t* runtime, cohort_runtime_info_t* info) {
  return guard("cohort_runtime_info", [&] {
    capi::check_struct_size<cohort_runtime_info_t>(need(info, "info")->struct_size, "info");
    const Runtime& rt = live(runtime);
    cohort_runtime_info_t full{};
    const RankLayout& l = rt.layout();
    full.rank = l.rank;
    full.size = l.size;
    full.local_rank = l.local_rank;
    full.local_size = l.local_size;
    full.cross_rank = l.cross_rank;
    full.cross_size = l.cross_size;
    full.thread_budget = rt.thread_budget();
    full.device_type = rt.device().kind == Device::Kind::kCuda ? COHORT_DEVICE_CUDA : COHORT_DEVICE_CPU;
    full.device_id = rt.device().kind == Device::Kind::kCuda ? rt.device().id : -1;
    full.cuda_device_count = rt.cuda_device_count();
    full.mpi_thread_level = mpi_process::thread_level();
    full.collective_device_id = rt.collective_gpu();
    capi::write_out(info, full, "info");
  });
}

COHORT_API cohort_status_t cohort_runtime_cpu_times(const cohort_runtime_t* runtime, cohort_cpu_times_t* times) {
  return guard("cohort_runtime_cpu_times", [&] {
    capi::check_struct_size<cohort_cpu_times_t>(need(times, "times")->struct_size, "times");
    const Runtime& rt = live(runtime);
    cohort_cpu_times_t full{};
    full.engine_s = rt.engine_cpu_seconds();
    full.calling_thread_s = thread_cpu_seconds();
    full.process_s = process_cpu_seconds();  // last: it holds the two above
    capi::write_out(times, full, "times");
  });
}

COHORT_API cohort_status_t cohort_runtime_engine_stats(const cohort_runtime_t* runtime, cohort_engine_stats_t* stats) {
  return guard("cohort_runtime_engine_stats", [&] {
    capi::check_struct_size<cohort_engine_stats_t>(need(stats, "stats")->struct_size, "stats");
    const comm::EngineStats e = live(runtime).engine_stats();
    cohort_engine_stats_t full{};
    full.cycles = e.cycles;
    full.full_exchanges = e.full_exchanges;
    full.cache_hits = e.cache_hits;
    full.fused_batches = e.fused_batches;
    full.completed = e.completed;
    full.held = e.held;
    capi::write_out(stats, full, "stats");
  });
}

COHORT_API cohort_status_t cohort_runtime_memory_stats(const cohort_runtime_t* runtime, cohort_memory_stats_t* stats) {
  return guard("cohort_runtime_memory_stats", [&] {
    capi::check_struct_size<cohort_memory_stats_t>(need(stats, "stats")->struct_size, "stats");
    const Runtime& rt = live(runtime);
    const MemoryStats m = rt.memory().stats_of(rt.device());
    cohort_memory_stats_t full{};
    full.device_id = rt.device().kind == Device::Kind::kCuda ? rt.device().id : -1;
    full.in_use_bytes = m.in_use;
    full.reserved_bytes = m.reserved;
    full.peak_in_use_bytes = m.peak_in_use;
    full.peak_reserved_bytes = m.peak_reserved;
    full.requests = m.requests;
    full.cache_hits = m.cache_hits;
    full.device_allocations = m.device_allocations;
    full.device_frees = m.device_frees;
    capi::write_out(stats, full, "stats");
  });
}

COHORT_API cohort_status_t cohort_runtime_empty_cache(cohort_runtime_t* runtime) {
  return guard("cohort_runtime_empty_cache", [&] { live(runtime).memory().empty_caches(); });
}

COHORT_API cohort_status_t cohort_runtime_rank(const cohort_runtime_t* runtime, int* rank) {
  return guard("cohort_runtime_rank", [&] { *need(rank, "rank") = live(runtime).rank(); });
}

COHORT_API cohort_status_t cohort_runtime_size(const cohort_runtime_t* runtime, int* size) {
  return guard("cohort_runtime_size", [&] { *need(size, "size") = live(runtime).size(); });
}

COHORT_API cohort_status_t cohort_runtime_device(const cohort_runtime_t* runtime, char* buffer, size_t size,
                                                 size_t* needed) {
  return guard("cohort_runtime_device",
               [&] { capi::copy_out(live(runtime).device().to_string(), buffer, size, needed); });
}

COHORT_API cohort_status_t cohort_runtime_config(const cohort_runtime_t* runtime, cohort_config_t** out) {
  return guard("cohort_runtime_config", [&] {
    need(out, "out");
    *out = new cohort_config_t{live(runtime).config()};
  });
}

COHORT_API cohort_status_t cohort_runtime_barrier(cohort_runtime_t* runtime) {
  return guard("cohort_runtime_barrier", [&] {
    need(runtime, "runtime");
    runtime->runtime->barrier();
  });
}

}  // extern "C"
