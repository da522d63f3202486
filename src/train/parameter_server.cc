#include "train/parameter_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "core/crc32c.h"
#include "core/logging.h"
#include "core/status.h"
#include "kernels/for_each.h"
#include "kernels/optim_update.h"

namespace cohort::train {
namespace {

using Clock = std::chrono::steady_clock;

// What a worker's header says (f64 values: exact for any step count a run reaches).
enum HeaderField { kKind = 0, kLr = 1, kClock = 2, kHeaderSize = 3 };
constexpr double kPush = 0, kGoodbye = 1;

Tensor header(double kind, double lr, int64_t clock) {
  Tensor h = Tensor::empty({kHeaderSize}, DType::kF64);
  double* v = h.data_as<double>();
  v[kKind] = kind;
  v[kLr] = lr;
  v[kClock] = static_cast<double>(clock);
  return h;
}

bool owns_entry(const std::string& entry, const std::set<std::string>& names) {
  const size_t slash = entry.rfind('/');
  return slash != std::string::npos && names.count(entry.substr(0, slash)) > 0;
}

}  // namespace

// ---------------------------------------------------------------- server

struct PsServer::Peer {
  int rank = 0;
  Tensor header;
  std::vector<Tensor> grads;  // one per shard variable
  size_t missing = 0;         // receives of the current push still out
  bool header_in = false;
  bool live = true;
  bool deferred = false;  // its answer waits for the slowest worker
  int64_t clock = 0;      // pushes applied
  int64_t pulled = 0;     // the version it last received
};

PsServer::PsServer(comm::Engine& engine, Options options, std::vector<ShardVariable> shard)
    : engine_(engine),
      options_(std::move(options)),
      shard_(std::move(shard)),
      inbox_(engine.make_inbox()),
      optimizer_(options_.optimizer) {
  std::vector<ParamGrad> params;
  for (const ShardVariable& v : shard_) {
    master_.push_back(Tensor::empty(v.shape, DType::kF32));
    sum_.push_back(Tensor::empty(v.shape, DType::kF32));
    params.push_back({v.name, master_.back(), sum_.back()});
  }
  optimizer_.init_state(params);
  for (int rank : options_.workers) {
    auto p = std::make_unique<Peer>();
    p->rank = rank;
    p->header = Tensor::empty({kHeaderSize}, DType::kF64);
    for (const ShardVariable& v : shard_) p->grads.push_back(Tensor::empty(v.shape, DType::kF32));
    peers_.push_back(std::move(p));
  }
  live_ = static_cast<int>(peers_.size());
  for (size_t w = 0; w < peers_.size(); ++w) post(w);
  thread_ = std::thread([this] { run(); });
}

PsServer::~PsServer() {
  if (thread_.joinable()) thread_.join();
}

void PsServer::post(size_t w) {
  Peer& p = *peers_[w];
  p.header_in = false;
  p.missing = shard_.size() + 1;
  const uint64_t base = static_cast<uint64_t>(w) * (shard_.size() + 1);
  engine_.recv(p.rank, options_.tags.push(), p.header, inbox_, base);
  for (size_t j = 0; j < shard_.size(); ++j)
    engine_.recv(p.rank, options_.tags.grad(shard_[j].index), p.grads[j], inbox_, base + 1 + j);
}

void PsServer::run() {
  try {
    while (live_ > 0) {
      std::optional<comm::Inbox::Delivery> d = inbox_->pop();
      if (!d) break;
      if (!d->status.is_ok()) throw Error(d->status);
      const size_t w = static_cast<size_t>(d->cookie / (shard_.size() + 1));
      receive(w, static_cast<size_t>(d->cookie % (shard_.size() + 1)));
    }
    wait_sends();
  } catch (const Error& e) {
    // The engine stopped (a lost peer, the runtime going away): the workers' own waits
    // fail too, so this only ends the service.
    if (e.code() != Code::kCancelled && e.code() != Code::kInvalidState)
      COHORT_LOG_WARN("parameter server on rank ", engine_.rank(), " stopped: ", e.what());
  }
}

void PsServer::receive(size_t w, size_t slot) {
  Peer& p = *peers_[w];
  if (!p.live) return;
  --p.missing;
  if (slot == 0) {
    p.header_in = true;
    if (p.header.data_as<double>()[kKind] == kGoodbye) {
      // Its gradients' receives stay posted, unmatched, until the engine stops.
      p.live = false;
      --live_;
      if (options_.synchronous) {
        if (live_ > 0 && ready_.size() == static_cast<size_t>(live_)) apply_synchronous();
      } else {
        release_deferred();
      }
      return;
    }
  }
  if (!p.header_in || p.missing > 0) return;
  if (options_.synchronous) {
    ready_.push_back(w);
    if (ready_.size() == static_cast<size_t>(live_)) apply_synchronous();
  } else {
    apply(w);
  }
}

void PsServer::update(std::span<const Tensor> grads, double lr) {
  std::lock_guard lock(mu_);
  std::vector<ParamGrad> params;
  for (size_t j = 0; j < shard_.size(); ++j) params.push_back({shard_[j].name, master_[j], grads[j]});
  optimizer_.step(params, lr);
  ++version_;
  ++stats_.updates;
}

void PsServer::apply_synchronous() {
  wait_sends();                             // the last answers are out of the master variables before they change
  std::sort(ready_.begin(), ready_.end());  // the same sum whatever order the pushes came in
  const float scale = 1.0f / static_cast<float>(ready_.size());
  for (size_t j = 0; j < shard_.size(); ++j) {
    float* sum = sum_[j].data_as<float>();
    const int64_t n = sum_[j].numel();
    zero(sum_[j]);
    for (size_t w : ready_)
      kernels::for_each(Stream(), n, kernels::AccumulateScaled{scale}, sum,
                        static_cast<const float*>(peers_[w]->grads[j].data_as<float>()));
  }
  update(sum_, peers_[ready_.front()]->header.data_as<double>()[kLr]);
  for (size_t w : ready_) {
    peers_[w]->clock = static_cast<int64_t>(peers_[w]->header.data_as<double>()[kClock]);
    post(w);
    reply(w);
  }
  ready_.clear();
}

void PsServer::apply(size_t w) {
  Peer& p = *peers_[w];
  wait_sends();
  {
    std::lock_guard lock(mu_);
    const int64_t behind = version_ - p.pulled;
    stats_.staleness_sum += static_cast<double>(behind);
    stats_.staleness_max = std::max(stats_.staleness_max, behind);
  }
  update(p.grads, p.header.data_as<double>()[kLr]);
  p.clock = static_cast<int64_t>(p.header.data_as<double>()[kClock]);
  post(w);
  if (may_continue(w))
    reply(w);
  else
    p.deferred = true;
  release_deferred();
}

bool PsServer::may_continue(size_t w) const {
  if (options_.max_lead < 0) return true;
  int64_t slowest = peers_[w]->clock;
  for (const auto& p : peers_)
    if (p->live) slowest = std::min(slowest, p->clock);
  return peers_[w]->clock - slowest <= options_.max_lead;
}

void PsServer::release_deferred() {
  for (size_t u = 0; u < peers_.size(); ++u)
    if (peers_[u]->deferred && may_continue(u)) {
      peers_[u]->deferred = false;
      reply(u);
    }
}

void PsServer::reply(size_t w) {
  Peer& p = *peers_[w];
  std::lock_guard lock(mu_);  // load() may replace the master variables
  p.pulled = version_;
  for (size_t j = 0; j < shard_.size(); ++j)
    sends_.push_back(engine_.send(p.rank, options_.tags.value(shard_[j].index), master_[j]));
}

void PsServer::wait_sends() {
  for (const auto& r : sends_) {
    const Status s = r->wait();
    if (!s.is_ok()) throw Error(s);
  }
  sends_.clear();
}

void PsServer::load(std::span<const Tensor> values, std::span<const NamedTensor> state, int64_t steps) {
  require(values.size() == shard_.size(), "parameter server: ", values.size(), " values for ", shard_.size(),
          " variables");
  std::set<std::string> names;
  for (const ShardVariable& v : shard_) names.insert(v.name);
  std::vector<NamedTensor> mine;
  Tensor step = Tensor::empty({1}, DType::kI64);
  *step.data_as<int64_t>() = steps;
  mine.push_back({"step", step});
  for (const NamedTensor& e : state)
    if (owns_entry(e.name, names)) mine.push_back(e);
  std::lock_guard lock(mu_);
  // Into fresh buffers: answers to earlier pulls may still be reading the old ones (the
  // engine sends from them), and they keep them alive until they are out.
  for (size_t j = 0; j < shard_.size(); ++j) {
    Tensor fresh = Tensor::empty(master_[j].shape(), master_[j].dtype());
    std::memcpy(fresh.data(), values[j].data(), fresh.nbytes());
    master_[j] = fresh;
  }
  optimizer_.import_state(mine);
  version_ = steps;
  for (auto& p : peers_) p->pulled = steps;  // the workers start from these values
}

void PsServer::store(std::span<const Tensor> values, std::span<const NamedTensor> state) const {
  std::lock_guard lock(mu_);
  for (size_t j = 0; j < shard_.size(); ++j) std::memcpy(values[j].data(), master_[j].data(), master_[j].nbytes());
  for (const NamedTensor& mine : optimizer_.export_state())
    for (const NamedTensor& e : state)
      if (e.name == mine.name && e.name != "step") std::memcpy(e.tensor.data(), mine.tensor.data(), e.tensor.nbytes());
}

PsServer::Stats PsServer::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

// ---------------------------------------------------------------- worker

PsWorker::PsWorker(comm::Engine& engine, PsTags tags, std::vector<ParamGrad> params, std::vector<int> owners,
                   int passes)
    : engine_(engine), tags_(tags), params_(std::move(params)), owners_(std::move(owners)), passes_(params_, passes) {
  std::set<int> servers(owners_.begin(), owners_.end());
  servers_.assign(servers.begin(), servers.end());
}

PsWorker::~PsWorker() {
  try {
    wait(sends_);
    for (int s : servers_) sends_.push_back(engine_.send(s, tags_.push(), header(kGoodbye, 0, clock_)));
    wait(sends_);
  } catch (const Error&) {
    // The engine stopped: the servers stop with it.
  }
}

void PsWorker::gradient_ready(size_t index) {
  if (passes_.report(index)) push(index);
}

void PsWorker::push(size_t index) {
  Tensor grad = params_[index].grad;
  if (passes_.passes() > 1) {  // the mean over the passes
    grad = passes_.sum(index);
    kernels::for_each(Stream(), grad.numel(), kernels::Scale{1.0f / static_cast<float>(passes_.passes())},
                      grad.data_as<float>());
  }
  sends_.push_back(engine_.send(owners_[index], tags_.grad(index), grad));
}

bool PsWorker::step(double lr, int64_t clock) {
  if (!passes_.end_pass([&](size_t i) { gradient_ready(i); })) return false;
  clock_ = clock;
  std::vector<std::shared_ptr<comm::Request>> pulls;
  for (size_t i = 0; i < params_.size(); ++i)
    pulls.push_back(engine_.recv(owners_[i], tags_.value(i), params_[i].param));
  for (int s : servers_) sends_.push_back(engine_.send(s, tags_.push(), header(kPush, lr, clock)));
  const auto start = Clock::now();
  wait(sends_);
  wait(pulls);
  wait_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  passes_.clear_sums();
  return true;
}

void PsWorker::wait(std::vector<std::shared_ptr<comm::Request>>& requests) {
  Status first;
  for (const auto& r : requests) {
    const Status s = r->wait();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  requests.clear();
  if (!first.is_ok()) throw Error(first);
}

double PsWorker::take_wait_seconds() {
  const double s = wait_s_;
  wait_s_ = 0;
  return s;
}

// ---------------------------------------------------------------- the Exchange

namespace {

class PsExchange final : public Exchange {
 public:
  explicit PsExchange(ExchangeSetup s)
      : engine_(s.engine), comm_(s.comm), optimizer_(s.optimizer), params_(std::move(s.params)), roles_(s.roles) {
    const int rank = engine_.rank();
    // A fixed block of tags per trainer, whatever its model.
    constexpr int64_t kBlock = int64_t{1} << 20;
    const int64_t last = s.trainer_index * kBlock + 2 * static_cast<int64_t>(params_.size());
    require(2 * static_cast<int64_t>(params_.size()) < kBlock && last <= engine_.max_tag(),
            "the parameter-server messages of trainer ", s.trainer_index, " (", params_.size(),
            " variables) need tags up to ", last, " but the transport allows ", engine_.max_tag());
    tags_.base = static_cast<int>(s.trainer_index * kBlock);
    for (const ParamGrad& p : params_)
      if (!p.param.device().is_host())
        fail(Code::kUnsupported, "variable_update=", variable_update_name(roles_.mode),
             " moves variables in host memory, but '", p.name, "' is ", p.param.describe(),
             "; use variable_update=replicated (or independent) on this device");
    optimizer_.init_state(params_);
    std::vector<int64_t> bytes;
    for (const ParamGrad& p : params_) bytes.push_back(static_cast<int64_t>(p.param.nbytes()));
    const std::vector<int> server_of = place_variables(bytes, roles_.servers);
    for (int server : server_of) owners_.push_back(roles_.server_rank(server));
    const int me = roles_.server_index(rank);
    std::vector<ShardVariable> shard;
    for (size_t v = 0; v < params_.size(); ++v)
      if (server_of[v] == me) {
        shard.push_back({v, params_[v].name, params_[v].param.shape()});
        shard_index_.push_back(v);
      }
    if (!shard.empty()) {
      PsServer::Options o;
      o.tags = tags_;
      for (int r = 0; r < roles_.ranks; ++r)
        if (roles_.is_worker(r)) o.workers.push_back(r);
      o.synchronous = roles_.mode == VariableUpdate::kParameterServer;
      o.max_lead = roles_.max_lead;
      o.optimizer = optimizer_.options();
      server_ = std::make_unique<PsServer>(engine_, std::move(o), std::move(shard));
      load_server();
    }
    if (roles_.is_worker(rank))
      worker_ = std::make_unique<PsWorker>(engine_, tags_, params_, owners_, s.options.backward_passes_per_step);
  }

  void gradient_ready(size_t index, const Event& ready) override {
    require(worker_ != nullptr, "rank ", engine_.rank(), " is a dedicated parameter server: it computes no gradients");
    ready.synchronize();
    worker_->gradient_ready(index);
  }

  bool step(double lr) override {
    require(worker_ != nullptr, "rank ", engine_.rank(), " is a dedicated parameter server: it takes no steps");
    const bool last = worker_->step(lr, optimizer_.steps() + 1);
    if (last) optimizer_.set_steps(optimizer_.steps() + 1);
    return last;
  }

  int pass() const override { return worker_ ? worker_->pass() : 0; }

  void broadcast_parameters(int root) override {
    require(root >= 0 && root < roles_.ranks, "broadcast_parameters: root ", root, " is not a rank (0..",
            roles_.ranks - 1, ")");
    for (const ParamGrad& p : params_) comm_.broadcast(p.name, p.param, root);
    for (const NamedTensor& e : optimizer_.export_state()) {
      comm_.broadcast("optimizer/" + e.name, e.tensor, root);
      if (e.name == "step") optimizer_.set_steps(*e.tensor.data_as<int64_t>());
    }
    if (server_) load_server();
    // No worker may push before every server holds the broadcast values: an update
    // applied before a server's load would be lost and its answer would carry the old
    // variables (a resumed run then ended elsewhere than an uninterrupted one).
    quiesce();
  }

  void gather() override {
    quiesce();
    const std::vector<NamedTensor> state = optimizer_.export_state();  // live views
    if (server_) server_->store(shard_values(), state);
    for (size_t v = 0; v < params_.size(); ++v) {
      comm_.broadcast("ps/" + params_[v].name, params_[v].param, owners_[v]);
      const std::string prefix = params_[v].name + "/";
      for (const NamedTensor& e : state)
        if (e.name.rfind(prefix, 0) == 0 && e.name.find('/', prefix.size()) == std::string::npos)
          comm_.broadcast("ps/optimizer/" + e.name, e.tensor, owners_[v]);
    }
  }

  void check_consistency() override {
    // Each server's CRC of its master variables, summed into one list (a variable has one
    // server); then every worker compares its copy.
    quiesce();
    const int64_t n = static_cast<int64_t>(params_.size());
    Tensor master = Tensor::empty({n}, DType::kI64);
    if (server_) {
      std::vector<Tensor> copies;
      for (size_t v : shard_index_) copies.push_back(clone_host(params_[v].param));
      server_->store(copies, {});
      for (size_t j = 0; j < shard_index_.size(); ++j)
        master.data_as<int64_t>()[shard_index_[j]] = crc32c(copies[j].data(), copies[j].nbytes());
    }
    comm_.allreduce_async("consistency/servers", master, 1.0, 1.0);
    comm_.wait_all();
    Tensor differ = Tensor::empty({n}, DType::kI64);
    for (int64_t v = 0; v < n; ++v) {
      const Tensor& p = params_[static_cast<size_t>(v)].param;
      differ.data_as<int64_t>()[v] = worker_ && crc32c(p.data(), p.nbytes()) != master.data_as<int64_t>()[v] ? 1 : 0;
    }
    comm_.allreduce_async("consistency/workers", differ, 1.0, 1.0);
    comm_.wait_all();
    for (int64_t v = 0; v < n; ++v)
      if (differ.data_as<int64_t>()[v] != 0)
        fail(Code::kMismatch, "consistency check: parameter '", params_[static_cast<size_t>(v)].name, "' differs on ",
             differ.data_as<int64_t>()[v], " worker(s) from its server's variable (rank ",
             owners_[static_cast<size_t>(v)], ")",
             roles_.mode == VariableUpdate::kAsyncParameterServer
                 ? "; with variable_update=async_parameter_server each worker holds the variables of its last pull"
                 : "");
  }

  double take_wait_seconds() override { return worker_ ? worker_->take_wait_seconds() : 0; }

  ExchangeInfo info() const override {
    ExchangeInfo i;
    const int rank = engine_.rank();
    i.mode = roles_.mode;
    i.worker = roles_.is_worker(rank);
    i.server = server_ != nullptr;
    i.workers = roles_.workers();
    i.servers = roles_.servers;
    i.worker_index = i.worker ? rank : -1;
    if (server_) {
      const PsServer::Stats s = server_->stats();
      i.updates = s.updates;
      i.staleness_sum = s.staleness_sum;
      i.staleness_max = s.staleness_max;
    }
    return i;
  }

 private:
  std::vector<Tensor> shard_values() const {
    std::vector<Tensor> out;
    for (size_t v : shard_index_) out.push_back(params_[v].param);
    return out;
  }
  void load_server() { server_->load(shard_values(), optimizer_.export_state(), optimizer_.steps()); }
  // Collective: once every rank is here, every worker's last push has been answered, so
  // the servers' variables hold still (a dedicated server's caller gets here at once,
  // long before its workers), and every server has finished what it did before.
  void quiesce() {
    Tensor one = Tensor::empty({1}, DType::kI64);
    comm_.allreduce_async("ps/quiesce", one, 1.0, 1.0);
    comm_.wait_all();
  }

  comm::Engine& engine_;
  EngineCollectives& comm_;
  Optimizer& optimizer_;
  std::vector<ParamGrad> params_;
  Roles roles_;
  PsTags tags_;
  std::vector<int> owners_;          // rank holding each variable
  std::vector<size_t> shard_index_;  // this rank's variables
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<PsWorker> worker_;  // destroyed first: its goodbye lets the server end
};

}  // namespace

std::unique_ptr<Exchange> make_parameter_server_exchange(ExchangeSetup setup) {
  return std::make_unique<PsExchange>(std::move(setup));
}

}  // namespace cohort::train
