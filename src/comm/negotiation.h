// What ranks tell each other to agree on a collective: a Meta per named tensor
// (serialised into one message per rank and cycle), the flags every rank votes on each
// cycle, the ResponseCache that lets steady-state cycles exchange one bit per tensor
// instead of its Meta, and what the exchanges leave behind: the Responses (collectives
// ready on every rank) and the table of names that only some ranks have announced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/types.h"

namespace cohort::comm {

struct Meta {
  enum class Kind : uint8_t { kAnnounce, kWithdraw };
  Kind kind = Kind::kAnnounce;
  std::string name;
  OpType type = OpType::kAllreduce;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  double prescale = 1.0, postscale = 1.0;
  Shape shape;
  std::vector<int64_t> splits;
  bool device = false;  // CUDA memory: runs on the device transport (NCCL)

  // Everything but kind is equal (what a cache hit requires).
  bool same_signature(const Meta& o) const;
  // "allreduce sum f32[4, 3]" (with root / splits where they matter).
  std::string describe() const;
};

// One rank's message for a cycle.
struct Message {
  uint64_t submitted = 0;  // operations this rank has submitted so far
  // This rank's engine is shutting down: it submits nothing more, and every operation
  // it still has pending is in this message or was announced in full before.
  bool shutting_down = false;
  std::vector<Meta> metas;
};

std::string encode(const Message& m);
// Throws kInternal on a malformed message (a bug or memory corruption, never user input).
Message decode(const std::string& bytes);

// What each rank votes every cycle, in the first word of the exchange. The words are
// ANDed across ranks, so a flag read back from the exchanged word holds on every rank.
struct CycleFlags {
  bool nothing_announced = false;  // no Meta to send: the full exchange is skipped
  bool shutting_down = false;      // the engine is being destroyed
  bool idle = false;               // nothing pending
  bool releases_held = false;      // holds no reductions back for compute (hold_during_compute)

  uint64_t to_word() const;
  static CycleFlags from_word(uint64_t word);
};

// The name every rank's join goes by.
inline constexpr const char* kJoinName = "__join__";

// A collective every rank has submitted (or joined without): what each rank announced
// (empty for ranks that have joined) and, unless `error` says why it cannot run, the
// signature they agree on.
struct Response {
  std::string name;
  std::vector<std::optional<Meta>> metas;  // by rank
  Meta agreed;
  std::string error;         // set when the ranks disagree: the collective fails everywhere
  bool cached = false;       // ready through a cache bit
  bool with_joined = false;  // some ranks take part without data (they have joined)
  int64_t ready_us = 0;      // when the exchange made it ready (timeline)
};

// Checks that the ranks' announcements of `name` agree (only allgather and alltoall may
// differ in their first dimension; a broadcast needs its root's data) and takes the
// first rank's Meta as the agreed one. metas has one slot per rank, at least one filled.
Response agree(const std::string& name, std::vector<std::optional<Meta>> metas);

// What the full exchanges told this rank about the others: the names announced by some
// ranks but not yet by all (in the order first seen), the ranks that have joined, the
// ranks whose engines are shutting down, and how many operations each rank had
// submitted at its last full exchange.
struct AnnouncementTable {
  struct Entry {
    std::vector<std::optional<Meta>> metas;  // by rank
    Clock::time_point first_seen;
    bool warned = false;  // the stall inspector has reported it
  };
  explicit AnnouncementTable(int size)
      : joined(static_cast<size_t>(size), false),
        shutting_down(static_cast<size_t>(size), false),
        submitted(static_cast<size_t>(size), 0) {}

  std::unordered_map<std::string, Entry> entries;
  std::vector<std::string> order;
  std::vector<bool> joined;
  int last_joined = -1;
  std::vector<bool> shutting_down;  // never reset: a rank's engine does not come back
  std::vector<uint64_t> submitted;

  bool any_joined() const;
  bool any_shutting_down() const;
  // The ranks that have neither announced `e` nor joined.
  std::vector<int> missing(const Entry& e) const;
  // Of those, the ones shutting down: while any is listed, `e` can never run.
  std::vector<int> missing_for_good(const Entry& e) const;
  // The ranks shutting down that have not joined: a join can never complete.
  std::vector<int> never_joining() const;
  // "0: 12, 1: 11": a lower count is the first rank that diverged.
  std::string submitted_per_rank() const;
};

// "[0, 2]".
std::string rank_list(const std::vector<int>& ranks);

// The error of an operation (a join too) that can never complete because `ranks` shut
// down their engines without submitting it: names them and says where the cause is.
Status peer_shutdown_status(const Meta& meta, const std::vector<int>& ranks);

// Agreed responses by name, each in a fixed bit position. Every rank applies the same
// puts, touches and erases in the same order, so positions agree without talking.
class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity), slots_(capacity) {}
  size_t capacity() const { return capacity_; }
  std::optional<size_t> find(const std::string& name) const;
  const std::vector<std::optional<Meta>>& metas(size_t bit) const { return slots_[bit].metas; }
  const std::string& name(size_t bit) const { return slots_[bit].name; }
  void put(const std::string& name, const std::vector<std::optional<Meta>>& metas);
  void touch(size_t bit) { slots_[bit].last_used = ++clock_; }
  bool erase(const std::string& name);

 private:
  struct Slot {
    bool used = false;
    std::string name;
    std::vector<std::optional<Meta>> metas;
    uint64_t last_used = 0;
  };
  size_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, size_t> index_;
  uint64_t clock_ = 0;
};

}  // namespace cohort::comm
