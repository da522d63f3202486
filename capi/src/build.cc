// cohort_build_info / cohort_build_gpu_info: what this build can do. Computed once per
// process (call_once) so the strings handed out can have static storage.
#include <mpi.h>

#include <cstdio>  // jpeglib.h needs FILE
#include <cstring>

#include <jpeglib.h>
#include <oneapi/dnnl/dnnl.h>

#include <mutex>
#include <string>
#include <vector>

#if COHORT_HAVE_CUDA
#  include <cuda_runtime_api.h>
#  include <cudnn.h>
#  include <nccl.h>
#endif

#include "backend/backend.h"
#include "core/status.h"
#include "core/strings.h"
#include "shim.h"
#include "structs.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

struct Gpu {
  std::string name;
  std::string pci_bus_id;
  uint64_t total_memory = 0;
  int major = 0, minor = 0, sms = 0;
};

struct BuildFacts {
  std::string mpi_library;
  int mpi_version = 0, mpi_subversion = 0;
  int cuda_built = 0;
  std::string cuda_runtime, cuda_driver, cudnn, nccl, dnnl, dnnl_cpu_runtime, jpeg_turbo, gpu_note;
  std::vector<Gpu> gpus;
};

const char* dnnl_runtime_name(unsigned runtime) {
  switch (runtime) {
    case DNNL_RUNTIME_SEQ:
      return "sequential";
    case DNNL_RUNTIME_OMP:
      return "OpenMP";
    case DNNL_RUNTIME_TBB:
      return "TBB";
    case DNNL_RUNTIME_THREADPOOL:
      return "threadpool";
    default:
      return "unknown";
  }
}

void ask_mpi(BuildFacts& f) {
  // Both calls are allowed before MPI_Init (MPI 3.0 §8.1.1).
  MPI_Get_version(&f.mpi_version, &f.mpi_subversion);
  std::vector<char> text(MPI_MAX_LIBRARY_VERSION_STRING + 1, '\0');
  int length = 0;
  if (MPI_Get_library_version(text.data(), &length) == MPI_SUCCESS) {
    std::string all(text.data(), static_cast<size_t>(length > 0 ? length : 0));
    f.mpi_library = all.substr(0, all.find('\n'));
    while (!f.mpi_library.empty() && (f.mpi_library.back() == ' ' || f.mpi_library.back() == '\0'))
      f.mpi_library.pop_back();
  }
}

#if COHORT_HAVE_CUDA
std::string major_minor(int v) {  // CUDA's 1000*major + 10*minor
  return v > 0 ? cat(v / 1000, ".", (v % 1000) / 10) : std::string();
}

void ask_cuda(BuildFacts& f) {
  f.cuda_built = 1;
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) f.cuda_runtime = major_minor(runtime);
  if (cudaDriverGetVersion(&driver) == cudaSuccess) f.cuda_driver = major_minor(driver);
  const size_t dnn = cudnnGetVersion();  // 91900 = 9.19.0 since cuDNN 9
  f.cudnn = cat(dnn / 10000, ".", (dnn % 10000) / 100, ".", dnn % 100);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // 22803 = 2.28.3 since NCCL 2.9
    f.nccl = cat(nccl / 10000, ".", (nccl % 10000) / 100, ".", nccl % 100);
  int count = 0;  // left untouched when the call fails (no driver)
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    f.gpu_note = cat("cudaGetDeviceCount: ", cudaGetErrorString(err), " (error ", static_cast<int>(err), ")");
    cudaGetLastError();
    return;
  }
  if (count == 0) f.gpu_note = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    Gpu g;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      g.name = prop.name;
      g.total_memory = prop.totalGlobalMem;
      g.major = prop.major;
      g.minor = prop.minor;
      g.sms = prop.multiProcessorCount;
    }
    char bus[64] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    f.gpus.push_back(std::move(g));
  }
}
#else
void ask_cuda(BuildFacts& f) { f.gpu_note = "this build has no CUDA backend"; }
#endif

const BuildFacts& facts() {
  static BuildFacts f;
  static std::once_flag once;
  std::call_once(once, [] {
    ask_mpi(f);
    ask_cuda(f);
    if (const dnnl_version_t* v = dnnl_version()) {
      f.dnnl = cat(v->major, ".", v->minor, ".", v->patch);
      f.dnnl_cpu_runtime = dnnl_runtime_name(v->cpu_runtime);
    }
    f.jpeg_turbo = cat(LIBJPEG_TURBO_VERSION_NUMBER / 1000000, ".", (LIBJPEG_TURBO_VERSION_NUMBER / 1000) % 1000, ".",
                       LIBJPEG_TURBO_VERSION_NUMBER % 1000);
  });
  return f;
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_build_info(cohort_build_info_t* info) {
  return guard("cohort_build_info", [&] {
    capi::check_struct_size<cohort_build_info_t>(need(info, "info")->struct_size, "info");
    const BuildFacts& f = facts();
    cohort_build_info_t full{};
    full.cohort_version = COHORT_VERSION_STRING;
    full.mpi_library = f.mpi_library.c_str();
    full.mpi_version = f.mpi_version;
    full.mpi_subversion = f.mpi_subversion;
    full.cuda_built = f.cuda_built;
    full.cuda_runtime = f.cuda_runtime.c_str();
    full.cuda_driver = f.cuda_driver.c_str();
    full.cudnn = f.cudnn.c_str();
    full.nccl = f.nccl.c_str();
    full.dnnl = f.dnnl.c_str();
    full.dnnl_cpu_runtime = f.dnnl_cpu_runtime.c_str();
    full.jpeg_turbo = f.jpeg_turbo.c_str();
    full.gpu_count = static_cast<int>(f.gpus.size());
    full.gpu_note = f.gpu_note.c_str();
    full.cuda_trains = backend::cuda_backend_trains() ? 1 : 0;
    capi::write_out(info, full, "info");  // an older caller's smaller struct gets its prefix
  });
}

COHORT_API cohort_status_t cohort_build_gpu_info(int index, cohort_gpu_info_t* info) {
  return guard("cohort_build_gpu_info", [&] {
    capi::check_struct_size<cohort_gpu_info_t>(need(info, "info")->struct_size, "info");
    const BuildFacts& f = facts();
    require(index >= 0 && static_cast<size_t>(index) < f.gpus.size(), "GPU index ", index,
            " is out of range: this process sees ", f.gpus.size(), " GPU(s)");
    const Gpu& g = f.gpus[static_cast<size_t>(index)];
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
