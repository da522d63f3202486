// Collectives of device tensors through host memory, for ranks that share one device
// (NCCL does not support two ranks on one GPU: it may hang). Each call copies its
// device buffers into pinned host staging buffers, runs the collective on a host
// transport (the MPI transport, whose allreduces between the ranks of a node go
// through cohort's shared-memory segment), and copies the results back; it is complete
// when it returns. Device-generic: on the test device it runs in CPU tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"
#include "tensor/allocator.h"

namespace cohort::comm {

class StagedTransport final : public Transport {
 public:
  // `host` moves the staged bytes (its own communicator); `device` is where this rank's
  // device tensors live; `pinned` gives the staging buffers, `device_memory` results.
  StagedTransport(std::unique_ptr<Transport> host, Device device, std::shared_ptr<Allocator> pinned,
                  std::shared_ptr<Allocator> device_memory);
  ~StagedTransport() override;
  StagedTransport(const StagedTransport&) = delete;
  StagedTransport& operator=(const StagedTransport&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* name() const override { return "staged"; }
  bool supports(Device d) const override { return d == device_; }

  void and_words(std::vector<uint64_t>& words) override { host_->and_words(words); }
  std::vector<std::string> allgather_bytes(const std::string& mine) override { return host_->allgather_bytes(mine); }
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) override;
  void allreduce_many(const std::vector<std::pair<void*, size_t>>& bufs, DType t, kernels::Reduce op) override;
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override;
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                      kernels::Reduce op) override;
  void barrier() override { host_->barrier(); }
  void copy(void* dst, const void* src, size_t bytes, Device d) override;
  Tensor allocate(const Shape& shape, DType t) override;
  void zero(void* buf, size_t bytes) override;
  void scale(void* buf, size_t count, DType t, double factor) override;
  void abort_waits() override { host_->abort_waits(); }

 private:
  // A pinned host buffer of at least `bytes` (slot 0 or 1: two in flight at most).
  void* staging(size_t bytes, int slot = 0);
  // Copies and fills on the transport's own stream, complete on return. The inputs are
  // ready before: the engine has waited for their events on the host (wait_event). No
  // call waits for the whole device, which would fail while this rank's compute thread
  // captures a CUDA graph (cuda_graphs=on).
  void to_host(void* host, const void* device, size_t bytes);
  void to_device(void* device, const void* host, size_t bytes);

  std::unique_ptr<Transport> host_;
  Device device_;
  Stream stream_;  // the device's, made for this transport
  std::shared_ptr<Allocator> pinned_, device_memory_;
  std::shared_ptr<Storage> staging_[2];
};

// How the collectives of device tensors run on this node, from every local rank's
// device identity (a PCI bus id or UUID, in local rank order): NCCL when each rank has
// a device of its own, through host memory (StagedTransport) when two ranks share one.
struct DeviceSharing {
  bool shared = false;
  std::string detail;  // which ranks share which device, for the log
};
DeviceSharing device_sharing(const std::vector<std::string>& local_ids);

}  // namespace cohort::comm
