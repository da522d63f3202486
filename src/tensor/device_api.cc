#include "tensor/device_api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/status.h"
#include "core/copy.h"
#include "tensor/test_device.h"

namespace cohort {

#if COHORT_HAVE_CUDA
DeviceApi& cuda_device_api();  // tensor/cuda_device_api.cc
#endif

std::string Device::to_string() const {
  switch (kind) {
    case Kind::kCpu:
      return "cpu";
    case Kind::kCuda:
      return "cuda:" + std::to_string(id);
    case Kind::kCudaHost:
      return "cuda_host";
    case Kind::kTest:
      return "test:" + std::to_string(id);
  }
  return "?";
}

Stream Stream::host(int threads) {
  Stream s;
  s.threads_ = threads > 1 ? threads : 1;
  return s;
}

namespace {

// The host: work runs inline, so every event is complete when it is made.
class HostApi final : public DeviceApi {
 public:
  const char* name() const override { return "host"; }
  void* allocate(int, size_t bytes) override {
    constexpr size_t kAlign = 64;
    return std::aligned_alloc(kAlign, (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign);
  }
  void deallocate(int, void* p) override { std::free(p); }
  void copy(void* dst, const void* src, size_t bytes, const Stream&) override {
    if (bytes) copy_bytes(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes, const Stream&) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  Stream create_stream(int) override { return {}; }
  void destroy_stream(const Stream&) override {}
  Event record(const Stream&) override { return {}; }
  void synchronize(const Stream&) override {}
};

}  // namespace

DeviceApi& device_api(Device::Kind kind) {
  static HostApi host;
  switch (kind) {
    case Device::Kind::kCpu:
    case Device::Kind::kCudaHost:
      return host;
    case Device::Kind::kTest:
      return TestDevice::instance();
    case Device::Kind::kCuda:
#if COHORT_HAVE_CUDA
      return cuda_device_api();
#else
      fail(Code::kUnsupported, "CUDA memory and streams need a cohort built with CUDA (COHORT_WITH_CUDA)");
#endif
  }
  fail(Code::kInternal, "unknown device kind ", static_cast<int>(kind));
}

OwnedStream::OwnedStream(Device device) : stream_(device_api(device.kind).create_stream(device.id)), owned_(true) {}

OwnedStream::~OwnedStream() {
  if (owned_) device_api(stream_.device().kind).destroy_stream(stream_);
}

OwnedStream& OwnedStream::operator=(OwnedStream&& o) noexcept {
  if (this != &o) {
    if (owned_) device_api(stream_.device().kind).destroy_stream(stream_);
    stream_ = o.stream_;
    owned_ = o.owned_;
    o.owned_ = false;
  }
  return *this;
}

// ---- the test device ----

struct TestDevice::Flag {
  void* stream = nullptr;
  std::atomic<bool> done{false};
};

class TestDevice::TestEvent final : public Event::Impl {
 public:
  TestEvent(TestDevice& dev, std::shared_ptr<Flag> flag) : dev_(dev), flag_(std::move(flag)) {}
  bool query() override { return flag_->done.load(); }
  void synchronize() override { dev_.synchronize(Stream({Device::Kind::kTest, 0}, flag_->stream)); }
  void block(const Stream&) override { synchronize(); }  // inline work: waiting means completing

 private:
  TestDevice& dev_;
  std::shared_ptr<Flag> flag_;
};

TestDevice& TestDevice::instance() {
  static TestDevice device;
  return device;
}

void* TestDevice::allocate(int, size_t bytes) {
  std::lock_guard lock(mu_);
  if (capacity_ && live_bytes_.load() + bytes > capacity_) return nullptr;
  void* p = std::malloc(std::max<size_t>(bytes, 1));
  if (!p) return nullptr;
  sizes_[p] = bytes;
  live_bytes_ += bytes;
  ++allocations_;
  return p;
}

bool TestDevice::memory_info(int, size_t& free, size_t& total) {
  std::lock_guard lock(mu_);
  if (!capacity_) return false;
  const size_t live = live_bytes_.load();
  total = capacity_;
  free = capacity_ > live ? capacity_ - live : 0;
  return true;
}

void TestDevice::deallocate(int, void* p) {
  if (!p) return;
  std::lock_guard lock(mu_);
  auto it = sizes_.find(p);
  require(it != sizes_.end(), "test device: freeing memory it never allocated");
  live_bytes_ -= it->second;
  sizes_.erase(it);
  std::free(p);
}

namespace {
thread_local uint64_t default_stream_work = 0;  // TestDevice::default_stream_work_here()
}  // namespace

uint64_t TestDevice::default_stream_work_here() { return default_stream_work; }

void TestDevice::copy(void* dst, const void* src, size_t bytes, const Stream& stream) {
  if (!stream.is_host() && !stream.native()) ++default_stream_work;
  if (bytes) std::memmove(dst, src, bytes);
}

void TestDevice::zero(void* dst, size_t bytes, const Stream& stream) {
  if (!stream.is_host() && !stream.native()) ++default_stream_work;
  if (bytes) std::memset(dst, 0, bytes);
}

Stream TestDevice::create_stream(int id) {
  return Stream({Device::Kind::kTest, id}, reinterpret_cast<void*>(next_stream_.fetch_add(1)));
}

Event TestDevice::record(const Stream& stream) {
  auto flag = std::make_shared<Flag>();
  flag->stream = stream.native();
  std::lock_guard lock(mu_);
  if (hold_)
    held_.push_back(flag);
  else
    flag->done = true;
  return Event(std::make_shared<TestEvent>(*this, flag));
}

void TestDevice::synchronize(const Stream& stream) {
  std::lock_guard lock(mu_);
  std::erase_if(held_, [&](const std::shared_ptr<Flag>& f) {
    if (f->stream != stream.native()) return false;
    f->done = true;
    return true;
  });
}

void TestDevice::hold_events(bool on) {
  std::lock_guard lock(mu_);
  hold_ = on;
}

void TestDevice::release_events() {
  std::lock_guard lock(mu_);
  for (auto& f : held_) f->done = true;
  held_.clear();
}

void TestDevice::set_capacity(size_t bytes) {
  std::lock_guard lock(mu_);
  capacity_ = bytes;
}

}  // namespace cohort
