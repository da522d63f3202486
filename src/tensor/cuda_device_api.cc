// The CUDA runtime behind DeviceApi (CUDA builds only). Streams are non-blocking
// (they never wait for the legacy default stream); events are created without timing.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

#include "core/logging.h"
#include "core/status.h"
#include "tensor/cuda_graph.h"
#include "tensor/device_api.h"

namespace cohort {
namespace {

void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) fail(Code::kCuda, call, " failed: ", cudaGetErrorString(rc), " (error ", int(rc), ")");
}

cudaStream_t native(const Stream& s) { return static_cast<cudaStream_t>(s.native()); }

// Makes the stream's device current on this thread (CUDA calls act on the current one).
void use_device(const Stream& s) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != s.device().id) check(cudaSetDevice(s.device().id), "cudaSetDevice");
}

// An event recorded where it is made (a timed one also marks the time).
class CudaEvent final : public CudaEventImpl {
 public:
  explicit CudaEvent(const Stream& s, bool timed = false) : CudaEventImpl(on_device_of(s, timed)) {
    check(cudaEventRecord(event_, native(s)), "cudaEventRecord");
  }

 private:
  static bool on_device_of(const Stream& s, bool timed) {  // the event is made on the stream's device
    use_device(s);
    return timed;
  }
};

class CudaApi final : public DeviceApi {
 public:
  const char* name() const override { return "cuda"; }
  void* allocate(int id, size_t bytes) override {
    check(cudaSetDevice(id), "cudaSetDevice");
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky, but clear it for the next call
      return nullptr;
    }
    check(rc, "cudaMalloc");
    return p;
  }
  bool memory_info(int id, size_t& free, size_t& total) override {
    if (cudaSetDevice(id) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess) return true;
    cudaGetLastError();
    return false;
  }
  // A destructor path: a failure cannot be thrown from here. It is taken off CUDA's
  // last-error slot, so that the next launch's check does not report it as its own (an
  // error that poisons the context stays and surfaces there anyway), and the first one
  // is logged; none is while the process exits (CUDA unloading, its context gone).
  void deallocate(int id, void* p) override {
    if (!p) return;
    cudaError_t rc = cudaSetDevice(id);
    if (rc == cudaSuccess) rc = cudaFree(p);
    if (rc == cudaSuccess) return;
    cudaGetLastError();
    if (rc == cudaErrorCudartUnloading || rc == cudaErrorContextIsDestroyed) return;
    if (!free_failed_.exchange(true))
      COHORT_LOG_WARN("freeing ", p, " on cuda:", id, " failed: ", cudaGetErrorString(rc), " (error ", int(rc),
                      "); later failed frees are not logged");
  }
  // On the default stream (a copy asked for with a host stream) a call first waits for
  // all work on the device: cohort's streams do not wait for the legacy default stream,
  // so "complete on return" also means "after what was enqueued before".
  void copy(void* dst, const void* src, size_t bytes, const Stream& s) override {
    if (!bytes) return;
    use_device(s);
    if (!s.native()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(s)), "cudaMemcpyAsync");
    if (!s.native()) check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
  void zero(void* dst, size_t bytes, const Stream& s) override {
    if (!bytes) return;
    use_device(s);
    if (!s.native()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemsetAsync(dst, 0, bytes, native(s)), "cudaMemsetAsync");
    if (!s.native()) check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
  }
  Stream create_stream(int id) override {
    check(cudaSetDevice(id), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return Stream(Device::cuda(id), s);
  }
  void destroy_stream(const Stream& s) override {
    if (s.native()) cudaStreamDestroy(native(s));
  }
  Event record(const Stream& s) override { return Event(std::make_shared<CudaEvent>(s)); }
  Event record_timed(const Stream& s) override { return Event(std::make_shared<CudaEvent>(s, true)); }
  double elapsed(const Event& start, const Event& stop) override {
    const auto* a = dynamic_cast<const CudaEvent*>(start.impl().get());
    const auto* b = dynamic_cast<const CudaEvent*>(stop.impl().get());
    if (!a || !b) return 0;
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a->get(), b->get()), "cudaEventElapsedTime");
    return ms / 1e3;
  }
  void synchronize(const Stream& s) override {
    use_device(s);
    check(cudaStreamSynchronize(native(s)), "cudaStreamSynchronize");
  }
  // Stream capture in thread-local mode: a call of this thread that a graph cannot hold
  // fails the capture instead of running.
  std::shared_ptr<void> capture_graph(const Stream& s, const std::function<void()>& enqueue) override {
    use_device(s);
    // A failure leaves no error behind for the next launch's check (the caller may go on
    // without graphs); the exception carries it.
    auto failed = [](cudaError_t rc, const char* call) {
      cudaGetLastError();
      check(rc, call);
    };
    if (const cudaError_t rc = cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal); rc != cudaSuccess)
      failed(rc, "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(native(s), &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // the step's own error is the one thrown
      throw;
    }
    if (const cudaError_t rc = cudaStreamEndCapture(native(s), &graph); rc != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      failed(rc, "cudaStreamEndCapture");
    }
    try {
      return instantiate_graph(graph);
    } catch (...) {
      cudaGetLastError();
      throw;
    }
  }
  void launch_graph(const std::shared_ptr<void>& graph, const Stream& s) override {
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), native(s)), "cudaGraphLaunch");
  }

 private:
  std::atomic<bool> free_failed_{false};  // a failed free was logged
};

}  // namespace

CudaEventImpl::CudaEventImpl() : CudaEventImpl(false) {}
CudaEventImpl::CudaEventImpl(bool timed) {
  check(cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags");
}
CudaEventImpl::~CudaEventImpl() { cudaEventDestroy(event_); }

bool CudaEventImpl::query() {
  const cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) return false;
  check(rc, "cudaEventQuery");
  return true;
}
void CudaEventImpl::synchronize() { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
void CudaEventImpl::block(const Stream& s) {
  if (s.device().kind != Device::Kind::kCuda) return synchronize();
  check(cudaStreamWaitEvent(native(s), event_, 0), "cudaStreamWaitEvent");
}

void record_in_capture(CudaEventImpl& event, cudaStream_t stream) {
  check(cudaEventRecordWithFlags(event.get(), stream, cudaEventRecordExternal), "cudaEventRecordWithFlags");
}

std::shared_ptr<void> instantiate_graph(cudaGraph_t graph) {
  size_t nodes = 0;
  const char* call = "cudaGraphGetNodes";
  cudaError_t rc = cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  if (rc == cudaSuccess && nodes > 0) {
    call = "cudaGraphInstantiateWithFlags";
    rc = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  }
  cudaGraphDestroy(graph);
  check(rc, call);
  if (!exec) return nullptr;  // no work captured
  return std::shared_ptr<void>(exec, [](void* e) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e)); });
}

DeviceApi& cuda_device_api() {
  static CudaApi api;
  return api;
}

}  // namespace cohort
