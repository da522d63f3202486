// Allreduce of host memory among ranks that can address each other's memory: the
// processes of one node through a shared segment (the MPI transport maps one), or
// threads of one process (tests). It beats Open MPI's shared-memory allreduce because
// the work is split instead of repeated: every rank reduces only its 1/n segment of each
// piece and the ranks copy the others' reduced segments, a reduce-scatter then an
// allgather through per-rank slots that stay in the cache.
//
// Each rank owns one region of region_bytes(slot_bytes): two progress counters, each
// on its own cache lines, and two slots (piece k uses slot k % 2, so a rank may fill
// the next piece while slower ranks still read the last one). For piece k a rank
//   A  copies its data of every segment but its own into its slot, then sets filled = k;
//   B  once every rank has filled k, reduces its own segment into the caller's output
//      (its own data, then the others' slots in rank order), reduces it across
//      nodes if the job spans several (a hierarchical allreduce: one stream per local
//      rank), copies the result into its slot, then sets reduced = k;
//   C  once every rank has reduced k, copies the others' reduced segments into the output.
// A slot is never overwritten while a peer still reads it: a rank fills piece k + 2 only
// after B of piece k + 1 saw every rank fill k + 1, which each did after its C of piece
// k. Counters only grow, and every rank makes the same sequence of calls (the engine has
// negotiated them), so piece numbers agree without any other exchange. Each segment is
// reduced by one rank and copied by the others: the result is bit-identical on every
// rank, and the same from run to run.
//
// A wait spins for a few microseconds, then sleeps on a futex in the awaited rank's
// counter line until that rank publishes (it wakes its sleepers): a rank waiting for its
// peers, as in every negotiation cycle, takes no CPU from compute. A rank that dies
// mid-call leaves the others asleep on its counters: mpirun ends the whole job when one of
// its ranks dies (1-3 s here).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/reduce.h"
#include "tensor/dtype.h"

namespace cohort::comm {

class ShmAllreduce {
 public:
  // Bytes of one rank's region for slots of slot_bytes (rounded up to whole cache lines).
  static size_t region_bytes(size_t slot_bytes);

  // regions[q]: rank q's region, mapped in this process, 64-byte aligned, its counters
  // zero before any rank's first call (zero_counters, then a barrier of the ranks).
  // slot_bytes: the most bytes one piece carries (at least 64).
  ShmAllreduce(int rank, std::vector<unsigned char*> regions, size_t slot_bytes);
  static void zero_counters(unsigned char* region);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(regions_.size()); }

  // Reduces a segment of elements across nodes, in place: called on the segment this
  // rank has just reduced within its node, before the other local ranks copy it. The
  // ranks with this local rank on every other node make the same calls (each node has as
  // many ranks, so segments agree).
  using AcrossNodes = std::function<void(void* segment, size_t count)>;

  // In place: buf holds count elements of t on entry and the reduction on return. Every
  // rank calls it with the same count, dtype and op, in the same order. Engine thread only.
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op, const AcrossNodes& across = {}) {
    allreduce(buf, buf, count, t, op, across);
  }
  // Out of place: `out` receives the reduction of every rank's `in` (in == out is in
  // place), with no more memory traffic than in place: `in` is read where the in-place
  // call reads the buffer, and `out` is only written, with non-temporal stores (a plain
  // store reads each line first); the reduction is made in this rank's slot, its first
  // combination reading `in` directly. Out of place is slower than in place all the same
  // (0.65-0.75x at 64-256 MiB on 2 ranks of a Zen 4 VM): the in-place call's writes are
  // write-backs of lines in the cache, which overlap its reads, while the core itself
  // pushes every non-temporal line (timed per phase: the two streaming passes took 17 ms
  // of a 256 MiB call's 45, the in-place call's two copies into the cache 7 of 32).
  void allreduce(const void* in, void* out, size_t count, DType t, kernels::Reduce op, const AcrossNodes& across = {});
  // words = the AND of every rank's words (the engine's negotiation flags and cache
  // bits), in one piece; needs words_fit(words.size()). Same calling rules as allreduce.
  void and_words(std::vector<uint64_t>& words);
  bool words_fit(size_t n) const { return n * sizeof(uint64_t) <= slot_bytes_; }
  // Makes a wait for a rank that will never come fail with kCancelled (any thread).
  void abort();

  // How long a wait spins before it sleeps, and the longest sleep between looks at abort().
  static constexpr std::chrono::microseconds kSpin{20};
  static constexpr std::chrono::milliseconds kSleepAtMost{50};

 private:
  enum Counter { kFilled = 0, kReduced = 1 };
  struct Segment {
    size_t begin, end;  // elements of the piece
  };

  void piece(const char* in, char* out, size_t n, size_t esize, DType t, kernels::Reduce op, const AcrossNodes& across);
  Segment segment(int q, size_t n, size_t esize) const;
  std::atomic_ref<uint64_t> counter(int q, Counter c) const;
  // The 32-bit word at `offset` in the line of rank q's counter c (kWakeWord, kSleepers).
  uint32_t* word(int q, Counter c, size_t offset) const;
  // Sets this rank's counter c and wakes the ranks asleep on it.
  void publish(Counter c, uint64_t value);
  unsigned char* slot(int q, uint64_t piece) const;
  // Waits until every other rank's counter c has reached `value`.
  void wait_all(Counter c, uint64_t value) const;

  int rank_;
  std::vector<unsigned char*> regions_;
  size_t slot_bytes_;
  uint64_t pieces_ = 0;  // pieces this rank has completed
  std::atomic<bool> aborted_{false};
};

}  // namespace cohort::comm
