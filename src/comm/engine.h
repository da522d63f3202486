// The collective engine: callers submit named tensor operations from any thread;
// one background thread per engine negotiates with the other ranks which names are
// ready everywhere and in which order, fuses small allreduces into one buffer, runs
// the collectives over a Transport and completes the requests.
//
// Why one thread: collectives must be issued in the same order on every rank, and MPI
// (or NCCL) calls from many threads would need a global order anyway. The thread
// sleeps on a condition variable; a submit wakes it at once, and so does the end of
// compute while it holds reductions (compute_end), and while this rank has operations
// pending (waiting for other ranks) it cycles every cycle_time_ms. With nothing pending
// it ticks every kIdleTick so that a rank stuck waiting for an idle peer is noticed
// (stall inspector) instead of hanging silently. Waiting for the other ranks inside a
// cycle sleeps too (the transports' control plane), so a waiting engine takes no core.
//
// With hold_during_compute a rank that computes puts negotiating off until its compute
// ends (or a caller waits for a collective): it could run nothing agreed meanwhile, and
// every cycle is a barrier of all ranks. A step of a model then costs one cycle.
//
// The engine itself takes submissions and runs the cycle; each job of a cycle is a
// part of its own: the Negotiator agrees with the other ranks on what is ready (cache
// bits, flags, full announcements), the ComputeGate holds reductions while a model
// computes, the Executor runs the collectives (the fusion buffer, one function per
// operation), the StallInspector reports and ends collectives some ranks never submit,
// and the Timeline records it all.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/compute_gate.h"
#include "comm/device_transport.h"
#include "comm/executor.h"
#include "comm/mailbox.h"
#include "comm/negotiator.h"
#include "comm/stall_inspector.h"
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

class Engine {
 public:
  // Collective: every rank constructs its engine (the first cycle measures clock offsets).
  // on_fatal is called on the engine thread when the transport fails (a lost peer).
  // device: where CUDA tensors go (empty: device tensors are refused).
  Engine(std::unique_ptr<Transport> transport, EngineOptions options,
         std::function<void(const std::string&)> on_fatal = {}, DeviceTransportFactory device = {});
  // Collective: waits until every rank's engine is shutting down, cancels what is
  // still pending, and has rank 0 write the timeline. Meanwhile it runs what every rank
  // submitted, and the other ranks learn within a few cycles that this one is shutting
  // down: their operations that it never submitted (and their joins, unless it joined)
  // fail with kPeerShutdown naming it, so they need not wait for stall_shutdown_s.
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

  // Point-to-point messages (see mailbox.h): between this rank and `peer` only, outside
  // negotiation, so no other rank submits anything. Host tensors; tags in [0, max_tag()].
  // Messages from one peer with one tag arrive in the order they were sent. The send
  // completes when `data` may be reused; the receive when the message is in `into`,
  // which it must fill exactly (kMismatch otherwise), and then tells `inbox` (if given)
  // with `cookie`. Throws kUnsupported when the transport has no point-to-point messages.
  std::shared_ptr<Request> send(int peer, int tag, Tensor data);
  std::shared_ptr<Request> recv(int peer, int tag, Tensor into, std::shared_ptr<Inbox> inbox = {}, uint64_t cookie = 0);
  // An inbox whose blocked pop() makes the engine poll for messages promptly.
  std::shared_ptr<Inbox> make_inbox() const { return std::make_shared<Inbox>(mailbox_.waits()); }
  int max_tag() const { return transport_->max_tag(); }

  void mark_step();
  // Brackets a model's forward/backward on this rank (any thread; nests). With
  // hold_during_compute, agreed reductions wait until no rank is inside such a bracket;
  // the end of the outermost bracket wakes the engine thread to run them.
  void compute_begin();
  void compute_end();
  EngineStats stats() const;
  // CPU seconds the engine thread has used so far (any thread).
  double cpu_seconds() const;
  // The most recent stall warning text (rank 0), for tests and tools.
  std::string last_stall_report() const;
  // Unblocks the engine thread when the process is going down (peer lost): stops the
  // waits of the host transport and of the device transport (NCCL: ncclCommAbort),
  // and refuses new submissions. Any thread; the engine is not usable afterwards.
  void abort();

  static constexpr std::chrono::milliseconds kIdleTick{50};
  // How often a rank that puts off negotiating while it computes (hold_during_compute)
  // cycles all the same.
  static constexpr std::chrono::milliseconds kComputeTick{1000};
  // How long the thread polls for new work (yielding) before it sleeps, while no compute
  // runs on this rank.
  static constexpr std::chrono::microseconds kPoll{50};

 private:
  void validate(const TensorEntry& e) const;
  std::shared_ptr<Request> submit_p2p(P2pOp op);
  void run();
  bool cycle();
  // Returns whether a negotiation cycle is due (work, shutdown, or its time has come);
  // false when only messages need posting or polling.
  bool wait_for_work();
  void progress_messages();
  void sync_clocks();
  void merge_timeline();
  void restart_barrier_numbering();
  void fail_all(const Status& s);

  std::unique_ptr<Transport> transport_;
  EngineOptions options_;
  std::function<void(const std::string&)> on_fatal_;
  int rank_, size_;

  // The parts, each with one job (see their headers).
  Timeline timeline_;
  EngineCounters counters_;
  LazyDeviceTransport device_;
  ComputeGate gate_;
  StallInspector stalls_;
  Negotiator negotiator_;  // engine thread only
  Executor executor_;      // engine thread only
  Mailbox mailbox_;        // engine thread only (but waits())

  // Shared with submitting threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TensorEntry> queue_;
  std::vector<P2pOp> messages_;  // posted by callers, not yet on the transport
  bool shutdown_requested_ = false;
  bool stopped_ = false;
  Status stop_status_;
  uint64_t submitted_ = 0;
  uint64_t barrier_count_ = 0;
  uint64_t join_epoch_ = 0;   // completed joins: part of barrier names
  bool thread_done_ = false;  // run() has returned: its CPU time is thread_cpu_s_
  double thread_cpu_s_ = 0;

  int64_t clock_offset_us_ = 0;   // engine thread only
  uint64_t stalls_seen_ = 0;      // engine thread only: the negotiator's stalls handled
  Clock::time_point next_cycle_;  // engine thread only: when an idle or busy cycle is due
  Clock::time_point last_cycle_;  // engine thread only: the end of the last cycle
  std::thread thread_;
  pthread_t thread_handle_{};  // set by the constructor, read by cpu_seconds()
};

}  // namespace cohort::comm
