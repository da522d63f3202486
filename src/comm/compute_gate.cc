#include "comm/compute_gate.h"

#include <pthread.h>

namespace cohort::comm {

void ComputeGate::begin() {
  std::lock_guard lock(mu_);
  ++computing_;
}

bool ComputeGate::end() {
  std::lock_guard lock(mu_);
  if (computing_ == 0 || --computing_ > 0) return false;
  compute_cpu_ = sched_getcpu();  // the core compute is about to leave idle
  return true;
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

int ComputeGate::release_core() const {
  if (!hold_) return -1;
  std::lock_guard lock(mu_);
  return compute_cpu_;
}

CorePin::CorePin(int cpu) {
  if (cpu < 0 || pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0 || !CPU_ISSET(cpu, &saved_))
    return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pinned_ = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

CorePin::~CorePin() {
  if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
}

}  // namespace cohort::comm
