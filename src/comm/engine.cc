#include "comm/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <pthread.h>
#include <sched.h>

#include "core/logging.h"
#include "kernels/copy.h"

namespace cohort::comm {
namespace {

constexpr const char* kJoinName = "__join__";
// Tensors this large reduce in place, without the copies into and out of the fusion
// buffer: the transport already cuts them into cache-sized chunks.
constexpr size_t kDirectBytes = size_t{1} << 20;

kernels::Reduce to_kernel(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return kernels::Reduce::kMin;
    case ReduceOp::kMax:
      return kernels::Reduce::kMax;
    case ReduceOp::kProduct:
      return kernels::Reduce::kProd;
    default:
      return kernels::Reduce::kSum;
  }
}

// A default-constructed Tensor (no data, no shape) means "not given".
bool unset(const Tensor& t) { return t.data() == nullptr && t.ndim() == 0; }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? ", " : "", ranks[i]);
  return s + "]";
}

int64_t row_elems(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Rows of a reducescatter's first dimension that land on each rank.
std::vector<int64_t> scatter_rows(int64_t rows, int size) {
  std::vector<int64_t> out(static_cast<size_t>(size), rows / size);
  for (int r = 0; r < rows % size; ++r) ++out[static_cast<size_t>(r)];
  return out;
}

}  // namespace

struct Engine::Pending {
  enum class State { kNew, kCached, kAnnounced, kHeld };  // kHeld: agreed, waiting for compute to end
  State state = State::kNew;
  TensorEntry entry;
  Meta meta;
  size_t bit = 0;
  bool skip_cache = false;   // waited long enough that the stall inspector must see it
  int64_t exchanged_us = 0;  // end of the first exchange that carried it (timeline)
};

struct Engine::TableEntry {
  std::vector<std::optional<Meta>> metas;
  Clock::time_point first_seen;
  bool warned = false;
};

struct Engine::Response {
  std::string name;
  std::vector<std::optional<Meta>> metas;
  Meta agreed;
  std::string error;
  bool cached = false;
  bool with_joined = false;
  int64_t ready_us = 0;
};

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
      device_(std::move(device)),
      options_(std::move(options)),
      on_fatal_(std::move(on_fatal)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      joined_(static_cast<size_t>(size_), false),
      submitted_counts_(static_cast<size_t>(size_), 0),
      cache_(options_.cache_capacity) {
  timeline_.enable(!options_.timeline_file.empty());
  last_stall_check_ = Clock::now();
  thread_ = std::thread([this] { run(); });
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
  aborted_ = true;
  transport_->abort_waits();
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
    if (!device_.create)
      fail(Code::kUnsupported, "'", e.name, "': the tensor is in CUDA memory (", in.device().to_string(), ") but ",
           device_.unavailable.empty() ? std::string("this engine has no device transport; pass host memory")
                                       : device_.unavailable);
    if (in.device() != device_.device)
      fail(Code::kUnsupported, "'", e.name, "': the tensor is on ", in.device().to_string(),
           " but this rank's device collectives run on ", device_.device.to_string(),
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
  auto request = std::make_shared<Request>(static_cast<int>(group.size()), waits_);
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

void Engine::mark_step() { timeline_.instant("step"); }

void Engine::compute_begin() {
  std::lock_guard lock(mu_);
  ++computing_;
}

void Engine::compute_end() {
  {
    std::lock_guard lock(mu_);
    if (computing_ == 0 || --computing_ > 0) return;
    compute_cpu_ = sched_getcpu();  // the core compute is about to leave idle
  }
  cv_.notify_all();  // held reductions may run now
}

EngineStats Engine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::string Engine::last_stall_report() const {
  std::lock_guard lock(mu_);
  return last_stall_report_;
}

// ---------------------------------------------------------------- the thread

void Engine::run() {
  try {
    sync_clocks();
    while (true) {
      wait_for_work();
      if (cycle()) break;
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

void Engine::wait_for_work() {
  std::unique_lock lock(mu_);
  // A caller that just got its result often submits again within microseconds: poll
  // briefly (yielding the core) before sleeping.
  auto until = Clock::now() + std::chrono::microseconds(Request::kSpinUs);
  while (queue_.empty() && !shutdown_requested_ && Clock::now() < until) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  if (!queue_.empty() || shutdown_requested_) return;
  // Held reductions and compute done here: meet the other ranks' next cycles at once.
  if (!held_.empty() && computing_ == 0) return;
  bool busy = !pending_.empty() || !global_idle_;
  auto timeout = busy ? std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double, std::milli>(options_.cycle_time_ms))
                      : std::chrono::duration_cast<Clock::duration>(kIdleTick);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || shutdown_requested_; });
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

Meta Engine::meta_of(const TensorEntry& e) const {
  Meta m;
  m.name = e.name;
  m.type = e.type;
  m.dtype = e.input.dtype();
  m.op = e.op;
  m.root = e.root;
  m.prescale = e.prescale;
  m.postscale = e.postscale;
  m.shape = e.input.shape();
  m.splits = e.splits;
  m.device = e.input.device().kind == Device::Kind::kCuda;
  return m;
}

void Engine::add_pending(TensorEntry e) {
  if (pending_by_name_.count(e.name)) {
    e.request->complete_part(
        Status(Code::kInvalidArgument, cat("tensor name '", e.name, "' is already pending on rank ", rank_,
                                           "; wait for it before submitting the name again")));
    return;
  }
  Pending p;
  p.meta = meta_of(e);
  p.entry = std::move(e);
  uint64_t seq = next_seq_++;
  pending_by_name_[p.entry.name] = seq;
  pending_.emplace(seq, std::move(p));
}

void Engine::fail_all(const Status& s) {
  std::vector<TensorEntry> queued;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    stop_status_ = s.is_ok() ? Status(Code::kInvalidState, "the collective engine has stopped") : s;
    if (stop_status_.code() == Code::kCancelled)
      stop_status_ = Status(Code::kInvalidState, "the collective engine has shut down");
    queued.swap(queue_);
  }
  for (auto& [seq, p] : pending_) p.entry.request->complete_part(s);
  pending_.clear();
  pending_by_name_.clear();
  for (TensorEntry& e : queued) e.request->complete_part(s);
}

bool Engine::cycle() {
  auto now = Clock::now();
  std::vector<TensorEntry> fresh;
  bool shutting_down, computing;
  {
    std::lock_guard lock(mu_);
    fresh.swap(queue_);
    shutting_down = shutdown_requested_;
    computing = computing_ > 0;
    ++stats_.cycles;
  }
  for (TensorEntry& e : fresh) add_pending(std::move(e));

  bool any_joined = std::find(joined_.begin(), joined_.end(), true) != joined_.end();
  bool use_cache = cache_.capacity() > 0 && !any_joined;
  double min_threshold = 0;
  for (double t : {options_.stall_warning_s, options_.stall_shutdown_s})
    if (t > 0) min_threshold = min_threshold > 0 ? std::min(min_threshold, t) : t;

  size_t cache_words = (cache_.capacity() + 63) / 64;
  std::vector<uint64_t> words(1 + cache_words, 0);
  Message msg;
  {
    std::lock_guard lock(mu_);
    msg.submitted = submitted_;
  }
  std::vector<uint64_t> withdrawn;
  for (auto& [seq, p] : pending_) {
    double age = std::chrono::duration<double>(now - p.entry.submitted).count();
    if (p.state == Pending::State::kCached && min_threshold > 0 && age > 0.5 * min_threshold)
      p.skip_cache = true;  // let the table see it, for the stall inspector
    if (p.state == Pending::State::kCached && p.skip_cache) p.state = Pending::State::kNew;
    if (p.state == Pending::State::kNew) {
      auto bit = use_cache && !p.skip_cache && p.entry.type != OpType::kBarrier && p.entry.type != OpType::kJoin
                     ? cache_.find(p.meta.name)
                     : std::nullopt;
      const auto* mine = bit ? &cache_.metas(*bit)[static_cast<size_t>(rank_)] : nullptr;
      if (mine && *mine && (*mine)->same_signature(p.meta)) {
        p.state = Pending::State::kCached;
        p.bit = *bit;
      } else {
        p.state = Pending::State::kAnnounced;
        msg.metas.push_back(p.meta);
      }
    }
    if (p.state == Pending::State::kCached) {
      words[1 + p.bit / 64] |= uint64_t{1} << (p.bit % 64);
    } else if (p.state == Pending::State::kAnnounced && options_.stall_shutdown_s > 0 &&
               age > options_.stall_shutdown_s && p.entry.type != OpType::kJoin) {
      std::string missing;
      auto it = table_.find(p.meta.name);
      if (it != table_.end()) {
        std::vector<int> ranks;
        for (int r = 0; r < size_; ++r)
          if (!it->second.metas[static_cast<size_t>(r)] && !joined_[static_cast<size_t>(r)]) ranks.push_back(r);
        missing = cat(": ranks ", rank_list(ranks), " never submitted it");
      }
      std::string counts;
      for (int r = 0; r < size_; ++r) counts += cat(r ? ", " : "", r, ": ", submitted_counts_[static_cast<size_t>(r)]);
      p.entry.request->complete_part(
          Status(Code::kStalled,
                 cat("collective '", p.meta.name, "' (", p.meta.describe(), ") stalled for ", options_.stall_shutdown_s,
                     " s (stall_shutdown_s)", missing, "; operations submitted per rank: ", counts)));
      Meta w = p.meta;
      w.kind = Meta::Kind::kWithdraw;
      msg.metas.push_back(std::move(w));
      withdrawn.push_back(seq);
    }
  }
  for (uint64_t seq : withdrawn) {
    pending_by_name_.erase(pending_.at(seq).meta.name);
    pending_.erase(seq);
  }

  // Flag bits, ANDed across ranks: 1 = nobody announced, 2 = everybody shutting down,
  // 4 = nobody has anything pending, 8 = nobody holds reductions back for compute.
  uint64_t flags = 0;
  if (msg.metas.empty()) flags |= 1;
  if (shutting_down) flags |= 2;
  if (pending_.empty()) flags |= 4;
  if (!options_.hold_during_compute || !computing || waits_->blocked > 0) flags |= 8;
  words[0] = flags;
  transport_->and_words(words);
  bool anyone_announced = !(words[0] & 1);
  bool all_shutting_down = (words[0] & 2) != 0;
  global_idle_ = (words[0] & 4) != 0;
  bool release = (words[0] & 8) != 0 || all_shutting_down;

  int64_t ready_us = Timeline::now_us();
  if (timeline_.enabled())
    for (auto& [seq, p] : pending_)
      if (p.exchanged_us == 0) p.exchanged_us = ready_us;
  std::vector<Response> ready;
  for (size_t w = 1; w < words.size(); ++w) {
    for (uint64_t bits = words[w]; bits; bits &= bits - 1) {
      size_t bit = (w - 1) * 64 + static_cast<size_t>(__builtin_ctzll(bits));
      Response r = make_response(cache_.name(bit), cache_.metas(bit));
      r.cached = true;
      r.ready_us = ready_us;
      ready.push_back(std::move(r));
    }
  }
  if (anyone_announced) {
    std::vector<std::string> messages = transport_->allgather_bytes(encode(msg));
    {
      std::lock_guard lock(mu_);
      ++stats_.full_exchanges;
    }
    size_t first_new = ready.size();
    process_messages(messages, ready);
    for (size_t i = first_new; i < ready.size(); ++i) ready[i].ready_us = ready_us;
  }
  {
    std::lock_guard lock(mu_);
    for (const Response& r : ready) stats_.cache_hits += r.cached ? 1 : 0;
  }
  // Every rank reaches the same decision from the same flags, and keeps the same held
  // list in the same order.
  if (!release) {
    for (Response& r : ready) {
      auto it = pending_by_name_.find(r.name);
      if (it != pending_by_name_.end()) pending_.at(it->second).state = Pending::State::kHeld;
      held_.push_back(std::move(r));
    }
    ready.clear();
  } else if (!held_.empty()) {
    for (Response& r : ready) held_.push_back(std::move(r));
    ready.swap(held_);
    held_.clear();
  }
  // Held reductions run on the core the compute thread has just left: the ranks'
  // engine threads would otherwise often share one core, each spinning in MPI for
  // whole scheduler slices while the other core idles.
  int cpu = -1;
  if (options_.hold_during_compute && !ready.empty()) {
    std::lock_guard lock(mu_);
    cpu = compute_cpu_;
  }
  cpu_set_t all;
  bool pinned = cpu >= 0 && pthread_getaffinity_np(pthread_self(), sizeof all, &all) == 0 && CPU_ISSET(cpu, &all);
  if (pinned) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pinned = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  execute(ready);
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof all, &all);

  // Entries waiting on a cache bit that moved or vanished (eviction, invalidation, a
  // join) must be announced again.
  bool joined_now = std::find(joined_.begin(), joined_.end(), true) != joined_.end();
  for (auto& [seq, p] : pending_) {
    if (p.state != Pending::State::kCached) continue;
    auto bit = cache_.find(p.meta.name);
    if (joined_now || !bit || *bit != p.bit) p.state = Pending::State::kNew;
  }
  check_stalls();
  return all_shutting_down;
}

void Engine::process_messages(const std::vector<std::string>& messages, std::vector<Response>& ready) {
  auto now = Clock::now();
  for (int r = 0; r < size_; ++r) {
    Message m = decode(messages[static_cast<size_t>(r)]);
    submitted_counts_[static_cast<size_t>(r)] = m.submitted;
    for (Meta& meta : m.metas) {
      if (meta.kind == Meta::Kind::kWithdraw) {
        if (table_.erase(meta.name)) table_order_.erase(std::find(table_order_.begin(), table_order_.end(), meta.name));
        continue;
      }
      if (meta.type == OpType::kJoin) {
        joined_[static_cast<size_t>(r)] = true;
        last_joined_ = r;
        continue;
      }
      cache_.erase(meta.name);  // a full announcement means some rank's signature changed
      auto [it, inserted] = table_.try_emplace(meta.name);
      if (inserted) {
        it->second.metas.resize(static_cast<size_t>(size_));
        it->second.first_seen = now;
        table_order_.push_back(meta.name);
      }
      it->second.metas[static_cast<size_t>(r)] = std::move(meta);
    }
  }
  std::vector<std::string> still_waiting;
  for (const std::string& name : table_order_) {
    TableEntry& t = table_.at(name);
    bool complete = true, with_joined = false;
    for (int r = 0; r < size_; ++r) {
      if (t.metas[static_cast<size_t>(r)]) continue;
      if (joined_[static_cast<size_t>(r)]) {
        with_joined = true;
      } else {
        complete = false;
      }
    }
    if (!complete) {
      still_waiting.push_back(name);
      continue;
    }
    Response resp = make_response(name, std::move(t.metas));
    resp.with_joined = with_joined;
    ready.push_back(std::move(resp));
    table_.erase(name);
  }
  table_order_.swap(still_waiting);
  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    Response resp;
    resp.name = kJoinName;
    resp.agreed.type = OpType::kJoin;
    resp.agreed.name = kJoinName;
    resp.agreed.root = last_joined_;
    ready.push_back(std::move(resp));
    std::fill(joined_.begin(), joined_.end(), false);
  }
}

Engine::Response Engine::make_response(const std::string& name, std::vector<std::optional<Meta>> metas) const {
  Response resp;
  resp.name = name;
  resp.metas = std::move(metas);
  int first = -1;
  for (int r = 0; r < size_ && first < 0; ++r)
    if (resp.metas[static_cast<size_t>(r)]) first = r;
  resp.agreed = *resp.metas[static_cast<size_t>(first)];
  const Meta& a = resp.agreed;
  bool rows_may_differ = a.type == OpType::kAllgather || a.type == OpType::kAlltoall;
  bool mismatch = false;
  for (const auto& m : resp.metas) {
    if (!m) continue;
    bool same = m->type == a.type && m->dtype == a.dtype && m->op == a.op && m->root == a.root &&
                m->prescale == a.prescale && m->postscale == a.postscale && m->device == a.device;
    if (rows_may_differ) {
      same = same && m->shape.size() == a.shape.size() && !m->shape.empty() &&
             std::equal(m->shape.begin() + 1, m->shape.end(), a.shape.begin() + 1);
    } else {
      same = same && m->shape == a.shape;
    }
    mismatch = mismatch || !same;
  }
  if (mismatch) {
    std::string detail;
    for (int r = 0; r < size_; ++r) {
      const auto& m = resp.metas[static_cast<size_t>(r)];
      if (m) detail += cat("; rank ", r, ": ", m->describe());
    }
    resp.error = cat("collective '", name, "' was submitted differently across ranks", detail,
                     rows_may_differ ? " (only the first dimension may differ)" : "");
    return resp;
  }
  if (a.type == OpType::kBroadcast && !resp.metas[static_cast<size_t>(a.root)]) {
    resp.error = cat("collective '", name, "' (broadcast from root ", a.root, ") cannot run: the root rank ", a.root,
                     " has joined and has no data to send; broadcast from a rank that has not joined");
    return resp;
  }
  return resp;
}

// ---------------------------------------------------------------- execution

void Engine::finish(Response& r, const Status& s) {
  bool counted = r.agreed.type != OpType::kJoin && r.agreed.type != OpType::kBarrier;
  if (counted) {
    std::lock_guard lock(mu_);  // before the request completes, so a waiter sees it
    ++stats_.completed;
  }
  auto it = pending_by_name_.find(r.name);
  if (it != pending_by_name_.end()) {
    Pending& p = pending_.at(it->second);
    if (timeline_.enabled()) {
      int64_t exchanged = p.exchanged_us ? p.exchanged_us : r.ready_us;
      timeline_.span(r.name, "NEGOTIATE", Timeline::to_us(p.entry.submitted), exchanged);
      if (r.ready_us > exchanged) timeline_.span(r.name, "WAIT_FOR_OTHER_RANKS", exchanged, r.ready_us);
    }
    p.entry.request->complete_part(s);
    pending_.erase(it->second);
    pending_by_name_.erase(it);
  }
  if (!counted) return;
  if (r.cached) {
    if (auto bit = cache_.find(r.name)) cache_.touch(*bit);
  } else if (s.is_ok() && !r.with_joined) {
    cache_.put(r.name, r.metas);
  }
}

void Engine::execute(std::vector<Response>& ready) {
  std::vector<bool> done(ready.size(), false);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (done[i]) continue;
    Response& r = ready[i];
    if (!r.error.empty()) {
      finish(r, Status(Code::kMismatch, r.error));
      continue;
    }
    bool host = !r.agreed.device;  // agreed, so a joined rank picks the same transport
    size_t bytes = static_cast<size_t>(shape_numel(r.agreed.shape)) * dtype_size(r.agreed.dtype);
    // Whether `o` can be reduced in the same call as `r` (same host allreduce settings);
    // its size in bytes goes to *o_bytes.
    auto combinable = [](const Response& r, const Response& o, size_t* o_bytes) {
      const Meta& a = r.agreed;
      const Meta& b = o.agreed;
      if (!o.error.empty() || b.type != OpType::kAllreduce || b.dtype != a.dtype || b.op != a.op ||
          b.prescale != a.prescale || b.postscale != a.postscale || b.device)
        return false;
      *o_bytes = static_cast<size_t>(shape_numel(b.shape)) * dtype_size(b.dtype);
      return true;
    };
    if (r.agreed.type == OpType::kAllreduce && host && (bytes >= kDirectBytes || bytes > options_.fusion_bytes)) {
      // Every large allreduce of this cycle with the same dtype/op/scales goes through
      // one pipelined call.
      std::vector<Response*> direct{&r};
      for (size_t j = i + 1; j < ready.size(); ++j) {
        Response& o = ready[j];
        size_t ob = 0;
        if (done[j] || !combinable(r, o, &ob)) continue;
        if (ob < kDirectBytes && ob <= options_.fusion_bytes) continue;
        direct.push_back(&o);
        done[j] = true;
      }
      run_direct_allreduces(direct);
      continue;
    }
    if (r.agreed.type != OpType::kAllreduce || !host) {
      run_one(r);
      continue;
    }
    std::vector<Response*> batch{&r};
    size_t total = bytes;
    for (size_t j = i + 1; j < ready.size(); ++j) {
      Response& o = ready[j];
      size_t ob = 0;
      if (done[j] || !combinable(r, o, &ob)) continue;
      if (ob >= kDirectBytes || total + ob > options_.fusion_bytes) continue;
      total += ob;
      batch.push_back(&o);
      done[j] = true;
    }
    if (batch.size() == 1)
      run_direct_allreduces(batch);  // alone in its call: no copies through the fusion buffer
    else
      run_allreduce_batch(batch);
  }
}

void Engine::run_allreduce_batch(std::vector<Response*>& batch) {
  const Meta& a = batch.front()->agreed;
  size_t esize = dtype_size(a.dtype);
  size_t total = 0;
  for (Response* r : batch) total += static_cast<size_t>(shape_numel(r->agreed.shape)) * esize;
  if (fusion_.size() < total) fusion_.resize(total);
  int64_t t0 = Timeline::now_us();
  size_t offset = 0;
  for (Response* r : batch) {
    size_t n = static_cast<size_t>(shape_numel(r->agreed.shape)) * esize;
    auto it = pending_by_name_.find(r->name);
    if (it == pending_by_name_.end()) {
      std::memset(fusion_.data() + offset, 0, n);  // a joined rank contributes zeros
    } else if (n) {
      kernels::copy_bytes(fusion_.data() + offset, pending_.at(it->second).entry.input.data(), n);
    }
    offset += n;
  }
  size_t count = total / esize;
  kernels::scale(fusion_.data(), count, a.dtype, a.prescale);
  int64_t t1 = Timeline::now_us();
  transport_->allreduce(fusion_.data(), count, a.dtype, to_kernel(a.op));
  double post = a.postscale * (a.op == ReduceOp::kAverage ? 1.0 / size_ : 1.0);
  kernels::scale(fusion_.data(), count, a.dtype, post);
  int64_t t2 = Timeline::now_us();
  offset = 0;
  for (Response* r : batch) {
    size_t n = static_cast<size_t>(shape_numel(r->agreed.shape)) * esize;
    auto it = pending_by_name_.find(r->name);
    if (it != pending_by_name_.end() && n)
      kernels::copy_bytes(pending_.at(it->second).entry.output.data(), fusion_.data() + offset, n);
    offset += n;
  }
  int64_t t3 = Timeline::now_us();
  if (timeline_.enabled()) {
    for (Response* r : batch) {
      timeline_.span(r->name, "MEMCPY_IN_FUSION_BUFFER", t0, t1);
      timeline_.span(r->name, "ALLREDUCE", t1, t2);
      timeline_.span(r->name, "MEMCPY_OUT_FUSION_BUFFER", t2, t3);
    }
  }
  if (batch.size() > 1) {
    std::lock_guard lock(mu_);
    ++stats_.fused_batches;
  }
  for (Response* r : batch) finish(*r, Status::ok());
}

void Engine::run_one(Response& r) {
  const Meta& a = r.agreed;
  auto it = pending_by_name_.find(r.name);
  // No local entry: this rank has joined and takes part without data of its own.
  TensorEntry* e = it == pending_by_name_.end() ? nullptr : &pending_.at(it->second).entry;
  Transport* tp = transport_.get();
  if (a.device && !(tp = device_transport(r))) return;
  Transport& t = *tp;
  int64_t t0 = Timeline::now_us();
  size_t esize = dtype_size(a.dtype);
  switch (a.type) {
    case OpType::kJoin: {
      {
        // Joined ranks submitted fewer barriers: every rank starts counting afresh.
        std::lock_guard lock(mu_);
        ++join_epoch_;
        barrier_count_ = 0;
      }
      if (e) e->request->set_join_last_rank(a.root);
      break;
    }
    case OpType::kBarrier:
      t.barrier();
      break;
    case OpType::kAllreduce: {
      if (a.device) {
        run_device_allreduce(r, e, t);
        break;
      }
      std::vector<Response*> one{&r};
      run_direct_allreduces(one);
      return;
    }
    case OpType::kBroadcast: {
      size_t n = static_cast<size_t>(shape_numel(a.shape)) * esize;
      Tensor scratch;
      void* buf = nullptr;
      if (e) {
        buf = e->output.data();
        if (rank_ == a.root && buf != e->input.data() && n) t.copy(buf, e->input.data(), n, e->input.device());
      } else {
        scratch = t.allocate(a.shape, a.dtype);  // receives the root's data, then dropped
        buf = scratch.data();
      }
      t.broadcast(buf, n, a.root);
      break;
    }
    case OpType::kAllgather: {
      Shape out_shape = a.shape;
      out_shape[0] = 0;
      std::vector<size_t> bytes(static_cast<size_t>(size_), 0);
      size_t row = static_cast<size_t>(row_elems(a.shape)) * esize;
      for (int q = 0; q < size_; ++q) {
        const auto& m = r.metas[static_cast<size_t>(q)];
        int64_t rows = m ? m->shape[0] : 0;
        out_shape[0] += rows;
        bytes[static_cast<size_t>(q)] = static_cast<size_t>(rows) * row;
      }
      Tensor out = t.allocate(out_shape, a.dtype);
      t.allgatherv(e ? e->input.data() : nullptr, out.data(), bytes);
      if (e) e->request->set_output(out);
      break;
    }
    case OpType::kAlltoall: {
      // A joined rank sends and receives nothing; the rows others meant for it are dropped.
      size_t row = static_cast<size_t>(row_elems(a.shape)) * esize;
      std::vector<size_t> send(static_cast<size_t>(size_), 0), recv(static_cast<size_t>(size_), 0);
      std::vector<int64_t> recv_rows(static_cast<size_t>(size_), 0);
      Shape out_shape = a.shape;
      out_shape[0] = 0;
      Shape packed_shape = a.shape;
      packed_shape[0] = 0;
      for (int q = 0; q < size_; ++q) {
        const auto& m = r.metas[static_cast<size_t>(q)];
        if (!e || !m) continue;
        send[static_cast<size_t>(q)] = static_cast<size_t>(e->splits[static_cast<size_t>(q)]) * row;
        packed_shape[0] += e->splits[static_cast<size_t>(q)];
        recv_rows[static_cast<size_t>(q)] = m->splits[static_cast<size_t>(rank_)];
        recv[static_cast<size_t>(q)] = static_cast<size_t>(recv_rows[static_cast<size_t>(q)]) * row;
        out_shape[0] += recv_rows[static_cast<size_t>(q)];
      }
      const void* src = e ? e->input.data() : nullptr;
      Tensor packed;
      if (e && r.with_joined) {
        packed = t.allocate(packed_shape, a.dtype);
        size_t from = 0, to = 0;
        for (int q = 0; q < size_; ++q) {
          size_t n = static_cast<size_t>(e->splits[static_cast<size_t>(q)]) * row;
          if (r.metas[static_cast<size_t>(q)] && n) {
            t.copy(static_cast<char*>(packed.data()) + to, static_cast<const char*>(src) + from, n, e->input.device());
            to += n;
          }
          from += n;
        }
        src = packed.data();
      }
      Tensor out = t.allocate(out_shape, a.dtype);
      t.alltoallv(src, send, out.data(), recv);
      if (e) e->request->set_output(out, recv_rows);
      break;
    }
    case OpType::kReducescatter: {
      std::vector<int64_t> rows = scatter_rows(a.shape[0], size_);
      size_t row = static_cast<size_t>(row_elems(a.shape));
      std::vector<size_t> counts;
      for (int64_t n : rows) counts.push_back(static_cast<size_t>(n) * row);
      Shape out_shape = a.shape;
      out_shape[0] = rows[static_cast<size_t>(rank_)];
      Tensor out = t.allocate(out_shape, a.dtype);
      Tensor scaled;
      const void* send = nullptr;
      if (!e) {
        scaled = t.allocate(a.shape, a.dtype);  // a joined rank contributes zeros
        t.zero(scaled.data(), scaled.nbytes());
        send = scaled.data();
      } else if (a.prescale != 1.0) {
        scaled = t.allocate(a.shape, a.dtype);
        t.copy(scaled.data(), e->input.data(), scaled.nbytes(), e->input.device());
        t.scale(scaled.data(), static_cast<size_t>(scaled.numel()), a.dtype, a.prescale);
        send = scaled.data();
      } else {
        send = e->input.data();
      }
      t.reduce_scatter(send, out.data(), counts, a.dtype, to_kernel(a.op));
      t.scale(out.data(), static_cast<size_t>(out.numel()), a.dtype,
              a.postscale * (a.op == ReduceOp::kAverage ? 1.0 / size_ : 1.0));
      if (e) e->request->set_output(out);
      break;
    }
  }
  if (timeline_.enabled()) timeline_.span(r.name, op_type_name(a.type), t0, Timeline::now_us());
  finish(r, Status::ok());
}

Transport* Engine::device_transport(Response& r) {
  if (device_transport_) return device_transport_.get();
  if (device_error_.empty()) {
    // Every rank reaches this response at the same point of the same cycle: agree
    // that every rank can create the device transport before any of them tries.
    std::string mine = device_.create ? std::string() : cat("rank ", rank_, ": ", device_.unavailable);
    std::vector<std::string> all = transport_->allgather_bytes(mine);
    std::string why;
    for (const std::string& s : all)
      if (!s.empty()) why += cat(why.empty() ? "" : "; ", s);
    if (why.empty()) {
      try {
        device_transport_ = device_.create();
        return device_transport_.get();
      } catch (const Error& err) {
        device_error_ = cat("creating the device transport failed: ", err.what());
      }
    } else {
      device_error_ = cat("collectives of CUDA tensors need a device transport (NCCL) on every rank, but ", why);
    }
  }
  finish(r, Status(Code::kUnsupported, cat("collective '", r.name, "' (", r.agreed.describe(), "): ", device_error_)));
  return nullptr;
}

void Engine::run_device_allreduce(Response& r, TensorEntry* e, Transport& t) {
  const Meta& a = r.agreed;
  size_t count = static_cast<size_t>(shape_numel(a.shape));
  size_t bytes = count * dtype_size(a.dtype);
  Tensor zeros;
  void* buf = nullptr;
  if (e) {
    buf = e->output.data();
    if (buf != e->input.data() && bytes) t.copy(buf, e->input.data(), bytes, e->input.device());
  } else {
    zeros = t.allocate(a.shape, a.dtype);  // a joined rank contributes zeros
    t.zero(zeros.data(), bytes);
    buf = zeros.data();
  }
  t.scale(buf, count, a.dtype, a.prescale);
  t.allreduce(buf, count, a.dtype, to_kernel(a.op));
  t.scale(buf, count, a.dtype, a.postscale * (a.op == ReduceOp::kAverage ? 1.0 / size_ : 1.0));
}

void Engine::run_direct_allreduces(std::vector<Response*>& batch) {
  const Meta& a = batch.front()->agreed;
  size_t esize = dtype_size(a.dtype);
  int64_t t0 = Timeline::now_us();
  std::vector<std::pair<void*, size_t>> bufs;
  std::vector<std::vector<unsigned char>> zeros;
  for (Response* r : batch) {
    size_t count = static_cast<size_t>(shape_numel(r->agreed.shape));
    auto it = pending_by_name_.find(r->name);
    void* buf;
    if (it != pending_by_name_.end()) {
      TensorEntry& e = pending_.at(it->second).entry;
      buf = e.output.data();
      if (buf != e.input.data() && count) transport_->copy(buf, e.input.data(), count * esize, e.input.device());
    } else {
      zeros.emplace_back(count * esize, 0);  // a joined rank contributes zeros
      buf = zeros.back().data();
    }
    if (a.prescale != 1.0) kernels::scale(buf, count, a.dtype, a.prescale);
    bufs.emplace_back(buf, count);
  }
  transport_->allreduce_many(bufs, a.dtype, to_kernel(a.op));
  double post = a.postscale * (a.op == ReduceOp::kAverage ? 1.0 / size_ : 1.0);
  for (const auto& [buf, count] : bufs) kernels::scale(buf, count, a.dtype, post);
  if (timeline_.enabled()) {
    int64_t t1 = Timeline::now_us();
    for (Response* r : batch) timeline_.span(r->name, "ALLREDUCE", t0, t1);
  }
  for (Response* r : batch) finish(*r, Status::ok());
}

void Engine::check_stalls() {
  if (options_.stall_warning_s <= 0 || rank_ != 0) return;
  auto now = Clock::now();
  if (now - last_stall_check_ < std::chrono::milliseconds(200)) return;
  last_stall_check_ = now;
  std::string report;
  for (const std::string& name : table_order_) {
    TableEntry& t = table_.at(name);
    double age = std::chrono::duration<double>(now - t.first_seen).count();
    if (t.warned || age < options_.stall_warning_s) continue;
    t.warned = true;
    std::vector<int> have, missing;
    const Meta* some = nullptr;
    for (int r = 0; r < size_; ++r) {
      const auto& m = t.metas[static_cast<size_t>(r)];
      if (m) {
        have.push_back(r);
        some = &*m;
      } else if (!joined_[static_cast<size_t>(r)]) {
        missing.push_back(r);
      }
    }
    report +=
        cat("\n  '", name, "' (", some ? some->describe() : std::string("?"), "): waiting ", static_cast<int>(age),
            " s; submitted by ranks ", rank_list(have), ", missing on ranks ", rank_list(missing));
  }
  if (report.empty()) return;
  std::string counts;
  for (int r = 0; r < size_; ++r) counts += cat(r ? ", " : "", r, ": ", submitted_counts_[static_cast<size_t>(r)]);
  report = cat("stall: collectives have waited more than ", options_.stall_warning_s,
               " s (stall_warning_s) for some ranks:", report, "\n  operations submitted per rank: ", counts,
               " (the first rank with a lower count diverged first)");
  COHORT_LOG_WARN(report);
  std::lock_guard lock(mu_);
  last_stall_report_ = report;
}

}  // namespace cohort::comm
