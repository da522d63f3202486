// What cohort-bandwidth and cohort-topo share: the GPUs the CUDA runtime sees, and why
// it sees none, in the words `cohortrun --check-build` uses.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <cohort/cohort.h>

namespace gpu_tools {

// Number of GPUs the CUDA runtime sees; 0 with *why saying why (the CUDA error and what
// usually causes it).
inline int visible_gpus(std::string* why) {
  int count = 0;  // cudaGetDeviceCount leaves it untouched when it fails
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return count;
  if (err == cudaSuccess) {
    *why = "the CUDA runtime sees 0 GPUs";
  } else {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (error " +
           std::to_string(static_cast<int>(err)) + ")";
    cudaGetLastError();  // clear the error for later calls
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (err == cudaErrorInsufficientDriver)
    *why += ": no NVIDIA driver is loaded, or it is older than this CUDA runtime needs";
  else if (visible)
    *why += std::string(": CUDA_VISIBLE_DEVICES='") + visible + "' hides the others";
  return 0;
}

// "cohort 0.1.0, CUDA runtime 13.0, driver 13.0" (driver "none" without one).
inline std::string versions() {
  cohort_build_info_t info{};
  info.struct_size = sizeof info;
  if (cohort_build_info(&info) != COHORT_OK) return std::string("cohort ") + cohort_version_string();
  std::string driver = info.cuda_driver && *info.cuda_driver ? info.cuda_driver : "none";
  return std::string("cohort ") + info.cohort_version + ", CUDA runtime " + info.cuda_runtime + ", driver " + driver;
}

// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, PCI 0000:17:00.0"; *bus_id gets the PCI id.
inline std::string describe_gpu(int device, std::string* bus_id = nullptr) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "(cudaGetDeviceProperties failed)";
  }
  char bus[32] = "";
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) cudaGetLastError();
  if (bus_id) *bus_id = bus;
  char text[512];
  std::snprintf(text, sizeof text, "%s, sm_%d%d, %d SMs, %.1f GiB, PCI %s", p.name, p.major, p.minor,
                p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1ull << 30), bus);
  return text;
}

}  // namespace gpu_tools
