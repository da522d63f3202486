// Point-to-point messages between two ranks, outside negotiation: a parameter server and
// its workers exchange gradients and variables while the other ranks neither take part
// nor wait. Any thread posts sends and receives through the engine; the engine thread,
// the only one that touches the transport, posts them there and completes their
// requests as they finish, polling between its negotiation cycles: quickly while a
// caller waits or messages have just moved, more and more slowly (up to kMaxPoll) while
// nothing happens.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "comm/transport.h"
#include "comm/types.h"

namespace cohort::comm {

// Where a thread serving many peers learns which of its receives finished: each
// receive posted with an inbox puts (its cookie, its status) here when it completes.
class Inbox {
 public:
  struct Delivery {
    uint64_t cookie = 0;
    Status status;
  };
  explicit Inbox(std::shared_ptr<WaitCount> waits = {}) : waits_(std::move(waits)) {}

  void push(Delivery d);
  // Blocks until a delivery arrives; nullopt once closed and empty.
  std::optional<Delivery> pop();
  // Wakes pop() for good.
  void close();

 private:
  std::shared_ptr<WaitCount> waits_;  // counts a blocked pop (the engine polls faster)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delivery> queue_;
  bool closed_ = false;
};

// One posted message, as a caller submits it.
struct P2pOp {
  bool send = false;
  int peer = 0;
  int tag = 0;
  Tensor buffer;  // host, contiguous; a receive's message must fit
  std::shared_ptr<Request> request;
  std::shared_ptr<Inbox> inbox;  // receives: told on completion (may be null)
  uint64_t cookie = 0;
};

class Mailbox {
 public:
  explicit Mailbox(Transport& transport) : transport_(transport) {}

  // Requests made for messages count their blocked waiters here.
  const std::shared_ptr<WaitCount>& waits() const { return waits_; }

  // Engine thread: posts the operations on the transport.
  void post(std::vector<P2pOp>& ops);
  // Engine thread: completes every posted operation that has finished. Throws what the
  // transport throws (a lost peer).
  void progress();
  bool active() const { return !posted_.empty(); }
  // How long the engine may sleep before the next progress().
  std::chrono::microseconds poll_interval() const;
  // Completes every posted operation with `s` and withdraws it from the transport.
  void fail_all(const Status& s);

  static constexpr std::chrono::microseconds kMaxPoll{2000};

 private:
  struct Posted {
    uint64_t handle;
    P2pOp op;
  };
  void complete(P2pOp& op, const Status& s);

  Transport& transport_;
  std::shared_ptr<WaitCount> waits_ = std::make_shared<WaitCount>();
  std::vector<Posted> posted_;
  Clock::time_point last_activity_{};
};

}  // namespace cohort::comm
