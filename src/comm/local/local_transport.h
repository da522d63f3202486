// Ranks as threads of one process: a LocalWorld is shared by `size` LocalTransports,
// one per thread, so the engine's negotiation, fusion and error paths run in a plain
// unit test (and under TSan) without mpirun.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/transport.h"

namespace cohort::comm {

class LocalWorld {
 public:
  explicit LocalWorld(int size);
  int size() const { return size_; }

  // Publishes this rank's slot and waits until every rank has published.
  void publish(int rank, const void* ptr);
  const void* slot(int rank) const { return slots_[static_cast<size_t>(rank)]; }
  void barrier();
  // Wakes every waiter with an error (used when a test abandons a rank).
  void abort();

  // Point-to-point messages: a send is copied here at once; a receive takes the oldest
  // message from `source` with `tag` addressed to `dest`, if there is one.
  void deliver(int source, int dest, int tag, const void* buf, size_t bytes);
  // Copies the message into buf and returns true (its size in *bytes); false when none
  // is there yet. Throws kMismatch when it does not fit in `capacity` bytes.
  bool take(int source, int dest, int tag, void* buf, size_t capacity, size_t* bytes);

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const void*> slots_;

  struct Message {
    int source, tag;
    std::vector<unsigned char> bytes;
  };
  std::mutex board_mu_;
  std::map<int, std::deque<Message>> board_;  // by destination
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  const char* name() const override { return "local"; }
  bool supports(Device d) const override { return d.is_host(); }

  void and_words(std::vector<uint64_t>& words) override;
  std::vector<std::string> allgather_bytes(const std::string& mine) override;
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) override;
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override;
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                      kernels::Reduce op) override;
  void barrier() override { world_->barrier(); }
  void abort_waits() override { world_->abort(); }

  bool supports_p2p() const override { return true; }
  int max_tag() const override { return 0x7fffffff; }
  uint64_t post_send(int peer, int tag, const void* buf, size_t bytes) override;
  uint64_t post_recv(int peer, int tag, void* buf, size_t bytes) override;
  bool test(uint64_t handle, size_t* bytes) override;
  void cancel(uint64_t handle) override { receives_.erase(handle); }

 private:
  std::shared_ptr<LocalWorld> world_;
  int rank_;
  struct Receive {
    int source, tag;
    void* buf;
    size_t capacity;
  };
  std::map<uint64_t, Receive> receives_;  // posted, in posting order
  uint64_t next_handle_ = 1;
};

}  // namespace cohort::comm
