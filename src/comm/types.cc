#include "comm/types.h"

#include <thread>

namespace cohort::comm {

const char* op_type_name(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

EngineStats EngineCounters::snapshot() const {
  EngineStats s;
  s.cycles = cycles.load(std::memory_order_relaxed);
  s.full_exchanges = full_exchanges.load(std::memory_order_relaxed);
  s.cache_hits = cache_hits.load(std::memory_order_relaxed);
  s.fused_batches = fused_batches.load(std::memory_order_relaxed);
  s.completed = completed.load(std::memory_order_relaxed);
  s.held = held.load(std::memory_order_relaxed);
  s.ranks_shutting_down = ranks_shutting_down.load(std::memory_order_relaxed);
  return s;
}

bool Request::test() const {
  std::lock_guard lock(mu_);
  return pending_ == 0;
}

// Counts the calling thread among the blocked callers for its lifetime.
class Request::Blocked {
 public:
  explicit Blocked(const std::shared_ptr<WaitCount>& waits) : waits_(waits.get()) {
    if (!waits_) return;
    ++waits_->blocked;
    if (waits_->on_block) waits_->on_block();
  }
  ~Blocked() {
    if (waits_) --waits_->blocked;
  }
  Blocked(const Blocked&) = delete;
  Blocked& operator=(const Blocked&) = delete;

 private:
  WaitCount* waits_;
};

Status Request::wait() const {
  if (!done_.load(std::memory_order_acquire)) {
    Blocked blocked(waits_);
    // Polls yielding, so the engine thread gets this core whenever it needs it to
    // finish the request.
    const auto poll_until = std::chrono::steady_clock::now() + kPoll;
    while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < poll_until)
      std::this_thread::yield();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }
  return status();
}

bool Request::wait_for(std::chrono::nanoseconds timeout) const {
  if (done_.load(std::memory_order_acquire)) return true;
  Blocked blocked(waits_);
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return pending_ == 0; });
}

Status Request::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

Tensor Request::output() const {
  std::lock_guard lock(mu_);
  return output_;
}

std::vector<int64_t> Request::recv_splits() const {
  std::lock_guard lock(mu_);
  return recv_splits_;
}

int Request::join_last_rank() const {
  std::lock_guard lock(mu_);
  return join_last_rank_;
}

void Request::set_output(Tensor t, std::vector<int64_t> recv_splits) {
  std::lock_guard lock(mu_);
  output_ = std::move(t);
  recv_splits_ = std::move(recv_splits);
}

void Request::add_event(Event e) {
  if (!e.recorded()) return;
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

Event Request::event() const {
  std::lock_guard lock(mu_);
  // A group's parts run on one device transport, in order: its last event covers all.
  return events_.empty() ? Event() : events_.back();
}

void Request::set_join_last_rank(int r) {
  std::lock_guard lock(mu_);
  join_last_rank_ = r;
}

void Request::complete_part(const Status& s) {
  {
    std::lock_guard lock(mu_);
    if (pending_ == 0) return;
    if (status_.is_ok() && !s.is_ok()) status_ = s;
    if (--pending_ > 0) return;
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace cohort::comm
