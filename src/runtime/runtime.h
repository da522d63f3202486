// The process-level object of a job: its communicators, rank layout, thread budget
// and devices. One per job is usual; several may live in sequence.
//
// Two devices, kept apart: the compute device, where models compute, and the GPU that
// collectives of CUDA tensors use. Models compute on the CPU until the CUDA backend can
// train (backend::cuda_backend_trains), whatever GPUs are visible; a visible GPU still
// serves collectives of CUDA tensors (NCCL).
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <string>

#include "comm/engine.h"
#include "core/config.h"
#include "tensor/memory.h"
#include "tensor/tensor.h"

namespace cohort {

struct RankLayout {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
};

class Runtime {
 public:
  // Collective over MPI_COMM_WORLD. Throws on MPI failure, after finalize, or, with
  // kUnsupported, for device=cuda (no GPU is usable, or a build without CUDA).
  explicit Runtime(const Config& config);
  // Shuts down (collective) unless shutdown() already ran.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RankLayout& layout() const { return layout_; }
  int rank() const { return layout_.rank; }
  int size() const { return layout_.size; }
  int thread_budget() const { return thread_budget_; }
  // Where models compute.
  Device device() const { return device_; }
  // This runtime's allocators (host, pinned host, a caching allocator per device).
  Memory& memory() { return *memory_; }
  const Memory& memory() const { return *memory_; }
  // GPUs visible to this process.
  int cuda_device_count() const { return cuda_device_count_; }
  // The CUDA ordinal collectives of CUDA tensors run on for this rank, or -1 when they
  // cannot run (device=cpu, no GPU, or a build without CUDA).
  int collective_gpu() const { return collective_gpu_; }
  // Whether ranks of some node share a GPU: collectives of CUDA tensors then go through
  // host memory (comm/staged) on every rank instead of NCCL.
  bool gpus_shared() const { return gpus_shared_; }
  // One line on where compute and collectives run, as the runtime logs it.
  std::string device_summary() const;
  const Config& config() const { return config_; }
  // This runtime's duplicate of MPI_COMM_WORLD (errors return instead of aborting).
  MPI_Comm comm() const { return world_; }
  MPI_Comm local_comm() const { return local_; }
  MPI_Comm cross_comm() const { return cross_; }

  void barrier();

  // Collective: stops the engine (cancelling what is still pending: every request then
  // completes with kCancelled) and frees the communicators. While it waits for the
  // other ranks, their collectives that this rank never submitted fail with
  // kPeerShutdown (Engine::~Engine), so they stop and shut down too. Afterwards the objects
  // made from this runtime may only be destroyed, which is then local and never
  // blocks; any other use throws kInvalidState. Idempotent. Must not run while another
  // thread uses the runtime. After a lost peer it abandons the engine instead.
  void shutdown();
  bool is_shut_down() const { return shut_down_.load(std::memory_order_acquire); }
  // Throws kInvalidState once shutdown() has run, naming `what` was attempted.
  void check_open(const char* what = "this call") const;

  // The collective engine of this runtime (its own background thread and communicator).
  // Host tensors run over MPI; CUDA tensors over NCCL (one communicator per runtime,
  // created at the first device collective) on collective_gpu().
  // Throws kInvalidState after shutdown().
  comm::Engine& engine() {
    check_open("a collective");
    return *engine_;
  }
  // CPU seconds the engine thread has used so far. Throws kInvalidState after shutdown().
  double engine_cpu_seconds() const {
    check_open("reading the engine's CPU time");
    return engine_->cpu_seconds();
  }
  // The engine's counters so far. Throws kInvalidState after shutdown().
  comm::EngineStats engine_stats() const {
    check_open("reading the engine's counters");
    return engine_->stats();
  }
  // 0, 1, 2, ... one per call: names the collectives of each optimizer created on this
  // runtime apart (ranks create theirs in the same order, so the numbers agree).
  int next_optimizer_index() { return optimizers_created_++; }

 private:
  void choose_device();
  // Collective: whether two ranks of some node share a GPU (then no rank uses NCCL).
  void find_shared_gpus();
  comm::DeviceTransportFactory device_transport();

  Config config_;
  std::unique_ptr<Memory> memory_ = std::make_unique<Memory>();
  RankLayout layout_;
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
  int thread_budget_ = 1;
  Device device_;
  int cuda_device_count_ = 0;
  int collective_gpu_ = -1;
  std::string cuda_why_;                       // why no GPU is usable (probe), if none
  bool gpus_shared_ = false;                   // on some node, two ranks use one GPU
  MPI_Comm device_bootstrap_ = MPI_COMM_NULL;  // the engine thread's: NCCL id exchange
  std::unique_ptr<comm::Engine> engine_;
  std::atomic<int> optimizers_created_{0};
  int live_id_ = -1;  // in mpi_process's list of runtimes to shut down at exit
  std::atomic<bool> shut_down_{false};
};

}  // namespace cohort
