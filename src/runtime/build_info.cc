#include "runtime/build_info.h"

#include <mpi.h>

#include <cstdio>  // jpeglib.h needs FILE

#include <jpeglib.h>
#include <oneapi/dnnl/dnnl.h>

#include <mutex>

#if COHORT_HAVE_CUDA
#  include <cuda_runtime_api.h>
#  include <cudnn.h>
#  include <nccl.h>
#endif

#include "backend/backend.h"
#include "core/status.h"
#include "runtime/device_probe.h"

namespace cohort {
namespace {

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
  f.cuda_built = true;
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) f.cuda_runtime = major_minor(runtime);
  if (cudaDriverGetVersion(&driver) == cudaSuccess) f.cuda_driver = major_minor(driver);
  const size_t dnn = cudnnGetVersion();  // 91900 = 9.19.0 since cuDNN 9
  f.cudnn = cat(dnn / 10000, ".", (dnn % 10000) / 100, ".", dnn % 100);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)  // 22803 = 2.28.3 since NCCL 2.9
    f.nccl = cat(nccl / 10000, ".", (nccl % 10000) / 100, ".", nccl % 100);
  const CudaProbe probe = probe_cuda();  // the count the runtime's device choice sees
  f.gpu_note = probe.why;
  for (int i = 0; i < probe.device_count; ++i) {
    cudaDeviceProp prop{};
    GpuFacts g;
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
void ask_cuda(BuildFacts& f) { f.gpu_note = probe_cuda().why; }
#endif

}  // namespace

const BuildFacts& build_facts() {
  static BuildFacts f;
  static std::once_flag once;
  std::call_once(once, [] {
    ask_mpi(f);
    ask_cuda(f);
    f.cuda_trains = backend::cuda_backend_trains();
    if (const dnnl_version_t* v = dnnl_version()) {
      f.dnnl = cat(v->major, ".", v->minor, ".", v->patch);
      f.dnnl_cpu_runtime = dnnl_runtime_name(v->cpu_runtime);
    }
    f.jpeg_turbo = cat(LIBJPEG_TURBO_VERSION_NUMBER / 1000000, ".", (LIBJPEG_TURBO_VERSION_NUMBER / 1000) % 1000, ".",
                       LIBJPEG_TURBO_VERSION_NUMBER % 1000);
  });
  return f;
}

}  // namespace cohort
