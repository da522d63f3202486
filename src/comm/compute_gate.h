// The compute gate: with hold_during_compute, agreed reductions wait while a model
// computes on some rank and run once compute has finished on every rank. On a CPU whose
// cores all compute, a reduction run during backward only competes with it for the
// cores. (The held reductions run where the engine thread runs: on the rank's own cores
// when cohortrun binds it.)
//
// Every rank votes each cycle (CycleFlags::releases_held); the agreed vote decides for
// all, so every rank holds and releases the same responses in the same order.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "comm/negotiation.h"
#include "comm/types.h"

namespace cohort::comm {

class ComputeGate {
 public:
  explicit ComputeGate(bool hold) : hold_(hold) {}

  // Any thread. Brackets a model's forward/backward on this rank (nests); end() returns
  // true when the outermost bracket closed.
  void begin();
  bool end();
  bool computing() const;
  // Callers blocked in Request::wait: a rank whose compute waits for a collective must
  // not hold reductions back, or it would wait for itself.
  const std::shared_ptr<WaitCount>& waits() const { return waits_; }

  // Engine thread. This rank's vote: nothing to hold back (not holding during compute,
  // not computing, or some caller waits for a collective).
  bool releases() const;
  // Applies the agreed vote to the responses this cycle made ready: unless `release`,
  // they join the held ones (and `ready` is left empty); with it, every held response
  // runs first, in the order it was held.
  void admit(std::vector<Response>& ready, bool release);
  // Held responses wait while compute on this rank has ended: the next cycle should
  // come at once.
  bool release_pending() const { return !held_.empty() && !computing(); }

 private:
  const bool hold_;
  std::shared_ptr<WaitCount> waits_ = std::make_shared<WaitCount>();
  mutable std::mutex mu_;
  int computing_ = 0;           // open brackets
  std::vector<Response> held_;  // engine thread only
};

}  // namespace cohort::comm
