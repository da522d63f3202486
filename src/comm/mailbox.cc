#include "comm/mailbox.h"

#include <algorithm>

namespace cohort::comm {

void Inbox::push(Delivery d) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(d));
  }
  cv_.notify_one();
}

std::optional<Inbox::Delivery> Inbox::pop() {
  std::unique_lock lock(mu_);
  const bool blocks = queue_.empty() && !closed_ && waits_;
  if (blocks) ++waits_->blocked;
  cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
  if (blocks) --waits_->blocked;
  if (queue_.empty()) return std::nullopt;
  Delivery d = std::move(queue_.front());
  queue_.pop_front();
  return d;
}

void Inbox::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

void Mailbox::post(std::vector<P2pOp>& ops) {
  for (P2pOp& op : ops) {
    try {
      void* data = op.buffer.data();
      const size_t bytes = op.buffer.nbytes();
      const uint64_t h = op.send ? transport_.post_send(op.peer, op.tag, data, bytes)
                                 : transport_.post_recv(op.peer, op.tag, data, bytes);
      posted_.push_back({h, std::move(op)});
    } catch (const Error& e) {
      if (e.code() == Code::kMpi) throw;  // the transport is broken: the engine stops
      complete(op, e.status());
    }
  }
  ops.clear();
  last_activity_ = Clock::now();
}

void Mailbox::progress() {
  bool moved = false;
  for (size_t i = 0; i < posted_.size();) {
    Posted& p = posted_[i];
    size_t bytes = 0;
    Status s;
    try {
      if (!transport_.test(p.handle, &bytes)) {
        ++i;
        continue;
      }
    } catch (const Error& e) {
      if (e.code() != Code::kMismatch) throw;  // the transport is broken: the engine stops
      s = e.status();
    }
    if (s.is_ok() && !p.op.send && bytes != p.op.buffer.nbytes())
      s = Status(Code::kMismatch, cat("a message of ", bytes, " bytes from rank ", p.op.peer, " (tag ", p.op.tag,
                                      ") for a ", p.op.buffer.nbytes(), "-byte receive"));
    complete(p.op, s);
    posted_.erase(posted_.begin() + static_cast<std::ptrdiff_t>(i));
    moved = true;
  }
  if (moved) last_activity_ = Clock::now();
}

std::chrono::microseconds Mailbox::poll_interval() const {
  // Messages come in bursts (a step's gradients, then its variables): poll at once
  // after one moved, then back off; a blocked caller keeps the backoff short.
  using std::chrono::microseconds;
  const auto quiet = std::chrono::duration_cast<microseconds>(Clock::now() - last_activity_);
  const microseconds cap = waits_->blocked.load() > 0 ? microseconds(200) : kMaxPoll;
  return std::clamp(quiet / 8, microseconds(10), cap);
}

void Mailbox::fail_all(const Status& s) {
  for (Posted& p : posted_) {
    try {
      transport_.cancel(p.handle);
    } catch (const Error&) {
      // Already failing: completing the request is what matters.
    }
    complete(p.op, s);
  }
  posted_.clear();
}

void Mailbox::complete(P2pOp& op, const Status& s) {
  if (op.inbox) op.inbox->push({op.cookie, s});
  op.request->complete_part(s);
}

}  // namespace cohort::comm
