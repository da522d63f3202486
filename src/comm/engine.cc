#include "comm/engine.h"

#include <cmath>
#include <thread>

#include "core/logging.h"
#include "core/threads.h"

namespace cohort::comm {
namespace {

// A default-constructed Tensor (no data, no shape) means "not given".
bool unset(const Tensor& t) { return t.data() == nullptr && t.ndim() == 0; }

}  // namespace

EngineOptions EngineOptions::from_config(const Config& config) {
  EngineOptions o;
  o.fusion_bytes = static_cast<size_t>(config.get_float("fusion_threshold_mb") * 1024.0 * 1024.0);
  o.cycle_time_ms = config.get_float("cycle_time_ms");
  o.cache_capacity = static_cast<size_t>(config.get_int("cache_capacity"));
  o.stall_warning_s = config.get_float("stall_warning_s");
  o.stall_shutdown_s = config.get_float("stall_shutdown_s");
  o.timeline_file = config.get_string("timeline_file");
  return o;
}

Engine::Engine(std::unique_ptr<Transport> transport, EngineOptions options,
               std::function<void(const std::string&)> on_fatal, DeviceTransportFactory device)
    : transport_(std::move(transport)),
      options_(std::move(options)),
      on_fatal_(std::move(on_fatal)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      device_(std::move(device)),
      gate_(options_.hold_during_compute),
      stalls_(rank_, options_.stall_warning_s, options_.stall_shutdown_s),
      negotiator_(*transport_, options_.cache_capacity, stalls_, timeline_, counters_),
      executor_(*transport_, device_, negotiator_, timeline_, counters_, options_.fusion_bytes,
                [this] { restart_barrier_numbering(); }),
      mailbox_(*transport_) {
  timeline_.enable(!options_.timeline_file.empty());
  // A caller that blocks on a collective while this rank computes needs it negotiated now.
  // (Only then: otherwise the submission has woken the thread already, and this wake-up
  // would only contend for its lock.)
  gate_.waits()->on_block = [this] {
    if (!gate_.computing()) return;
    std::lock_guard lock(mu_);
    cv_.notify_all();
  };
  thread_ = std::thread([this] {
    run();
    std::lock_guard lock(mu_);
    thread_done_ = true;
    thread_cpu_s_ = thread_cpu_seconds();
  });
  thread_handle_ = thread_.native_handle();
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::abort() {
  transport_->abort_waits();
  device_.abort();
  {
    std::lock_guard lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- submission

void Engine::validate(const TensorEntry& e) const {
  if (e.type == OpType::kJoin || e.type == OpType::kBarrier) return;
  require(!e.name.empty(), op_type_name(e.type), ": the tensor name is empty; give every collective a unique name");
  require(e.name.rfind("__", 0) != 0, "tensor name '", e.name, "' starts with '__', which is reserved");
  const Tensor& in = e.input;
  require(!unset(in) && in.defined(), "'", e.name, "': the input tensor has no data");
  if (!in.is_contiguous())
    fail(Code::kInvalidArgument, "'", e.name, "': the input ", in.describe(), " is not contiguous");
  if (in.device().kind == Device::Kind::kCuda) {
    if (!device_.factory().create)
      fail(Code::kUnsupported, "'", e.name, "': the tensor is in CUDA memory (", in.device().to_string(), ") but ",
           device_.factory().unavailable.empty() ? std::string("this engine has no device transport; pass host memory")
                                                 : device_.factory().unavailable);
    if (in.device() != device_.factory().device)
      fail(Code::kUnsupported, "'", e.name, "': the tensor is on ", in.device().to_string(),
           " but this rank's device collectives run on ", device_.factory().device.to_string(),
           " (one GPU per rank); move it there or pass host memory");
    if (e.type == OpType::kReducescatter && in.ndim() >= 1)
      require(in.dim(0) % size_ == 0, "'", e.name, "': reducescatter of CUDA tensors needs a first dimension (",
              in.dim(0), ") divisible by the number of ranks (", size_, "); NCCL scatters equal blocks");
  } else if (!transport_->supports(in.device())) {
    fail(Code::kUnsupported, "'", e.name, "': the ", transport_->name(), " transport cannot move tensors on ",
         in.device().to_string());
  }
  require(std::isfinite(e.prescale) && std::isfinite(e.postscale), "'", e.name, "': scale factors must be finite, got ",
          e.prescale, " and ", e.postscale);
  if (e.type == OpType::kAllreduce || e.type == OpType::kBroadcast) {
    const Tensor& out = e.output;
    require(out.defined(), "'", e.name, "': the output tensor has no data");
    if (!(out.shape() == in.shape() && out.dtype() == in.dtype() && out.device() == in.device()))
      fail(Code::kInvalidArgument, "'", e.name, "': output ", out.describe(), " does not match input ", in.describe());
    if (!out.is_contiguous())
      fail(Code::kInvalidArgument, "'", e.name, "': the output ", out.describe(), " is not contiguous");
  }
  if (e.type == OpType::kBroadcast)
    require(e.root >= 0 && e.root < size_, "'", e.name, "': broadcast root ", e.root, " is not a rank (0..", size_ - 1,
            ")");
  if (e.type == OpType::kAllgather || e.type == OpType::kAlltoall || e.type == OpType::kReducescatter)
    require(in.ndim() >= 1, "'", e.name, "': ", op_type_name(e.type), " needs at least one dimension, got a scalar");
  if (e.type == OpType::kAlltoall) {
    require(e.splits.size() == static_cast<size_t>(size_), "'", e.name, "': alltoall needs one split per rank (", size_,
            "), got ", e.splits.size());
    int64_t sum = 0;
    for (int64_t s : e.splits) {
      require(s >= 0, "'", e.name, "': alltoall split ", s, " is negative");
      sum += s;
    }
    require(sum == in.dim(0), "'", e.name, "': alltoall splits add up to ", sum, " but the first dimension is ",
            in.dim(0));
  }
}

std::shared_ptr<Request> Engine::submit(std::vector<TensorEntry> group) {
  require(!group.empty(), "an empty group of collectives was submitted");
  auto request = std::make_shared<Request>(static_cast<int>(group.size()), gate_.waits());
  auto now = Clock::now();
  for (TensorEntry& e : group) {
    if ((e.type == OpType::kAllreduce || e.type == OpType::kBroadcast) && unset(e.output)) e.output = e.input;
    if (e.type == OpType::kAlltoall && e.splits.empty() && e.input.ndim() >= 1) {
      require(e.input.dim(0) % size_ == 0, "'", e.name, "': alltoall without splits needs a first dimension (",
              e.input.dim(0), ") divisible by the number of ranks (", size_, ")");
      e.splits.assign(static_cast<size_t>(size_), e.input.dim(0) / size_);
    }
    validate(e);
    e.request = request;
    e.submitted = now;
  }
  for (size_t i = 0; i < group.size(); ++i)
    for (size_t j = i + 1; j < group.size(); ++j)
      require(group[i].name != group[j].name, "tensor name '", group[i].name, "' appears twice in one group");
  {
    std::lock_guard lock(mu_);
    if (stopped_) throw Error(stop_status_);
    if (shutdown_requested_) fail(Code::kInvalidState, "the collective engine is shutting down");
    submitted_ += group.size();
    for (TensorEntry& e : group) queue_.push_back(std::move(e));
  }
  cv_.notify_one();
  return request;
}

std::shared_ptr<Request> Engine::submit(TensorEntry entry) {
  std::vector<TensorEntry> group;
  group.push_back(std::move(entry));
  return submit(std::move(group));
}

std::shared_ptr<Request> Engine::barrier() {
  TensorEntry e;
  e.type = OpType::kBarrier;
  {
    std::lock_guard lock(mu_);
    e.name = cat("__barrier__.", join_epoch_, ".", barrier_count_++);
  }
  return submit(std::move(e));
}

std::shared_ptr<Request> Engine::join() {
  TensorEntry e;
  e.type = OpType::kJoin;
  e.name = kJoinName;
  return submit(std::move(e));
}

std::shared_ptr<Request> Engine::send(int peer, int tag, Tensor data) {
  P2pOp op;
  op.send = true;
  op.peer = peer;
  op.tag = tag;
  op.buffer = std::move(data);
  return submit_p2p(std::move(op));
}

std::shared_ptr<Request> Engine::recv(int peer, int tag, Tensor into, std::shared_ptr<Inbox> inbox, uint64_t cookie) {
  P2pOp op;
  op.peer = peer;
  op.tag = tag;
  op.buffer = std::move(into);
  op.inbox = std::move(inbox);
  op.cookie = cookie;
  return submit_p2p(std::move(op));
}

std::shared_ptr<Request> Engine::submit_p2p(P2pOp op) {
  const char* what = op.send ? "send" : "receive";
  if (!transport_->supports_p2p())
    fail(Code::kUnsupported, "the ", transport_->name(), " transport has no point-to-point messages");
  require(op.peer >= 0 && op.peer < size_, what, ": peer ", op.peer, " is not a rank (0..", size_ - 1, ")");
  require(op.tag >= 0 && op.tag <= transport_->max_tag(), what, ": tag ", op.tag, " is outside [0, ",
          transport_->max_tag(), "]");
  const Tensor& t = op.buffer;
  require(t.defined() && (t.data() != nullptr || t.nbytes() == 0), what, ": the tensor has no data");
  require(t.device().is_host() && t.is_contiguous(), what, ": ", t.describe(), " must be a contiguous host tensor");
  op.request = std::make_shared<Request>(1, mailbox_.waits());
  auto request = op.request;
  {
    std::lock_guard lock(mu_);
    if (stopped_) throw Error(stop_status_);
    if (shutdown_requested_) fail(Code::kInvalidState, "the collective engine is shutting down");
    messages_.push_back(std::move(op));
  }
  cv_.notify_one();
  return request;
}

void Engine::mark_step() { timeline_.instant("step"); }

void Engine::compute_begin() { gate_.begin(); }

void Engine::compute_end() {
  if (!gate_.end()) return;
  // Held reductions may run now. Notifying under mu_ keeps the wake-up from falling
  // between the engine thread's look at the gate and its sleep.
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

EngineStats Engine::stats() const { return counters_.snapshot(); }

double Engine::cpu_seconds() const {
  // Under the lock the thread cannot finish, so its clock is still there to read.
  std::lock_guard lock(mu_);
  return thread_done_ ? thread_cpu_s_ : thread_cpu_seconds(thread_handle_);
}

std::string Engine::last_stall_report() const { return stalls_.last_report(); }

void Engine::restart_barrier_numbering() {
  // Ranks that joined submitted fewer barriers: every rank starts counting afresh.
  std::lock_guard lock(mu_);
  ++join_epoch_;
  barrier_count_ = 0;
}

// ---------------------------------------------------------------- the thread

void Engine::run() {
  try {
    sync_clocks();
    next_cycle_ = Clock::now();
    while (true) {
      if (wait_for_work() && cycle()) break;
      progress_messages();
    }
    fail_all(Status(Code::kCancelled, "the collective engine shut down before every rank submitted this collective"));
    merge_timeline();
  } catch (const Error& e) {
    Status s = e.status();
    if (e.code() == Code::kMpi) {
      s = Status(Code::kPeerLost,
                 cat(e.what(),
                     "; a peer was probably lost (killed, crashed or out of memory): the runtime is "
                     "poisoned, restart the job. If no rank died, check the shared-memory size (/dev/shm) "
                     "and, across nodes, the network interface (-mca btl_tcp_if_include)"));
      if (on_fatal_) on_fatal_(e.what());
    }
    fail_all(s);
  } catch (const std::exception& e) {
    fail_all(Status(Code::kInternal, cat("collective engine failed: ", e.what())));
  }
}

bool Engine::wait_for_work() {
  std::unique_lock lock(mu_);
  // While this rank computes and holds reductions (no caller waits for one), negotiating
  // is put off: nothing agreed could run before compute ends here, and every cycle is a
  // barrier of all ranks that takes a core from compute. Its submissions are announced
  // when compute ends (compute_end wakes the thread), and it only ticks meanwhile
  // (kComputeTick), so that stalls and shutting-down peers are still noticed.
  auto deferring = [&] { return !gate_.releases(); };
  // Work now: the shutdown, held reductions while compute is done here (meet the other
  // ranks' cycles at once), or submissions unless they are put off.
  auto work = [&] { return shutdown_requested_ || gate_.release_pending() || (!queue_.empty() && !deferring()); };
  auto due = [&] { return deferring() ? std::max(next_cycle_, last_cycle_ + kComputeTick) : next_cycle_; };
  // A caller that just got its result often submits again within microseconds: while no
  // compute runs on this rank to take the core from, poll briefly (yielding) before
  // sleeping, since waking a sleeping thread costs more than the collective itself.
  const auto poll_until = Clock::now() + kPoll;
  while (!work() && messages_.empty() && !gate_.computing() && Clock::now() < poll_until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  while (!work() && messages_.empty()) {
    // Messages in flight are polled between cycles; a message never brings a cycle
    // forward, so ranks that only exchange messages do not negotiate more often.
    auto wake = due();
    if (Clock::now() >= wake) return true;
    if (mailbox_.active()) {
      wake = std::min<Clock::time_point>(wake, Clock::now() + mailbox_.poll_interval());
      cv_.wait_until(lock, wake);
      return work() || Clock::now() >= due();
    }
    cv_.wait_until(lock, wake);  // woken by a submission, compute_end, a blocked caller, shutdown
  }
  return work();  // else post the messages; the next cycle keeps its time
}

void Engine::progress_messages() {
  std::vector<P2pOp> fresh;
  {
    std::lock_guard lock(mu_);
    fresh.swap(messages_);
  }
  if (!fresh.empty()) mailbox_.post(fresh);
  if (mailbox_.active()) mailbox_.progress();
}

void Engine::sync_clocks() {
  transport_->barrier();
  clock_offset_us_ = Timeline::now_us();
}

void Engine::merge_timeline() {
  std::string mine = timeline_.enabled() ? timeline_.events_json(rank_, clock_offset_us_) : std::string();
  std::vector<std::string> all = transport_->allgather_bytes(mine);
  if (rank_ != 0 || options_.timeline_file.empty()) return;
  try {
    Timeline::write(options_.timeline_file, all);
  } catch (const Error& e) {
    COHORT_LOG_ERROR(e.what());
  }
}

void Engine::fail_all(const Status& s) {
  std::vector<TensorEntry> queued;
  std::vector<P2pOp> messages;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    stop_status_ = s.is_ok() ? Status(Code::kInvalidState, "the collective engine has stopped") : s;
    if (stop_status_.code() == Code::kCancelled)
      stop_status_ = Status(Code::kInvalidState, "the collective engine has shut down");
    queued.swap(queue_);
    messages.swap(messages_);
  }
  negotiator_.fail_all(s);
  for (TensorEntry& e : queued) e.request->complete_part(s);
  mailbox_.fail_all(s);
  for (P2pOp& op : messages) {
    if (op.inbox) op.inbox->push({op.cookie, s});
    op.request->complete_part(s);
  }
}

bool Engine::cycle() {
  auto now = Clock::now();
  std::vector<TensorEntry> fresh;
  Negotiator::Vote vote;
  {
    std::lock_guard lock(mu_);
    fresh.swap(queue_);
    vote.shutting_down = shutdown_requested_;
    vote.submitted = submitted_;
  }
  counters_.cycles.fetch_add(1, std::memory_order_relaxed);
  // After taking the queue: an operation submitted inside a compute bracket is seen
  // with its bracket open.
  vote.releases_held = gate_.releases();
  for (TensorEntry& e : fresh) negotiator_.add(std::move(e));

  Negotiator::Round round = negotiator_.negotiate(vote, now);
  if (round.full_exchange) counters_.full_exchanges.fetch_add(1, std::memory_order_relaxed);
  uint64_t hits = 0;
  for (const Response& r : round.ready) hits += r.cached ? 1 : 0;
  counters_.cache_hits.fetch_add(hits, std::memory_order_relaxed);

  // Every rank reaches the same decision from the same flags, and keeps the same held
  // list in the same order.
  if (!round.release) {
    for (const Response& r : round.ready) negotiator_.hold(r.name);
    counters_.held.fetch_add(round.ready.size(), std::memory_order_relaxed);
  }
  gate_.admit(round.ready, round.release);
  executor_.execute(round.ready);
  negotiator_.recheck_cached();
  if (negotiator_.stalled() > stalls_seen_) {
    stalls_seen_ = negotiator_.stalled();
    // A peer that stopped submitting may have left device collectives waiting for it on
    // the GPU: aborting the communicator ends them, so the work waiting on their
    // events does not hang (later device collectives fail with kCancelled).
    if (device_.created()) {
      COHORT_LOG_WARN(
          "a collective stalled past stall_shutdown_s: aborting the device communicator so that device "
          "work waiting for the missing ranks ends");
      device_.abort();
    }
  }
  last_cycle_ = Clock::now();
  stalls_.check(negotiator_.table(), last_cycle_);
  // Only a rank with operations pending cycles at cycle_time_ms: a rank with none is
  // needed by no cycle until it submits, which starts one at once.
  next_cycle_ =
      last_cycle_ + (negotiator_.pending() ? std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double, std::milli>(options_.cycle_time_ms))
                                           : std::chrono::duration_cast<Clock::duration>(kIdleTick));
  return round.all_shutting_down;
}

}  // namespace cohort::comm
