// The parameter-server modes (variable_update=parameter_server|async_parameter_server).
// Variables live on server ranks, sharded by size (place_variables); each server keeps
// the master copy of its shard and that shard's optimizer state, and serves its workers
// from a thread of its own, so a server that also computes keeps serving while it does.
// All traffic is point to point through the engine (Engine::send/recv), so no rank
// waits for ranks it does not talk to:
//   worker → server   each gradient of the server's shard as backward finishes it, then
//                     a header (learning rate, the worker's step count);
//   server → worker   each variable of the shard after the update that push took part
//                     in: the worker's parameters for its next step.
// Synchronous: the server waits for a push from every worker, averages them, applies one
// update and answers them all. Asynchronous: it applies each push as it comes, counting
// how many updates the variables moved since that worker last pulled (staleness), and
// answers at once unless the worker is more than max_lead steps ahead of the slowest one.
// A worker says goodbye when its trainer goes away; a server stops once every worker has.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "comm/engine.h"
#include "optim/gradient_passes.h"
#include "optim/optimizer.h"
#include "train/exchange.h"

namespace cohort::train {

// The message tags of one trainer's traffic (trainers of one runtime use disjoint ones).
struct PsTags {
  int base = 0;
  int push() const { return base; }
  int grad(size_t v) const { return base + 1 + 2 * static_cast<int>(v); }
  int value(size_t v) const { return base + 2 + 2 * static_cast<int>(v); }
  int last(size_t variables) const { return base + 2 * static_cast<int>(variables); }
};

// One variable of a server's shard: its index in the model, name and shape.
struct ShardVariable {
  size_t index = 0;
  std::string name;
  Shape shape;
};

class PsServer {
 public:
  struct Options {
    PsTags tags;
    std::vector<int> workers;  // their ranks
    bool synchronous = true;
    int max_lead = -1;  // asynchronous: -1 = unbounded
    OptimizerOptions optimizer;
  };
  struct Stats {
    int64_t updates = 0;
    double staleness_sum = 0;
    int64_t staleness_max = 0;
  };

  // Starts serving. The master variables start as zeros: load() gives them values.
  PsServer(comm::Engine& engine, Options options, std::vector<ShardVariable> shard);
  // Waits until every worker has said goodbye (or the engine has stopped).
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // The master variables take `values` (one per shard variable, in shard order), the
  // shard's optimizer state its entries of `state` (as Optimizer::export_state lists
  // them; others are ignored), and the update count `steps`. Call while no worker pushes.
  void load(std::span<const Tensor> values, std::span<const NamedTensor> state, int64_t steps);
  // Copies the master variables into `values` and the shard's optimizer state into the
  // matching entries of `state` (live views of another optimizer).
  void store(std::span<const Tensor> values, std::span<const NamedTensor> state) const;
  Stats stats() const;

 private:
  struct Peer;
  void run();
  void post(size_t w);
  void receive(size_t w, size_t slot);
  void apply_synchronous();
  void apply(size_t w);
  void update(std::span<const Tensor> grads, double lr);
  void reply(size_t w);
  void release_deferred();
  bool may_continue(size_t w) const;
  void wait_sends();

  comm::Engine& engine_;
  Options options_;
  std::vector<ShardVariable> shard_;
  std::shared_ptr<comm::Inbox> inbox_;

  mutable std::mutex mu_;  // master variables (load() replaces them), optimizer, stats
  std::vector<Tensor> master_;
  Optimizer optimizer_;
  int64_t version_ = 0;  // updates applied (since the last load)
  Stats stats_;

  // Server thread only.
  std::vector<std::unique_ptr<Peer>> peers_;
  int live_ = 0;               // workers that have not said goodbye
  std::vector<size_t> ready_;  // synchronous: workers whose push of this step is in
  std::vector<Tensor> sum_;    // synchronous: the average of their gradients
  std::vector<std::shared_ptr<comm::Request>> sends_;
  std::thread thread_;
};

// A worker's side: pushes gradients (accumulated over backward_passes_per_step passes)
// and pulls its parameters back.
class PsWorker {
 public:
  // owners[v]: the rank holding variable v. Borrowed tensors outlive this object.
  PsWorker(comm::Engine& engine, PsTags tags, std::vector<ParamGrad> params, std::vector<int> owners, int passes);
  // Says goodbye to every server.
  ~PsWorker();
  PsWorker(const PsWorker&) = delete;
  PsWorker& operator=(const PsWorker&) = delete;

  void gradient_ready(size_t index);
  // As Exchange::step. `clock`: the steps this worker will have taken after it.
  bool step(double lr, int64_t clock);
  int pass() const { return passes_.pass(); }
  double take_wait_seconds();

 private:
  void push(size_t index);
  void wait(std::vector<std::shared_ptr<comm::Request>>& requests);

  comm::Engine& engine_;
  PsTags tags_;
  std::vector<ParamGrad> params_;
  std::vector<int> owners_;
  std::vector<int> servers_;  // ranks holding at least one variable
  GradientPasses passes_;
  int64_t clock_ = 0;
  std::vector<std::shared_ptr<comm::Request>> sends_;
  double wait_s_ = 0;
};

// The parameter-server Exchange (make_exchange picks it for those modes).
std::unique_ptr<Exchange> make_parameter_server_exchange(ExchangeSetup setup);

}  // namespace cohort::train
