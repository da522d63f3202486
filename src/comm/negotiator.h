// The negotiator decides, once per engine cycle and alike on every rank, which of the
// submitted collectives are ready everywhere and in which order (Horovod's Controller
// and TensorQueue). It keeps this rank's pending operations and announces each one:
// in full (a Meta) once, or, when the response cache knows its signature, as one bit
// set in every cycle until it is ready. One word of flags and the cache bits are ANDed
// across ranks every cycle; the full Metas are exchanged only in cycles where some
// rank has something new to announce.
//
// A rank whose engine starts shutting down announces so in a full exchange, with every
// operation it still has pending in full. From then on no rank uses the cache, so the
// table shows all that each rank has pending, and an operation that a rank shutting down
// has not announced can never run: every rank drops it alike, and ranks that are not
// shutting down themselves fail their request with kPeerShutdown naming those ranks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/negotiation.h"
#include "comm/stall_inspector.h"
#include "comm/timeline.h"
#include "comm/transport.h"
#include "comm/types.h"

namespace cohort::comm {

class Negotiator {
 public:
  // This rank's side of a cycle.
  struct Vote {
    uint64_t submitted = 0;  // operations this rank has submitted so far
    bool shutting_down = false;
    bool releases_held = false;  // see ComputeGate::releases
  };
  // What a cycle agreed on, the same on every rank.
  struct Round {
    std::vector<Response> ready;     // in the same order on every rank
    bool all_shutting_down = false;  // every rank's engine is being destroyed
    bool release = false;            // every rank votes to run held reductions now
    bool full_exchange = false;      // Metas were exchanged (not just cache bits)
  };

  // `control` carries the exchanges; the stall inspector, timeline and counters are
  // the engine's.
  Negotiator(Transport& control, size_t cache_capacity, const StallInspector& stalls, Timeline& timeline,
             EngineCounters& counters);

  // Queues an operation; a name already pending fails the new request at once.
  void add(TensorEntry e);
  Round negotiate(const Vote& mine, Clock::time_point now);
  // The caller's operation behind a response, or null on a rank taking part without
  // one (it has joined).
  TensorEntry* entry(const std::string& name);
  // Keeps a ready response's operation out of later exchanges while the compute gate
  // holds it.
  void hold(const std::string& name);
  // Completes the caller's request (if this rank has one) and records a successful
  // signature in the response cache.
  void complete(Response& r, const Status& s);
  // After execution: operations waiting on a cache bit that moved or vanished (an
  // eviction, a changed signature, a join) are announced again.
  void recheck_cached();
  // Completes every pending request with `s`.
  void fail_all(const Status& s);

  // Whether this rank has operations pending (announced, waiting for other ranks, or
  // held): only then may another cycle soon make progress that needs it.
  bool pending() const { return !pending_.empty(); }
  // Collectives given up so far because some rank never submitted them within
  // stall_shutdown_s.
  uint64_t stalled() const { return stalled_; }
  AnnouncementTable& table() { return table_; }

 private:
  struct Pending {
    enum class State { kNew, kCached, kAnnounced, kHeld };  // kHeld: agreed, waiting for the compute gate
    State state = State::kNew;
    TensorEntry entry;
    Meta meta;
    size_t bit = 0;
    bool skip_cache = false;   // waited long enough that the stall inspector must see it
    int64_t exchanged_us = 0;  // end of the first exchange that carried it (timeline)
  };

  // Fills the cache bits and the message of this cycle; fails and withdraws operations
  // pending longer than stall_shutdown_s.
  void announce(Message& msg, std::vector<uint64_t>& words, Clock::time_point now);
  void process_messages(const std::vector<std::string>& messages, std::vector<Response>& ready);
  // Drops the table's operations that a rank shutting down never submitted, and fails
  // this rank's requests for them.
  void fail_abandoned();
  // Fails this rank's pending `name` with kPeerShutdown naming `gone`, unless this rank
  // is shutting down too.
  void fail_pending(const std::string& name, const std::vector<int>& gone);

  Transport& control_;
  const StallInspector& stalls_;
  Timeline& timeline_;
  EngineCounters& counters_;
  int rank_, size_;
  uint64_t next_seq_ = 0;
  uint64_t stalled_ = 0;                 // collectives given up after stall_shutdown_s
  std::map<uint64_t, Pending> pending_;  // in submission order
  std::unordered_map<std::string, uint64_t> pending_by_name_;
  AnnouncementTable table_;
  ResponseCache cache_;
  bool shutting_down_ = false;  // this rank's vote of the current cycle
};

}  // namespace cohort::comm
