#include "train/engine_collectives.h"

#include <chrono>

#include "core/status.h"

namespace cohort {

EngineCollectives::EngineCollectives(comm::Engine& engine, std::string prefix)
    : engine_(engine), prefix_(std::move(prefix)) {}

void EngineCollectives::allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                                        const Event& ready) {
  comm::TensorEntry e;
  e.ready = ready;
  e.name = prefix_ + name;
  e.type = comm::OpType::kAllreduce;
  e.op = comm::ReduceOp::kSum;
  e.prescale = prescale;
  e.postscale = postscale;
  e.input = t;
  e.output = t;
  pending_.push_back(engine_.submit(std::move(e)));
}

void EngineCollectives::wait_all(const Stream& stream) {
  const auto start = std::chrono::steady_clock::now();
  Status first;
  for (const auto& r : pending_) {
    Status s = r->wait();
    if (first.is_ok() && !s.is_ok()) first = s;
    if (s.is_ok()) r->event().block(stream);
  }
  pending_.clear();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!first.is_ok()) throw Error(first);
}

void EngineCollectives::broadcast(const std::string& name, Tensor t, int root) {
  require(root >= 0 && root < size(), "broadcast '", name, "': root ", root, " is not a rank (0..", size() - 1, ")");
  comm::TensorEntry e;
  e.name = prefix_ + name;
  e.type = comm::OpType::kBroadcast;
  e.root = root;
  e.input = t;
  e.output = t;
  auto request = engine_.submit(std::move(e));
  Status s = request->wait();
  if (!s.is_ok()) throw Error(s);
  request->event().synchronize();  // a blocking broadcast: the values are there on return
}

double EngineCollectives::take_wait_seconds() {
  const double s = wait_s_;
  wait_s_ = 0;
  return s;
}

}  // namespace cohort
