// The part of a training step that turns this rank's gradients into the next step's
// parameters, one implementation per variable_update mode (variable_update.h): the
// replicated allreduce (also independent, which exchanges nothing) and the parameter
// server, synchronous or not. The Trainer drives it: gradient_ready() from the
// gradient-ready hook, step() after each backward pass, the collective calls at the
// points where every rank makes them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/engine.h"
#include "optim/distributed_optimizer.h"
#include "optim/optimizer.h"
#include "train/engine_collectives.h"
#include "train/variable_update.h"

namespace cohort::train {

// What a rank does in its mode, and what its server has done so far.
struct ExchangeInfo {
  VariableUpdate mode = VariableUpdate::kReplicated;
  bool worker = true;   // computes gradients (reads data)
  bool server = false;  // holds a shard of the variables
  int workers = 1, servers = 0;
  int worker_index = 0;  // among the workers (its data shard); -1 on a dedicated server
  // Updates this rank's server applied, and how many steps behind the variables each
  // applied gradient was computed on (0 in the synchronous modes).
  int64_t updates = 0;
  double staleness_sum = 0;
  int64_t staleness_max = 0;
};

class Exchange {
 public:
  virtual ~Exchange() = default;

  // Parameter `index`'s gradient of this backward pass is final once `ready` completes
  // (backward's thread; complete on the host).
  virtual void gradient_ready(size_t index, const Event& ready) = 0;
  // Whether gradient_ready enqueues work on the model's stream (Model::set_grad_ready).
  virtual bool ready_enqueues() const { return false; }
  // Ends a backward pass: false on an accumulation pass; on the last one the model's
  // parameters hold the next step's values when it returns.
  virtual bool step(double lr) = 0;
  // Backward passes taken in the current step.
  virtual int pass() const = 0;
  virtual bool last_step_skipped() const { return false; }
  // Collective: the model's parameters and the optimizer's state become root's on every
  // rank, and the servers take theirs from them.
  virtual void broadcast_parameters(int root) = 0;
  // Collective: throws kMismatch naming the first parameter some worker holds otherwise
  // than the others (replicated) or than its server.
  virtual void check_consistency() = 0;
  // Collective: the model's parameters and the optimizer's state (step count aside) hold
  // the run's variables on every rank, for a checkpoint.
  virtual void gather() {}
  // Seconds the caller spent blocked on the exchange since the last call.
  virtual double take_wait_seconds() = 0;
  virtual ExchangeInfo info() const = 0;
};

struct ExchangeSetup {
  comm::Engine& engine;
  EngineCollectives& comm;  // the trainer's collectives (their names carry its prefix)
  int trainer_index = 0;    // tells the trainers of one runtime apart
  // The trainer's optimizer: replicated and independent update with it; the
  // parameter-server modes keep it as the checkpoints' copy of the servers' state.
  Optimizer& optimizer;
  std::vector<ParamGrad> params;
  Roles roles;
  DistributedOptions options;
  Stream stream;  // the model's compute stream: the update runs on it
  // Dynamic loss scaling (precision=f16; borrowed, may be null): the averaged gradients
  // are unscaled before the update, which is skipped on every rank after an overflow.
  LossScaler* scaler = nullptr;
};

// Throws kInvalidArgument for an option the mode cannot honour (compression,
// gradient_predivide_factor outside replicated).
std::unique_ptr<Exchange> make_exchange(ExchangeSetup setup);

}  // namespace cohort::train
