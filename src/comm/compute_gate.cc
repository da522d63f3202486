#include "comm/compute_gate.h"

namespace cohort::comm {

void ComputeGate::begin() {
  std::lock_guard lock(mu_);
  ++computing_;
}

bool ComputeGate::end() {
  std::lock_guard lock(mu_);
  return computing_ > 0 && --computing_ == 0;
}

bool ComputeGate::computing() const {
  std::lock_guard lock(mu_);
  return computing_ > 0;
}

bool ComputeGate::releases() const { return !hold_ || !computing() || waits_->blocked > 0; }

void ComputeGate::admit(std::vector<Response>& ready, bool release) {
  if (!release) {
    for (Response& r : ready) held_.push_back(std::move(r));
    ready.clear();
  } else if (!held_.empty()) {
    for (Response& r : ready) held_.push_back(std::move(r));
    ready.swap(held_);
    held_.clear();
  }
}

}  // namespace cohort::comm
