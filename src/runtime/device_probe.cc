#include "runtime/device_probe.h"

#include <atomic>

#include "core/status.h"

#if COHORT_HAVE_CUDA
#  include <cuda_runtime_api.h>
#endif

namespace cohort {
namespace {
std::atomic<int> g_fake_device_count{-1};  // test hook only; -1: probe for real
constexpr const char* kNoDevice = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
}  // namespace

void fake_cuda_devices_for_testing(int count) { g_fake_device_count = count < 0 ? -1 : count; }

CudaProbe probe_cuda() {
  CudaProbe probe;
  if (int fake = g_fake_device_count; fake >= 0) {
    probe.device_count = fake;
    if (fake == 0) probe.why = kNoDevice;
    return probe;
  }
#if COHORT_HAVE_CUDA
  int count = 0;  // cudaGetDeviceCount leaves it untouched when it fails
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    probe.why = cat("cudaGetDeviceCount: ", cudaGetErrorString(err), " (error ", int(err), ")");
    cudaGetLastError();  // clear the sticky error for later calls
    return probe;
  }
  probe.device_count = count;
  if (count == 0) probe.why = kNoDevice;
#else
  probe.why = "this build of cohort has no CUDA backend";
#endif
  return probe;
}

void select_cuda_device(int device) {
  if (int fake = g_fake_device_count; fake >= 0) {
    require(device >= 0 && device < fake, "cannot select CUDA device ", device, ": ", fake, " fake devices");
    return;
  }
#if COHORT_HAVE_CUDA
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess)
    fail(Code::kCuda, "cudaSetDevice(", device, "): ", cudaGetErrorString(err),
         "; check CUDA_VISIBLE_DEVICES and that each rank has its own GPU");
#else
  fail(Code::kUnsupported, "cannot select CUDA device ", device, ": this build of cohort has no CUDA backend");
#endif
}

std::string cuda_device_identity(int device) {
  if (g_fake_device_count >= 0) return cat("fake-gpu:", device);
#if COHORT_HAVE_CUDA
  char id[64] = {0};
  cudaError_t err = cudaDeviceGetPCIBusId(id, sizeof id, device);
  if (err != cudaSuccess) fail(Code::kCuda, "cudaDeviceGetPCIBusId(", device, "): ", cudaGetErrorString(err));
  return id;
#else
  fail(Code::kUnsupported, "CUDA device ", device, ": this build of cohort has no CUDA backend");
#endif
}

}  // namespace cohort
