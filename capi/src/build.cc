// cohort_build_info / cohort_build_gpu_info: what this build can do (runtime/build_info.h).
#include "runtime/build_info.h"

#include "core/status.h"
#include "shim.h"
#include "structs.h"

using namespace cohort;
using capi::guard;
using capi::need;

extern "C" {

COHORT_API cohort_status_t cohort_build_info(cohort_build_info_t* info) {
  return guard("cohort_build_info", [&] {
    capi::check_struct_size<cohort_build_info_t>(need(info, "info")->struct_size, "info");
    const BuildFacts& f = build_facts();
    cohort_build_info_t full{};
    full.cohort_version = COHORT_VERSION_STRING;
    full.mpi_library = f.mpi_library.c_str();
    full.mpi_version = f.mpi_version;
    full.mpi_subversion = f.mpi_subversion;
    full.cuda_built = f.cuda_built ? 1 : 0;
    full.cuda_runtime = f.cuda_runtime.c_str();
    full.cuda_driver = f.cuda_driver.c_str();
    full.cudnn = f.cudnn.c_str();
    full.nccl = f.nccl.c_str();
    full.dnnl = f.dnnl.c_str();
    full.dnnl_cpu_runtime = f.dnnl_cpu_runtime.c_str();
    full.jpeg_turbo = f.jpeg_turbo.c_str();
    full.gpu_count = static_cast<int>(f.gpus.size());
    full.gpu_note = f.gpu_note.c_str();
    full.cuda_trains = f.cuda_trains ? 1 : 0;
    capi::write_out(info, full, "info");  // an older caller's smaller struct gets its prefix
  });
}

COHORT_API cohort_status_t cohort_build_gpu_info(int index, cohort_gpu_info_t* info) {
  return guard("cohort_build_gpu_info", [&] {
    capi::check_struct_size<cohort_gpu_info_t>(need(info, "info")->struct_size, "info");
    const BuildFacts& f = build_facts();
    require(index >= 0 && static_cast<size_t>(index) < f.gpus.size(), "GPU index ", index,
            " is out of range: this process sees ", f.gpus.size(), " GPU(s)");
    const GpuFacts& g = f.gpus[static_cast<size_t>(index)];
    cohort_gpu_info_t full{};
    full.name = g.name.c_str();
    full.pci_bus_id = g.pci_bus_id.c_str();
    full.total_memory = g.total_memory;
    full.compute_major = g.major;
    full.compute_minor = g.minor;
    full.multiprocessors = g.sms;
    capi::write_out(info, full, "info");
  });
}

}  // extern "C"
