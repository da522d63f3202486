#include "check_build.h"

#include <cstdio>

#include <cohort/cohort.h>

namespace cohortrun {
namespace {

std::string or_none(const char* text, const char* none) { return text && *text ? text : none; }

std::string line(const char* label, const std::string& value) {
  char head[32];
  std::snprintf(head, sizeof head, "%-15s", label);
  return std::string(head) + value + "\n";
}

}  // namespace

std::string check_build_report(const std::string& mpirun) {
  cohort_build_info_t info{};
  info.struct_size = sizeof info;
  if (cohort_build_info(&info) != COHORT_OK)
    return std::string("cohort_build_info failed: ") + cohort_last_error() + "\n";
  std::string out = line("cohort", info.cohort_version);
  out += line("MPI", or_none(info.mpi_library, "unknown") + " (MPI standard " + std::to_string(info.mpi_version) + "." +
                         std::to_string(info.mpi_subversion) + ")");
  out += line("mpirun", mpirun.empty() ? "not found on PATH" : mpirun);
  if (info.cuda_built) {
    out += line("CUDA", "runtime " + or_none(info.cuda_runtime, "unknown") + ", driver " +
                            or_none(info.cuda_driver, "none (no NVIDIA driver)"));
    out += line("cuDNN", or_none(info.cudnn, "unknown"));
    out += line("NCCL", or_none(info.nccl, "unknown"));
  } else {
    out += line("CUDA", "not built (CPU backend only)");
    out += line("cuDNN", "not built");
    out += line("NCCL", "not built");
  }
  out += line("oneDNN",
              or_none(info.dnnl, "unknown") + " (CPU runtime " + or_none(info.dnnl_cpu_runtime, "unknown") + ")");
  out += line("libjpeg-turbo", or_none(info.jpeg_turbo, "unknown"));
  out += line("Compute", info.cuda_trains ? "CPU (oneDNN), and a GPU (cuDNN, cuBLAS) where one is visible: "
                                            "--device=auto picks the GPU, --device=cpu|cuda chooses"
                                          : "CPU (oneDNN)");
  if (info.gpu_count == 0) {
    out += line("GPUs", "none" + (info.gpu_note && *info.gpu_note ? std::string(" (") + info.gpu_note + ")" : ""));
  } else {
    out += line("GPUs", std::to_string(info.gpu_count) +
                            (info.cuda_trains ? "" : " (for collectives of CUDA tensors over NCCL, not for compute)"));
    for (int i = 0; i < info.gpu_count; ++i) {
      cohort_gpu_info_t gpu{};
      gpu.struct_size = sizeof gpu;
      if (cohort_build_gpu_info(i, &gpu) != COHORT_OK) continue;
      char text[512];
      std::snprintf(text, sizeof text, "  %d: %s, sm_%d%d, %.1f GiB, %d SMs, PCI %s\n", i, gpu.name, gpu.compute_major,
                    gpu.compute_minor, static_cast<double>(gpu.total_memory) / (1ull << 30), gpu.multiprocessors,
                    gpu.pci_bus_id);
      out += text;
    }
  }
  return out;
}

}  // namespace cohortrun
