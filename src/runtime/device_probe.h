// What compute devices this process can see. Without a CUDA build, or without a GPU
// (cudaGetDeviceCount fails with error 35 where the toolkit is installed but no
// driver is), the count is 0 and `why` says so.
#pragma once

#include <string>

namespace cohort {

struct CudaProbe {
  int device_count = 0;
  std::string why;  // why the count is 0, for the log ("cudaGetDeviceCount: ...")
};

CudaProbe probe_cuda();

// Makes `device` current on the calling thread (CUDA builds); throws kCuda on failure.
void select_cuda_device(int device);

// What tells `device` apart from the other GPUs of the machine: its PCI bus id
// ("0000:3b:00.0"), or "fake-gpu:<n>" for the fake devices of tests.
std::string cuda_device_identity(int device);

// For tests of device choice on machines without a GPU: while count >= 0, probe_cuda()
// reports `count` visible GPUs without asking CUDA, and select_cuda_device() accepts
// them without calling it. A negative count restores the real probe.
void fake_cuda_devices_for_testing(int count);

}  // namespace cohort
