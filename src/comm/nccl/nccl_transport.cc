#include "comm/nccl/nccl_transport.h"

#include <chrono>
#include <cstring>

#include "comm/mpi/mpi_error.h"
#include "comm/nccl/device_scale.h"
#include "core/logging.h"
#include "tensor/device_api.h"

namespace cohort::comm {
namespace {

std::string nccl_hint(ncclResult_t rc) {
  switch (rc) {
    case ncclSystemError:
      return "; a system call failed: check the shared-memory size (/dev/shm; docker --shm-size) and "
             "NCCL_SOCKET_IFNAME for the network interface, and run with NCCL_DEBUG=INFO";
    case ncclInvalidUsage:
      return "; NCCL rejected the usage: two ranks on one GPU is the usual cause (one process per GPU), "
             "run with NCCL_DEBUG=INFO";
    case ncclUnhandledCudaError:
      return "; a CUDA call failed inside NCCL: check the driver and the device";
    case ncclRemoteError:
      return "; a peer failed or the network dropped: check the other ranks' logs";
    default:
      return "; run with NCCL_DEBUG=INFO for details";
  }
}

void nccl_check(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) fail(Code::kNccl, call, " failed: ", ncclGetErrorString(rc), nccl_hint(rc));
}

void cuda_check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) fail(Code::kCuda, call, " failed: ", cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(kernels::Reduce op) {
  switch (op) {
    case kernels::Reduce::kSum:
      return ncclSum;
    case kernels::Reduce::kMin:
      return ncclMin;
    case kernels::Reduce::kMax:
      return ncclMax;
    case kernels::Reduce::kProd:
      return ncclProd;
  }
  return ncclSum;
}

// ncclGroupStart() until end(); a call that throws in between still ends the group on
// the way out, or every later NCCL call of this thread would join it and never launch.
class NcclGroup {
 public:
  NcclGroup() { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();  // unwinding from an error: that error is the one reported
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  bool open_ = true;
};

}  // namespace

NcclTransport::NcclTransport(MPI_Comm parent, int device, std::shared_ptr<Allocator> allocator)
    : control_(std::make_unique<MpiTransport>(parent, 0)), device_(device), allocator_(std::move(allocator)) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (control_->rank() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::string> ids = control_->allgather_bytes(std::string(reinterpret_cast<const char*>(&id), sizeof id));
  std::memcpy(&id, ids[0].data(), sizeof id);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  ncclResult_t rc = ncclCommInitRank(&comm_, control_->size(), id, control_->rank());
  if (rc != ncclSuccess) {
    cudaStreamDestroy(stream_);
    nccl_check(rc, "ncclCommInitRank");
  }
}

NcclTransport::~NcclTransport() {
  std::lock_guard lock(calls_);
  if (stream_ && !aborted_) cudaStreamSynchronize(stream_);  // enqueued collectives end first
  if (comm_ && !aborted_) ncclCommDestroy(comm_);            // ncclCommAbort has freed an aborted one
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclTransport::abort_waits() {
  control_->abort_waits();
  if (aborted_.exchange(true)) return;
  // From another thread, while the engine thread may wait in cudaStreamSynchronize
  // (ncclCommAbort stops the kernels that wait for a lost peer, so that wait returns) or
  // be inside an NCCL call. An enqueue takes microseconds, so the abort waits for it to
  // end, and every later call sees aborted_ before it touches the communicator. A call
  // still inside NCCL after a second waits there for a lost peer (a connection being set
  // up): only the abort ends it, so it goes ahead.
  std::unique_lock lock(calls_, std::defer_lock);
  if (!lock.try_lock_for(std::chrono::seconds(1)))
    COHORT_LOG_WARN("nccl: aborting the communicator while a call waits inside NCCL (a lost peer)");
  if (comm_) ncclCommAbort(comm_);
}

std::unique_lock<std::timed_mutex> NcclTransport::enter(const char* call) {
  std::unique_lock lock(calls_);
  check_open(call);
  return lock;
}

void NcclTransport::check_open(const char* call) const {
  if (aborted_) fail(Code::kCancelled, call, " abandoned: the runtime is shutting down after an error");
  // An error of a collective enqueued earlier (a peer that failed, the network): NCCL
  // reports it here, asynchronously.
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
    fail(Code::kNccl, call, ": an earlier NCCL collective failed: ", ncclGetErrorString(async), nccl_hint(async));
}

// Calls enqueue their work on the stream and return: results are there once the event
// record_done() gives completes. Only a failure to enqueue is reported here.
void NcclTransport::sync(const char* call) {
  check_open(call);
  cuda_check(cudaGetLastError(), call);
}

void NcclTransport::allreduce(void* buf, size_t count, DType t, kernels::Reduce op) {
  auto lock = enter("ncclAllReduce");
  if (count == 0) return;
  nccl_check(ncclAllReduce(buf, buf, count, nccl_type(t), nccl_op(op), comm_, stream_), "ncclAllReduce");
  sync("ncclAllReduce");
}

void NcclTransport::allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) {
  auto lock = enter("allgather");
  // NCCL has no allgatherv: one broadcast per rank, grouped.
  NcclGroup group;
  size_t offset = 0;
  for (int r = 0; r < size(); ++r) {
    size_t n = bytes[static_cast<size_t>(r)];
    void* dst = static_cast<char*>(recv) + offset;
    if (n == 0) continue;
    nccl_check(ncclBroadcast(r == rank() ? send : dst, dst, n, ncclUint8, r, comm_, stream_), "ncclBroadcast");
    offset += n;
  }
  group.end();
  sync("allgather");
}

void NcclTransport::broadcast(void* buf, size_t bytes, int root) {
  auto lock = enter("ncclBroadcast");
  if (bytes == 0) return;
  nccl_check(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
  sync("ncclBroadcast");
}

void NcclTransport::alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                              const std::vector<size_t>& recv_bytes) {
  auto lock = enter("alltoall");
  NcclGroup group;
  size_t so = 0, ro = 0;
  for (int r = 0; r < size(); ++r) {
    size_t sn = send_bytes[static_cast<size_t>(r)], rn = recv_bytes[static_cast<size_t>(r)];
    // A zero-size block on one side is zero-size on the other: both skip it.
    if (sn) nccl_check(ncclSend(static_cast<const char*>(send) + so, sn, ncclUint8, r, comm_, stream_), "ncclSend");
    if (rn) nccl_check(ncclRecv(static_cast<char*>(recv) + ro, rn, ncclUint8, r, comm_, stream_), "ncclRecv");
    so += sn;
    ro += rn;
  }
  group.end();
  sync("alltoall");
}

void NcclTransport::reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                                   kernels::Reduce op) {
  auto lock = enter("ncclReduceScatter");
  for (size_t c : counts)
    if (c != counts.front())
      fail(Code::kUnsupported, "reducescatter of device tensors needs a first dimension divisible by the ranks");
  if (counts.front() == 0) return;
  nccl_check(ncclReduceScatter(send, recv, counts.front(), nccl_type(t), nccl_op(op), comm_, stream_),
             "ncclReduceScatter");
  sync("ncclReduceScatter");
}

void NcclTransport::copy(void* dst, const void* src, size_t bytes, Device d) {
  if (bytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
}

void NcclTransport::zero(void* buf, size_t bytes) {
  if (bytes == 0) return;
  cuda_check(cudaMemsetAsync(buf, 0, bytes, stream_), "cudaMemsetAsync");
}

void NcclTransport::scale(void* buf, size_t count, DType t, double factor) {
  if (count == 0 || factor == 1.0) return;
  cuda_check(scale_on_device(buf, count, t, factor, stream_), "the scale kernel launch");
}

Stream NcclTransport::stream() const { return Stream(Device::cuda(device_), stream_); }

Tensor NcclTransport::allocate(const Shape& shape, DType t) { return Tensor::empty(shape, t, *allocator_, stream()); }

void NcclTransport::wait_event(const Event& e) { e.block(stream()); }

Event NcclTransport::record_done() { return record_event(stream()); }

}  // namespace cohort::comm
