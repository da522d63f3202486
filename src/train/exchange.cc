#include "train/exchange.h"

#include "core/status.h"
#include "train/parameter_server.h"

namespace cohort::train {
namespace {

// replicated: Horovod's distributed optimizer over the engine's allreduce. independent:
// the same optimizer with the exchange switched off.
class ReplicatedExchange final : public Exchange {
 public:
  explicit ReplicatedExchange(ExchangeSetup s)
      : comm_(s.comm),
        roles_(s.roles),
        rank_(s.engine.rank()),
        dist_(s.optimizer, s.comm, std::move(s.params), s.options, s.stream) {
    dist_.set_loss_scaler(s.scaler);
  }

  void gradient_ready(size_t index, const Event& ready) override { dist_.gradient_ready(index, ready); }
  bool ready_enqueues() const override { return dist_.ready_enqueues(); }
  bool step(double lr) override { return dist_.step(lr); }
  int pass() const override { return dist_.pass(); }
  bool last_step_skipped() const override { return dist_.last_step_skipped(); }
  void broadcast_parameters(int root) override { dist_.broadcast_parameters(root); }
  void check_consistency() override {
    try {
      dist_.check_consistency();
    } catch (const Error& e) {
      if (roles_.mode != VariableUpdate::kIndependent || e.code() != Code::kMismatch) throw;
      fail(Code::kMismatch, e.what(), " (variable_update=independent: every rank trains its own model)");
    }
  }
  double take_wait_seconds() override { return comm_.take_wait_seconds(); }
  ExchangeInfo info() const override {
    ExchangeInfo i;
    i.mode = roles_.mode;
    i.workers = roles_.ranks;
    i.worker_index = rank_;
    return i;
  }

 private:
  EngineCollectives& comm_;
  Roles roles_;
  int rank_;
  DistributedOptimizer dist_;
};

}  // namespace

std::unique_ptr<Exchange> make_exchange(ExchangeSetup setup) {
  const VariableUpdate mode = setup.roles.mode;
  if (mode != VariableUpdate::kReplicated) {
    const char* name = variable_update_name(mode);
    require(!setup.options.compressed(), "compression=", setup.options.compress_f16 ? "f16" : "bf16",
            " compresses the allreduce of variable_update=replicated; variable_update=", name,
            " cannot use it (set compression=none)");
    require(setup.scaler == nullptr, "loss scaling (loss_scaling=dynamic, or auto with precision=f16) unscales ",
            "the allreduced gradients of variable_update=replicated; variable_update=", name,
            " cannot apply it (set loss_scaling=off, use precision=bf16, or variable_update=replicated)");
    require(setup.options.gradient_predivide_factor == 1.0,
            "gradient_predivide_factor scales the allreduce of variable_update=replicated; variable_update=", name,
            " cannot use it (leave it at 1)");
  }
  if (setup.roles.parameter_server()) return make_parameter_server_exchange(std::move(setup));
  setup.options.exchange = mode == VariableUpdate::kReplicated;
  return std::make_unique<ReplicatedExchange>(std::move(setup));
}

}  // namespace cohort::train
