// The NCCL transport: device memory, one NCCL communicator per engine, its unique id
// broadcast over MPI. Negotiation stays on MPI (host memory); only the data plane
// runs on the GPU, on one stream of its own: a call waits (on the device) for the
// events of its inputs (wait_event), enqueues its work and returns; record_done() gives
// the event its results are complete at, which requests carry. No host thread waits
// per call. Results and scratch come from the runtime's caching allocator, in the
// stream's order. Zero-size blocks are skipped (every rank knows the sizes, so the
// skips agree). An asynchronous NCCL error fails the next call; an abort
// (ncclCommAbort, after a lost peer or a stall) ends kernels waiting for a peer. NCCL
// lets one thread at a time use a communicator: the engine thread's calls and an abort
// from another thread take turns (`calls_`), so a call that returns normally never
// reaches a communicator the abort has freed. One exception is left: a call still inside
// NCCL a second after the abort began waits there for a lost peer, and only
// ncclCommAbort from another thread ends that wait (NCCL's fault-tolerance design, and
// what PyTorch's watchdog does), so the abort goes ahead under it.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "comm/mpi/mpi_transport.h"
#include "comm/transport.h"
#include "tensor/allocator.h"

namespace cohort::comm {

class NcclTransport final : public Transport {
 public:
  // Collective over `parent`. `device` is this rank's CUDA device ordinal; `allocator`
  // gives memory on it.
  NcclTransport(MPI_Comm parent, int device, std::shared_ptr<Allocator> allocator);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  const char* name() const override { return "nccl"; }
  bool supports(Device d) const override { return d.kind == Device::Kind::kCuda && d.id == device_; }

  void and_words(std::vector<uint64_t>& words) override { control_->and_words(words); }
  std::vector<std::string> allgather_bytes(const std::string& mine) override { return control_->allgather_bytes(mine); }
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) override;
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override;
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                      kernels::Reduce op) override;
  void barrier() override { control_->barrier(); }
  void copy(void* dst, const void* src, size_t bytes, Device d) override;
  // Device memory from the caching allocator, used on this transport's stream.
  Tensor allocate(const Shape& shape, DType t) override;
  // Its stream waits for `e`; the event marks what was enqueued on it so far.
  void wait_event(const Event& e) override;
  Event record_done() override;
  void zero(void* buf, size_t bytes) override;
  void scale(void* buf, size_t count, DType t, double factor) override;
  // Any thread: aborts the communicator (ncclCommAbort); later calls fail kCancelled.
  void abort_waits() override;

 private:
  // Held for the length of a call that enters NCCL; fails kCancelled after an abort.
  std::unique_lock<std::timed_mutex> enter(const char* call);
  void check_open(const char* call) const;
  void sync(const char* call);
  Stream stream() const;

  std::unique_ptr<MpiTransport> control_;
  int device_;
  std::shared_ptr<Allocator> allocator_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::timed_mutex calls_;  // one thread in NCCL at a time: the calls, the abort, the destructor
};

}  // namespace cohort::comm
