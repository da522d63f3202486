// The MPI transport: host memory over a private duplicate of the runtime's
// communicator (so the engine's collectives never interleave with other MPI users).
// When every node runs the same number (> 1) of ranks, allreduces run through a shared
// segment of our own per node (ShmAllreduce: each rank reduces 1/n of the data instead of
// all of it); across nodes each local rank allreduces its segment with the ranks of the
// same local rank (hierarchical: one stream per local rank). Otherwise large allreduces
// are cut into cache-sized chunks: Open MPI's shared-memory allreduce falls from ~2.8 GB/s
// at 1 MiB to ~1 GB/s at 64 MiB and above.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <unordered_map>

#include "comm/shm/shm_allreduce.h"
#include "comm/transport.h"

namespace cohort::comm {

class MpiTransport final : public Transport {
 public:
  // Collective over `parent` (duplicates it).
  // chunk_bytes: the most bytes one MPI allreduce call carries (0 = no chunking);
  // window: how many chunk reductions are in flight at once; shm_slot_bytes: the piece
  // size of the shared-memory allreduce (0 = never; see above for when it applies).
  MpiTransport(MPI_Comm parent, size_t chunk_bytes, size_t window = 16, size_t shm_slot_bytes = 0);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }
  bool supports(Device d) const override { return d.is_host(); }

  void and_words(std::vector<uint64_t>& words) override;
  std::vector<std::string> allgather_bytes(const std::string& mine) override;
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) override;
  void allreduce_many(const std::vector<std::pair<void*, size_t>>& bufs, DType t, kernels::Reduce op) override;
  void allreduce_many_into(const std::vector<Reduction>& bufs, DType t, kernels::Reduce op) override;
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override;
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                      kernels::Reduce op) override;
  void barrier() override;
  void abort_waits() override;
  // Point to point over a communicator of their own, so they never match the engine's
  // collectives.
  bool supports_p2p() const override { return true; }
  int max_tag() const override { return tag_ub_; }
  uint64_t post_send(int peer, int tag, const void* buf, size_t bytes) override;
  uint64_t post_recv(int peer, int tag, void* buf, size_t bytes) override;
  bool test(uint64_t handle, size_t* bytes) override;
  void cancel(uint64_t handle) override;
  // Whether allreduces go through the shared-memory segment, and whether they then also
  // cross nodes (hierarchical).
  bool uses_shm() const { return shm_ != nullptr; }
  bool hierarchical() const { return cross_ != MPI_COMM_NULL; }

 private:
  // Waits for a nonblocking call without burning a core: polls for a few microseconds,
  // then between sleeps that grow to 0.5 ms.
  void wait(MPI_Request& request, const char* call);
  MPI_Datatype mpi_type(DType t) const;
  // The shared-memory allreduce's step across nodes (hierarchical only; else empty).
  ShmAllreduce::AcrossNodes across_nodes(DType t, kernels::Reduce op);
  MPI_Op mpi_op(DType t, kernels::Reduce op) const;
  // Maps the shared segment when every node runs as many ranks, more than one (all ranks
  // decide alike), and splits cross_ when there are several nodes.
  void map_shared_segment(size_t slot_bytes);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MPI_Op half_ops_[2][4] = {};  // [f16, bf16][sum, min, max, prod]
  size_t chunk_bytes_;
  size_t window_;
  std::atomic<bool> aborted_{false};
  MPI_Win shm_window_ = MPI_WIN_NULL;
  std::unique_ptr<ShmAllreduce> shm_;
  MPI_Comm cross_ = MPI_COMM_NULL;  // this local rank on every node (hierarchical only)
  MPI_Comm p2p_ = MPI_COMM_NULL;    // point-to-point messages
  int tag_ub_ = 32767;
  struct Posted {
    MPI_Request request;
    bool send;
  };
  std::unordered_map<uint64_t, Posted> posted_;
  uint64_t next_handle_ = 1;
};

}  // namespace cohort::comm
