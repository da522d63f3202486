#include "comm/staged/staged_transport.h"

#include <map>
#include <numeric>

#include "core/status.h"
#include "tensor/device_api.h"

namespace cohort::comm {

StagedTransport::StagedTransport(std::unique_ptr<Transport> host, Device device, std::shared_ptr<Allocator> pinned,
                                 std::shared_ptr<Allocator> device_memory)
    : host_(std::move(host)), device_(device), pinned_(std::move(pinned)), device_memory_(std::move(device_memory)) {
  require(host_ && host_->supports(Device::cpu()), "the staged transport needs a host transport");
  require(!device_.is_host(), "the staged transport moves device tensors, not ", device_.to_string());
  stream_ = device_api(device_.kind).create_stream(device_.id);
}

StagedTransport::~StagedTransport() {
  try {
    DeviceApi& api = device_api(device_.kind);
    api.synchronize(stream_);
    api.destroy_stream(stream_);
  } catch (...) {  // a device in error at exit: nothing left to order
  }
}

void* StagedTransport::staging(size_t bytes, int slot) {
  std::shared_ptr<Storage>& s = staging_[slot];
  if (!s || s->bytes() < bytes) {
    s.reset();
    s = pinned_->allocate(std::max<size_t>(bytes, 1));
  }
  return s->data();
}

void StagedTransport::to_host(void* host, const void* device, size_t bytes) { copy(host, device, bytes, device_); }

void StagedTransport::to_device(void* device, const void* host, size_t bytes) { copy(device, host, bytes, device_); }

void StagedTransport::allreduce(void* buf, size_t count, DType t, kernels::Reduce op) {
  const size_t bytes = count * dtype_size(t);
  void* h = staging(bytes);
  to_host(h, buf, bytes);
  host_->allreduce(h, count, t, op);
  to_device(buf, h, bytes);
}

void StagedTransport::allreduce_many(const std::vector<std::pair<void*, size_t>>& bufs, DType t, kernels::Reduce op) {
  // One staged buffer for all of them, reduced in one call of the host transport.
  size_t total = 0;
  for (const auto& [buf, count] : bufs) total += count;
  char* h = static_cast<char*>(staging(total * dtype_size(t)));
  size_t off = 0;
  for (const auto& [buf, count] : bufs) {
    to_host(h + off, buf, count * dtype_size(t));
    off += count * dtype_size(t);
  }
  host_->allreduce(h, total, t, op);
  off = 0;
  for (const auto& [buf, count] : bufs) {
    to_device(buf, h + off, count * dtype_size(t));
    off += count * dtype_size(t);
  }
}

void StagedTransport::allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) {
  const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t{0});
  void* hs = staging(bytes[static_cast<size_t>(rank())], 0);
  void* hr = staging(total, 1);
  to_host(hs, send, bytes[static_cast<size_t>(rank())]);
  host_->allgatherv(hs, hr, bytes);
  to_device(recv, hr, total);
}

void StagedTransport::broadcast(void* buf, size_t bytes, int root) {
  void* h = staging(bytes);
  if (rank() == root) to_host(h, buf, bytes);
  host_->broadcast(h, bytes, root);
  if (rank() != root) to_device(buf, h, bytes);
}

void StagedTransport::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                                const std::vector<size_t>& recv_bytes) {
  const size_t s = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t r = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  void* hs = staging(s, 0);
  void* hr = staging(r, 1);
  to_host(hs, send, s);
  host_->alltoallv(hs, send_bytes, hr, recv_bytes);
  to_device(recv, hr, r);
}

void StagedTransport::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                                     kernels::Reduce op) {
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0}) * dtype_size(t);
  const size_t mine = counts[static_cast<size_t>(rank())] * dtype_size(t);
  void* hs = staging(total, 0);
  void* hr = staging(mine, 1);
  to_host(hs, send, total);
  host_->reduce_scatter(hs, hr, counts, t, op);
  to_device(recv, hr, mine);
}

void StagedTransport::copy(void* dst, const void* src, size_t bytes, Device) {
  if (!bytes) return;
  DeviceApi& api = device_api(device_.kind);
  api.copy(dst, src, bytes, stream_);
  api.synchronize(stream_);
}

Tensor StagedTransport::allocate(const Shape& shape, DType t) { return Tensor::empty(shape, t, *device_memory_); }

void StagedTransport::zero(void* buf, size_t bytes) {
  if (!bytes) return;
  DeviceApi& api = device_api(device_.kind);
  api.zero(buf, bytes, stream_);
  api.synchronize(stream_);
}

void StagedTransport::scale(void* buf, size_t count, DType t, double factor) {
  if (count == 0 || factor == 1.0) return;
  const size_t bytes = count * dtype_size(t);
  void* h = staging(bytes);
  to_host(h, buf, bytes);
  kernels::scale(h, count, t, factor);
  to_device(buf, h, bytes);
}

DeviceSharing device_sharing(const std::vector<std::string>& local_ids) {
  std::map<std::string, std::vector<size_t>> by_id;
  for (size_t r = 0; r < local_ids.size(); ++r) by_id[local_ids[r]].push_back(r);
  DeviceSharing out;
  for (const auto& [id, ranks] : by_id) {
    if (ranks.size() < 2) continue;
    out.shared = true;
    std::string list;
    for (size_t r : ranks) list += cat(list.empty() ? "" : ", ", r);
    out.detail += cat(out.detail.empty() ? "" : "; ", "local ranks ", list, " share device ", id);
  }
  return out;
}

}  // namespace cohort::comm
