// The distributed optimizer's Collectives over the collective engine: each allreduce
// becomes an engine request (fused and overlapped by the engine's background thread),
// wait_all() waits for every request started since the last call, and broadcast is a
// blocking engine broadcast. Also counts the time callers spent blocked in wait_all(),
// which is the communication that backward did not hide.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/engine.h"
#include "optim/distributed_optimizer.h"

namespace cohort {

class EngineCollectives : public Collectives {
 public:
  // Borrowed: the engine must outlive this object. `prefix` is put before every
  // tensor name, so that several optimizers can share one engine.
  explicit EngineCollectives(comm::Engine& engine, std::string prefix = "");

  int rank() const override { return engine_.rank(); }
  int size() const override { return engine_.size(); }
  void allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                       const Event& ready = {}) override;
  void wait_all(const Stream& stream = {}) override;
  void broadcast(const std::string& name, Tensor t, int root) override;

  // Seconds spent blocked in wait_all() since the last take_wait_seconds().
  double take_wait_seconds();

 private:
  comm::Engine& engine_;
  std::string prefix_;
  std::vector<std::shared_ptr<comm::Request>> pending_;
  double wait_s_ = 0;
};

}  // namespace cohort
