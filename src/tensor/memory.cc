#include "tensor/memory.h"

namespace cohort {

Memory::Memory() : host_(make_host_allocator()) {}

std::shared_ptr<PinnedHostAllocator> Memory::pinned() {
  std::lock_guard lock(mu_);
  if (!pinned_) pinned_ = make_pinned_host_allocator();
  return pinned_;
}

std::shared_ptr<Allocator> Memory::on(Device d) {
  if (d.kind == Device::Kind::kCpu) return host_;
  if (d.kind == Device::Kind::kCudaHost) return pinned();
  std::lock_guard lock(mu_);
  auto& a = devices_[{static_cast<int>(d.kind), d.id}];
  if (!a) a = make_caching_allocator(d);
  return a;
}

std::vector<std::pair<Device, MemoryStats>> Memory::device_stats() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Device, MemoryStats>> out;
  for (const auto& [key, a] : devices_) out.emplace_back(a->device(), a->stats());
  return out;
}

MemoryStats Memory::stats_of(Device d) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find({static_cast<int>(d.kind), d.id});
  return it == devices_.end() ? MemoryStats{} : it->second->stats();
}

void Memory::empty_caches() {
  std::vector<std::shared_ptr<Allocator>> caches;
  {
    std::lock_guard lock(mu_);  // not held while the device frees: other threads' on() goes on
    for (const auto& [key, a] : devices_) caches.push_back(a);
  }
  for (const auto& a : caches) a->empty_cache();
}

}  // namespace cohort
