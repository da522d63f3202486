// The collective engine: callers submit named tensor operations from any thread;
// one background thread per engine negotiates with the other ranks which names are
// ready everywhere and in which order, fuses small allreduces into one buffer, runs
// the collectives over a Transport and completes the requests.
//
// Why one thread: collectives must be issued in the same order on every rank, and MPI
// (or NCCL) calls from many threads would need a global order anyway. The thread
// sleeps on a condition variable; a submit wakes it at once, and while some rank
// still waits for others it cycles every cycle_time_ms. With nothing pending anywhere
// it ticks every kIdleTick so that a rank stuck waiting for an idle peer is noticed
// (stall inspector) instead of hanging silently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/negotiation.h"
#include "comm/timeline.h"
#include "comm/transport.h"
#include "comm/types.h"
#include "core/config.h"

namespace cohort::comm {

struct EngineOptions {
  size_t fusion_bytes = size_t{128} << 20;
  double cycle_time_ms = 1.0;
  size_t cache_capacity = 1024;
  double stall_warning_s = 60.0;
  double stall_shutdown_s = 0.0;
  std::string timeline_file;
  // Hold agreed reductions while a model computes on some rank (see compute_begin), and
  // run them once compute has finished on every rank: on a CPU whose cores all compute,
  // a reduction run during backward only competes with it for the cores.
  bool hold_during_compute = false;

  // From the option registry: fusion_threshold_mb, cycle_time_ms, cache_capacity,
  // stall_warning_s, stall_shutdown_s, timeline_file.
  static EngineOptions from_config(const Config& config);
};

// Where collectives of CUDA tensors run. Every collective whose tensors live on a CUDA
// device (DLPack kDLCUDA) runs on a second transport, NCCL in a runtime; host tensors
// stay on the engine's own transport. The device transport is created once, on the
// engine thread, when the first device collective is ready (all ranks agree first
// that each of them can create it; otherwise that collective fails on every rank
// naming the ranks that cannot and why). Device collectives are not fused: each runs
// as its own call, in place in the caller's tensors (no fusion buffer on the device);
// scales and averages run on the device through the kernels/ functors.
struct DeviceTransportFactory {
  Device device;  // the CUDA device this rank's device tensors must live on
  // Empty when this rank cannot move device tensors; `unavailable` then says why and
  // what would work, and submitting a device tensor fails with kUnsupported.
  std::function<std::unique_ptr<Transport>()> create;
  std::string unavailable;
};

struct EngineStats {
  uint64_t cycles = 0;
  uint64_t full_exchanges = 0;  // cycles that exchanged Metas (not just cache bits)
  uint64_t cache_hits = 0;      // tensors that became ready through the cache
  uint64_t fused_batches = 0;   // allreduce calls that carried more than one tensor
  uint64_t completed = 0;
};

class Engine {
 public:
  // Collective: every rank constructs its engine (the first cycle measures clock offsets).
  // on_fatal is called on the engine thread when the transport fails (a lost peer).
  // device: where CUDA tensors go (empty: device tensors are refused).
  Engine(std::unique_ptr<Transport> transport, EngineOptions options,
         std::function<void(const std::string&)> on_fatal = {}, DeviceTransportFactory device = {});
  // Collective: waits until every rank's engine is shutting down, cancels what is
  // still pending, and has rank 0 write the timeline.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char* transport_name() const { return transport_->name(); }

  // Validates and queues the entries as one request (a group completes together).
  // Throws kInvalidArgument for bad arguments, kInvalidState once the engine stopped.
  std::shared_ptr<Request> submit(std::vector<TensorEntry> group);
  std::shared_ptr<Request> submit(TensorEntry entry);
  std::shared_ptr<Request> barrier();
  // This rank has no more data. Until every rank has joined, it takes part in the
  // others' collectives without data of its own:
  //   allreduce      contributes zeros (so min/max/product see a zero; average still
  //                  divides by every rank);
  //   allgather      contributes no rows;
  //   broadcast      receives the root's data into scratch memory and drops it; if the
  //                  root itself has joined, the broadcast fails on every rank
  //                  (kMismatch) naming the tensor and the root;
  //   reducescatter  contributes zeros (as allreduce) and drops its block;
  //   alltoall       sends and receives zero-size blocks: the others receive zero rows
  //                  from it (recv_splits 0) and the rows they meant for it are dropped;
  //   barrier        counts as arrived.
  // Completes on every rank once all have joined, with the last rank to join; barrier
  // numbering then starts afresh on every rank.
  std::shared_ptr<Request> join();

  void mark_step();
  // Brackets a model's forward/backward on this rank (any thread; nests). With
  // hold_during_compute, agreed reductions wait until no rank is inside such a bracket.
  void compute_begin();
  void compute_end();
  EngineStats stats() const;
  // The most recent stall warning text (rank 0), for tests and tools.
  std::string last_stall_report() const;
  // Unblocks the engine thread when the process is going down (peer lost).
  void abort();

  static constexpr std::chrono::milliseconds kIdleTick{50};

 private:
  struct Pending;
  struct TableEntry;
  struct Response;

  void validate(const TensorEntry& e) const;
  void run();
  bool cycle();
  void wait_for_work();
  void sync_clocks();
  void merge_timeline();
  void add_pending(TensorEntry e);
  Meta meta_of(const TensorEntry& e) const;
  void process_messages(const std::vector<std::string>& messages, std::vector<Response>& ready);
  Response make_response(const std::string& name, std::vector<std::optional<Meta>> metas) const;
  void execute(std::vector<Response>& ready);
  void run_allreduce_batch(std::vector<Response*>& batch);
  void run_one(Response& r);
  // Allreduces of one dtype/op/scale reduced in place without the fusion buffer: the
  // large ones, or one alone in its call.
  void run_direct_allreduces(std::vector<Response*>& batch);
  void finish(Response& r, const Status& s);
  // The device transport, created on first use; null (and r finished with the error)
  // when some rank cannot create it.
  Transport* device_transport(Response& r);
  // One allreduce of device memory (no fusion); e is null on a joined rank.
  void run_device_allreduce(Response& r, TensorEntry* e, Transport& t);
  void check_stalls();
  void fail_all(const Status& s);

  std::unique_ptr<Transport> transport_;
  DeviceTransportFactory device_;
  EngineOptions options_;
  std::function<void(const std::string&)> on_fatal_;
  int rank_, size_;

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorEntry> queue_;
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  Status stop_status_;
  uint64_t submitted_ = 0;
  uint64_t barrier_count_ = 0;
  uint64_t join_epoch_ = 0;  // completed joins: part of barrier names
  EngineStats stats_;
  std::string last_stall_report_;
  int computing_ = 0;     // open compute_begin() brackets
  int compute_cpu_ = -1;  // the core the last bracket ended on (sched_getcpu), -1 unknown
  std::shared_ptr<WaitCount> waits_ = std::make_shared<WaitCount>();

  // Engine thread only.
  uint64_t next_seq_ = 0;
  std::map<uint64_t, Pending> pending_;
  std::unordered_map<std::string, uint64_t> pending_by_name_;
  std::unordered_map<std::string, TableEntry> table_;
  std::vector<std::string> table_order_;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  std::vector<uint64_t> submitted_counts_;
  ResponseCache cache_;
  bool global_idle_ = true;
  std::vector<Response> held_;  // agreed while some rank computed (hold_during_compute)
  std::vector<unsigned char> fusion_;
  Clock::time_point last_stall_check_;
  std::unique_ptr<Transport> device_transport_;
  std::string device_error_;  // set on every rank when the device transport cannot exist
  int64_t clock_offset_us_ = 0;

  Timeline timeline_;
  std::atomic<bool> aborted_{false};
  std::thread thread_;
};

}  // namespace cohort::comm
