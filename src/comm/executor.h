// Execution: runs the collectives a cycle made ready, in the same order on every rank,
// one function per operation. Host tensors go over the engine's transport; CUDA
// tensors over the device transport, each as its own call. Small host allreduces with
// the same dtype, op and scales are fused through one host buffer (Horovod's fusion
// buffer); large ones reduce in place, all of a cycle in one pipelined call.
#pragma once

#include <functional>
#include <vector>

#include "comm/device_transport.h"
#include "comm/negotiation.h"
#include "comm/negotiator.h"
#include "comm/timeline.h"
#include "comm/transport.h"
#include "comm/types.h"

namespace cohort::comm {

// What an allreduce or reducescatter result is multiplied by after the reduction: the
// caller's postscale, divided by the number of ranks for an average (ranks that have
// joined count: they contribute zeros).
double postscale_factor(const Meta& agreed, int size);
// What a rank that has joined contributes to a reduction: zeros of the agreed shape and
// dtype, in `t`'s memory.
Tensor joined_contribution(Transport& t, const Meta& agreed);
// The element-wise operation of a ReduceOp (an average sums; postscale_factor divides).
kernels::Reduce to_kernel(ReduceOp op);

class Executor {
 public:
  // on_join runs when a join completes on every rank, before the join request does.
  Executor(Transport& host, LazyDeviceTransport& device, Negotiator& negotiator, Timeline& timeline,
           EngineCounters& counters, size_t fusion_bytes, std::function<void()> on_join);

  // Runs (and completes, through the negotiator) every response, in order.
  void execute(std::vector<Response>& ready);

  // Tensors this large reduce in place, without the copies into and out of the fusion
  // buffer: the transport already cuts them into cache-sized chunks.
  static constexpr size_t kDirectBytes = size_t{1} << 20;

 private:
  // The transport for r's tensors; null (and r completed with the reason) when the
  // device transport cannot exist.
  Transport* transport_for(Response& r);
  void run_one(Response& r);
  // Copies the batch into the fusion buffer, reduces it in one call, copies it back.
  void allreduce_fused(const std::vector<Response*>& batch);
  // Reduces each tensor of the batch in place (in the caller's output) in one call.
  void allreduce_direct(const std::vector<Response*>& batch, Transport& t);
  // Allreduces of device tensors: one alone runs in place; several go through
  // device_fusion_, one call on the device transport's stream.
  void run_device_allreduce(const std::vector<Response*>& batch);
  void allreduce_fused_device(const std::vector<Response*>& batch, Transport& t);
  // e is null on a rank that has joined (every function below).
  void broadcast(const Meta& a, TensorEntry* e, Transport& t);
  void allgather(const Response& r, TensorEntry* e, Transport& t);
  void alltoall(const Response& r, TensorEntry* e, Transport& t);
  void reducescatter(const Meta& a, TensorEntry* e, Transport& t);
  void join(const Meta& a, TensorEntry* e);

  Transport& host_;
  LazyDeviceTransport& device_;
  Negotiator& negotiator_;
  Timeline& timeline_;
  EngineCounters& counters_;
  const size_t fusion_bytes_;
  std::function<void()> on_join_;
  const int rank_, size_;
  std::vector<unsigned char> fusion_;
  Tensor device_fusion_;  // the device transport's fusion buffer (grown as needed)
};

}  // namespace cohort::comm
