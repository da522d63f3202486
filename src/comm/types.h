// The vocabulary of the collective engine: operation kinds, reduce operations, the
// request a caller waits on, and one named tensor operation as submitted.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"

namespace cohort::comm {

using Clock = std::chrono::steady_clock;

enum class OpType : uint8_t { kAllreduce, kAllgather, kBroadcast, kAlltoall, kReducescatter, kBarrier, kJoin };
enum class ReduceOp : uint8_t { kSum, kAverage, kMin, kMax, kProduct };

const char* op_type_name(OpType t);
const char* reduce_op_name(ReduceOp op);

// How many callers are blocked in Request::wait, per engine: with hold_during_compute a
// rank whose compute waits for a collective must not hold reductions back, nor put off
// negotiating them. on_block (set before any request exists) runs when a caller starts
// blocking: the engine wakes its thread to negotiate at once.
struct WaitCount {
  std::atomic<int> blocked{0};
  std::function<void()> on_block;
};

// What a caller waits on: one submission (a single tensor or a group). Completed by
// the engine thread; tested and waited on by any thread.
class Request {
 public:
  explicit Request(int parts, std::shared_ptr<WaitCount> waits = {})
      : pending_(parts), done_(parts == 0), waits_(std::move(waits)) {}
  // How long wait() polls, yielding the core, before it sleeps: a small collective ends
  // within microseconds, and a sleeping caller costs a wake-up that on a virtual machine
  // (an idle vCPU halts) is several microseconds of its own.
  static constexpr std::chrono::microseconds kPoll{50};

  bool test() const;
  // Blocks until done; returns the request's status (never throws).
  Status wait() const;
  // Blocks until done or until `timeout` has passed; true when done.
  bool wait_for(std::chrono::nanoseconds timeout) const;
  Status status() const;

  // Results of ops whose output size is known only after negotiation.
  Tensor output() const;
  // When the device work of a completed request is done: a device transport enqueues
  // its collectives and completes the request once they are enqueued; work that reads
  // the result waits for this event (Event::block) or the host does (synchronize).
  // Complete for host collectives.
  Event event() const;
  std::vector<int64_t> recv_splits() const;
  int join_last_rank() const;

  // Engine side.
  void set_output(Tensor t, std::vector<int64_t> recv_splits = {});
  // Joins `e` to the request's event (before its last part completes).
  void add_event(Event e);
  void set_join_last_rank(int r);
  void complete_part(const Status& s);

 private:
  class Blocked;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int pending_;
  std::atomic<bool> done_{false};  // pending_ == 0, readable without the lock
  std::shared_ptr<WaitCount> waits_;
  Status status_;
  Tensor output_;
  std::vector<Event> events_;
  std::vector<int64_t> recv_splits_;
  int join_last_rank_ = -1;
};

// What an engine has done so far (Engine::stats).
struct EngineStats {
  uint64_t cycles = 0;
  uint64_t full_exchanges = 0;  // cycles that exchanged Metas (not just cache bits)
  uint64_t cache_hits = 0;      // tensors that became ready through the cache
  uint64_t fused_batches = 0;   // allreduce calls that carried more than one tensor
  uint64_t completed = 0;
  uint64_t held = 0;                 // reductions the compute gate held back (hold_during_compute)
  uint64_t ranks_shutting_down = 0;  // ranks, this one included, known to be shutting down
};

// The counters behind EngineStats: bumped on the engine thread, read from any thread.
struct EngineCounters {
  std::atomic<uint64_t> cycles{0}, full_exchanges{0}, cache_hits{0}, fused_batches{0}, completed{0}, held{0},
      ranks_shutting_down{0};
  EngineStats snapshot() const;
};

// One named operation as the caller submitted it.
struct TensorEntry {
  std::string name;
  OpType type = OpType::kAllreduce;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0, postscale = 1.0;
  int root = 0;
  Tensor input;                 // host or device memory, contiguous
  Event ready;                  // input is written once it completes (device producers)
  Tensor output;                // allreduce / broadcast: may be the input (in place)
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  std::shared_ptr<Request> request;
  Clock::time_point submitted;
};

}  // namespace cohort::comm
