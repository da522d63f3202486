#include "comm/local/local_transport.h"

#include <cstring>

#include "core/status.h"

namespace cohort::comm {

LocalWorld::LocalWorld(int size) : size_(size), slots_(static_cast<size_t>(size), nullptr) {
  require(size >= 1, "a local world needs at least one rank, got ", size);
}

void LocalWorld::publish(int rank, const void* ptr) {
  {
    std::lock_guard lock(mu_);
    slots_[static_cast<size_t>(rank)] = ptr;
  }
  barrier();
}

void LocalWorld::barrier() {
  std::unique_lock lock(mu_);
  if (aborted_) fail(Code::kCancelled, "the local world was aborted");
  uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) fail(Code::kCancelled, "the local world was aborted");
}

void LocalWorld::abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void LocalWorld::deliver(int source, int dest, int tag, const void* buf, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(buf);
  std::lock_guard lock(board_mu_);
  board_[dest].push_back({source, tag, std::vector<unsigned char>(p, p + bytes)});
}

bool LocalWorld::take(int source, int dest, int tag, void* buf, size_t capacity, size_t* bytes) {
  std::lock_guard lock(board_mu_);
  std::deque<Message>& box = board_[dest];
  for (auto it = box.begin(); it != box.end(); ++it) {
    if (it->source != source || it->tag != tag) continue;
    if (it->bytes.size() > capacity) {
      const size_t size = it->bytes.size();
      box.erase(it);  // as MPI does: the receive fails and the message is gone
      fail(Code::kMismatch, "a message of ", size, " bytes from rank ", source, " (tag ", tag, ") does not fit in the ",
           capacity, "-byte receive");
    }
    if (!it->bytes.empty()) std::memcpy(buf, it->bytes.data(), it->bytes.size());
    if (bytes) *bytes = it->bytes.size();
    box.erase(it);
    return true;
  }
  return false;
}

uint64_t LocalTransport::post_send(int peer, int tag, const void* buf, size_t bytes) {
  world_->deliver(rank_, peer, tag, buf, bytes);
  return 0;  // complete already
}

uint64_t LocalTransport::post_recv(int peer, int tag, void* buf, size_t bytes) {
  receives_.emplace(next_handle_, Receive{peer, tag, buf, bytes});
  return next_handle_++;
}

bool LocalTransport::test(uint64_t handle, size_t* bytes) {
  auto it = receives_.find(handle);
  if (it == receives_.end()) return true;  // a send
  // Receives from one source with one tag match in posting order.
  for (auto earlier = receives_.begin(); earlier != it; ++earlier)
    if (earlier->second.source == it->second.source && earlier->second.tag == it->second.tag) return false;
  const Receive& r = it->second;
  if (!world_->take(r.source, rank_, r.tag, r.buf, r.capacity, bytes)) return false;
  receives_.erase(it);
  return true;
}

void LocalTransport::and_words(std::vector<uint64_t>& words) {
  world_->publish(rank_, &words);
  std::vector<uint64_t> result = words;
  for (int r = 0; r < size(); ++r) {
    const auto* other = static_cast<const std::vector<uint64_t>*>(world_->slot(r));
    for (size_t i = 0; i < result.size(); ++i) result[i] &= (*other)[i];
  }
  world_->barrier();
  words = std::move(result);
}

std::vector<std::string> LocalTransport::allgather_bytes(const std::string& mine) {
  world_->publish(rank_, &mine);
  std::vector<std::string> all;
  for (int r = 0; r < size(); ++r) all.push_back(*static_cast<const std::string*>(world_->slot(r)));
  world_->barrier();
  return all;
}

void LocalTransport::allreduce(void* buf, size_t count, DType t, kernels::Reduce op) {
  size_t bytes = count * dtype_size(t);
  world_->publish(rank_, buf);
  std::vector<unsigned char> acc(bytes);
  if (bytes) std::memcpy(acc.data(), world_->slot(0), bytes);
  for (int r = 1; r < size(); ++r) kernels::combine(acc.data(), world_->slot(r), count, t, op);
  world_->barrier();
  if (bytes) std::memcpy(buf, acc.data(), bytes);
}

void LocalTransport::allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) {
  world_->publish(rank_, send);
  size_t offset = 0;
  for (int r = 0; r < size(); ++r) {
    size_t n = bytes[static_cast<size_t>(r)];
    if (n) std::memcpy(static_cast<char*>(recv) + offset, world_->slot(r), n);
    offset += n;
  }
  world_->barrier();
}

void LocalTransport::broadcast(void* buf, size_t bytes, int root) {
  world_->publish(rank_, buf);
  std::vector<unsigned char> copy(bytes);
  if (bytes && rank_ != root) std::memcpy(copy.data(), world_->slot(root), bytes);
  world_->barrier();
  if (bytes && rank_ != root) std::memcpy(buf, copy.data(), bytes);
}

namespace {
struct AlltoallSlot {
  const void* send;
  const std::vector<size_t>* send_bytes;
};
}  // namespace

void LocalTransport::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                               const std::vector<size_t>& recv_bytes) {
  AlltoallSlot mine{send, &send_bytes};
  world_->publish(rank_, &mine);
  size_t out = 0;
  for (int r = 0; r < size(); ++r) {
    const auto* other = static_cast<const AlltoallSlot*>(world_->slot(r));
    size_t offset = 0;
    for (int k = 0; k < rank_; ++k) offset += (*other->send_bytes)[static_cast<size_t>(k)];
    size_t n = (*other->send_bytes)[static_cast<size_t>(rank_)];
    require(n == recv_bytes[static_cast<size_t>(r)], "alltoall: rank ", r, " sends ", n, " bytes, expected ",
            recv_bytes[static_cast<size_t>(r)]);
    if (n) std::memcpy(static_cast<char*>(recv) + out, static_cast<const char*>(other->send) + offset, n);
    out += n;
  }
  world_->barrier();
}

void LocalTransport::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                                    kernels::Reduce op) {
  world_->publish(rank_, send);
  size_t esize = dtype_size(t);
  size_t offset = 0;
  for (int k = 0; k < rank_; ++k) offset += counts[static_cast<size_t>(k)];
  size_t n = counts[static_cast<size_t>(rank_)];
  std::vector<unsigned char> acc(n * esize);
  if (n) {
    std::memcpy(acc.data(), static_cast<const char*>(world_->slot(0)) + offset * esize, n * esize);
    for (int r = 1; r < size(); ++r)
      kernels::combine(acc.data(), static_cast<const char*>(world_->slot(r)) + offset * esize, n, t, op);
  }
  world_->barrier();
  if (n) std::memcpy(recv, acc.data(), n * esize);
}

}  // namespace cohort::comm
