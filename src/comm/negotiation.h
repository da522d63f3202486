// What ranks tell each other to agree on a collective: a Meta per named tensor
// (serialised into one message per rank and cycle), and the ResponseCache that lets
// steady-state cycles exchange one bit per tensor instead of its Meta.
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
  std::vector<Meta> metas;
};

std::string encode(const Message& m);
// Throws kInternal on a malformed message (a bug or memory corruption, never user input).
Message decode(const std::string& bytes);

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
