// A Transport moves bytes between the ranks of one engine. The engine thread is its
// only user, so implementations need no locking of their own. Control-plane calls are
// small and may wait a long time for an idle peer; data-plane calls run only after
// negotiation, when every rank is known to make the same call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/copy.h"
#include "kernels/reduce.h"
#include "tensor/tensor.h"

namespace cohort::comm {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;
  // Whether tensors on `d` can be moved by this transport.
  virtual bool supports(Device d) const = 0;

  // Control plane. words = AND of every rank's words.
  virtual void and_words(std::vector<uint64_t>& words) = 0;
  // Every rank's bytes, indexed by rank.
  virtual std::vector<std::string> allgather_bytes(const std::string& mine) = 0;

  // Data plane (all in place unless said otherwise; buffers in supported memory).
  virtual void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) = 0;
  // Several independent in-place allreduces of one dtype and op (buffer, count).
  virtual void allreduce_many(const std::vector<std::pair<void*, size_t>>& bufs, DType t, kernels::Reduce op) {
    for (const auto& [buf, count] : bufs) allreduce(buf, count, t, op);
  }
  // Several independent out-of-place allreduces of one dtype and op in host memory: each
  // `out` receives the reduction of every rank's `in` (count elements; in == out is in
  // place) and `in` is left as it was. By default each `in` is copied to its `out`, which
  // is then reduced in place.
  struct Reduction {
    const void* in;
    void* out;
    size_t count;
  };
  virtual void allreduce_many_into(const std::vector<Reduction>& bufs, DType t, kernels::Reduce op) {
    std::vector<std::pair<void*, size_t>> in_place;
    for (const Reduction& r : bufs) {
      if (r.in != r.out && r.count) copy_bytes(r.out, r.in, r.count * dtype_size(t));
      in_place.emplace_back(r.out, r.count);
    }
    allreduce_many(in_place, t, op);
  }
  // recv holds every rank's block back to back; bytes[r] is rank r's block size.
  virtual void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // send_bytes[r] go to rank r, recv_bytes[r] come from rank r (blocks in rank order).
  virtual void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                         const std::vector<size_t>& recv_bytes) = 0;
  // Reduces `send` (sum of counts elements) and leaves block `rank` in recv.
  virtual void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                              kernels::Reduce op) = 0;
  virtual void barrier() = 0;
  // Copies between two buffers in this transport's memory (device copies for NCCL).
  virtual void copy(void* dst, const void* src, size_t bytes, Device d) { copy_bytes(dst, src, bytes); }
  // A tensor in this transport's memory, for results and scratch (host memory here).
  virtual Tensor allocate(const Shape& shape, DType t) { return Tensor::empty(shape, t); }
  // Sets `bytes` bytes of `buf` (this transport's memory) to zero.
  virtual void zero(void* buf, size_t bytes) {
    if (bytes) std::memset(buf, 0, bytes);
  }
  // Multiplies `count` elements of `buf` by `factor` (the kernels/ functors, on the
  // host here and on the device for NCCL).
  virtual void scale(void* buf, size_t count, DType t, double factor) { kernels::scale(buf, count, t, factor); }
  // Stops any wait in the control plane (peer lost or forced shutdown).
  virtual void abort_waits() {}

  // Streams and events. Later data-plane calls wait for `e` (the input they read is
  // written when it completes): a device transport makes its stream wait for it; host
  // transports wait on the host, where their tensors' events are complete already.
  virtual void wait_event(const Event& e) { e.synchronize(); }
  // An event that completes when every data-plane call made so far is done. Host
  // transports finish each call before returning, so theirs is complete.
  virtual Event record_done() { return {}; }

  // Point to point, outside negotiation (the engine's Mailbox): nonblocking sends and
  // receives between two ranks, matched by (source, tag) in the order they were posted.
  // A handle names a posted operation until test() reports it complete. Transports
  // without them say so (supports_p2p false) and the engine refuses such messages.
  virtual bool supports_p2p() const { return false; }
  // The largest tag a message may carry.
  virtual int max_tag() const { return 0; }
  virtual uint64_t post_send(int peer, int tag, const void* buf, size_t bytes);
  virtual uint64_t post_recv(int peer, int tag, void* buf, size_t bytes);
  // True once the operation has finished (its handle is then gone); a receive's message
  // size goes to *bytes. Throws kMismatch for a message larger than the receive (the
  // handle is gone too), kMpi (or the like) when the transport itself failed.
  virtual bool test(uint64_t handle, size_t* bytes);
  // Withdraws an unfinished operation (its handle is then gone).
  virtual void cancel(uint64_t handle);
};

inline uint64_t Transport::post_send(int, int, const void*, size_t) {
  fail(Code::kUnsupported, "the ", name(), " transport has no point-to-point messages");
}
inline uint64_t Transport::post_recv(int, int, void*, size_t) {
  fail(Code::kUnsupported, "the ", name(), " transport has no point-to-point messages");
}
inline bool Transport::test(uint64_t, size_t*) {
  fail(Code::kUnsupported, "the ", name(), " transport has no point-to-point messages");
}
inline void Transport::cancel(uint64_t) {}

}  // namespace cohort::comm
