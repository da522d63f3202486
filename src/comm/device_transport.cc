#include "comm/device_transport.h"

#include "core/status.h"

namespace cohort::comm {

Transport* LazyDeviceTransport::get(Transport& control, std::string* error) {
  // Only this (the engine) thread writes transport_, so reading it here needs no lock.
  if (transport_) return transport_.get();
  if (error_.empty()) {
    // Every rank reaches this response at the same point of the same cycle: agree
    // that every rank can create the device transport before any of them tries.
    std::string mine = factory_.create ? std::string() : cat("rank ", control.rank(), ": ", factory_.unavailable);
    std::string why;
    for (const std::string& s : control.allgather_bytes(mine))
      if (!s.empty()) why += cat(why.empty() ? "" : "; ", s);
    if (why.empty()) {
      try {
        std::unique_ptr<Transport> created = factory_.create();
        std::lock_guard lock(mu_);
        if (aborted_) created->abort_waits();
        transport_ = std::move(created);
        return transport_.get();
      } catch (const Error& err) {
        error_ = cat("creating the device transport failed: ", err.what());
      }
    } else {
      error_ = cat("collectives of CUDA tensors need a device transport (NCCL) on every rank, but ", why);
    }
  }
  *error = error_;
  return nullptr;
}

bool LazyDeviceTransport::created() {
  std::lock_guard lock(mu_);
  return transport_ != nullptr;
}

void LazyDeviceTransport::abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  if (transport_) transport_->abort_waits();
}

}  // namespace cohort::comm
