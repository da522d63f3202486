// What this build of cohort is made of and what the machine gives it: the MPI library,
// CUDA (runtime, driver, cuDNN, NCCL) and the GPUs it sees, oneDNN and libjpeg-turbo.
// Probed once per process; the C API's cohort_build_info() and cohortrun --check-build
// report it. The GPU count and the reason it is 0 come from probe_cuda(), as the
// runtime's device choice sees them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cohort {

struct GpuFacts {
  std::string name;
  std::string pci_bus_id;
  uint64_t total_memory = 0;
  int major = 0, minor = 0, sms = 0;
};

struct BuildFacts {
  std::string mpi_library;
  int mpi_version = 0, mpi_subversion = 0;
  bool cuda_built = false;
  bool cuda_trains = false;  // models can compute on a GPU (the CUDA backend)
  std::string cuda_runtime, cuda_driver, cudnn, nccl, dnnl, dnnl_cpu_runtime, jpeg_turbo;
  std::string gpu_note;  // why gpus is empty
  std::vector<GpuFacts> gpus;
};

// The facts of this process (computed at the first call; the strings live as long as
// the process).
const BuildFacts& build_facts();

}  // namespace cohort
