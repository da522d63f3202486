#include "comm/shm/shm_allreduce.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

#include "core/status.h"
#include "core/copy.h"

namespace cohort::comm {
namespace {

// Each counter's line: the counter, then the word its waiters sleep on (bumped by every
// store that finds sleepers) and how many sleep. Lines sit kLine apart (adjacent-line
// prefetch pairs lines).
constexpr size_t kLine = 128;
constexpr size_t kHeader = 2 * kLine;
constexpr size_t kWakeWord = 8, kSleepers = 12;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Process-shared futex calls (the regions may be mapped by several processes).
void futex_wait(uint32_t* word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);  // woken, EAGAIN, EINTR, ETIMEDOUT: look again
}

void futex_wake_all(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace

size_t ShmAllreduce::region_bytes(size_t slot_bytes) { return kHeader + 2 * round_up(slot_bytes, kLine); }

void ShmAllreduce::zero_counters(unsigned char* region) { std::memset(region, 0, kHeader); }

ShmAllreduce::ShmAllreduce(int rank, std::vector<unsigned char*> regions, size_t slot_bytes)
    : rank_(rank), regions_(std::move(regions)), slot_bytes_(round_up(slot_bytes, kLine)) {
  require(!regions_.empty() && rank >= 0 && rank < size(), "shared-memory allreduce: rank ", rank, " of ", size());
  require(slot_bytes >= 64, "shared-memory allreduce: slots of ", slot_bytes, " bytes; at least 64 are needed");
  for (unsigned char* r : regions_)
    require(r && reinterpret_cast<uintptr_t>(r) % 64 == 0, "shared-memory allreduce: a region is not 64-byte aligned");
}

std::atomic_ref<uint64_t> ShmAllreduce::counter(int q, Counter c) const {
  return std::atomic_ref<uint64_t>(
      *reinterpret_cast<uint64_t*>(regions_[static_cast<size_t>(q)] + static_cast<size_t>(c) * kLine));
}

unsigned char* ShmAllreduce::slot(int q, uint64_t piece) const {
  return regions_[static_cast<size_t>(q)] + kHeader + (piece % 2) * slot_bytes_;
}

ShmAllreduce::Segment ShmAllreduce::segment(int q, size_t n, size_t esize) const {
  // Equal segments in whole cache lines where the piece allows, so the reduction loops
  // run on aligned vectors and no two ranks write one line.
  size_t line = std::max<size_t>(1, 64 / esize);
  size_t per = round_up((n + regions_.size() - 1) / regions_.size(), line);
  size_t begin = std::min(n, static_cast<size_t>(q) * per);
  return {begin, std::min(n, begin + per)};
}

uint32_t* ShmAllreduce::word(int q, Counter c, size_t offset) const {
  return reinterpret_cast<uint32_t*>(regions_[static_cast<size_t>(q)] + static_cast<size_t>(c) * kLine + offset);
}

void ShmAllreduce::publish(Counter c, uint64_t value) {
  // seq_cst on both sides: either a waiter's last look before it sleeps sees this store,
  // or its registration as a sleeper is seen here (and the wake-up comes).
  counter(rank_, c).store(value, std::memory_order_seq_cst);
  if (std::atomic_ref<uint32_t>(*word(rank_, c, kSleepers)).load(std::memory_order_seq_cst) == 0) return;
  std::atomic_ref<uint32_t>(*word(rank_, c, kWakeWord)).fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(word(rank_, c, kWakeWord));
}

void ShmAllreduce::wait_all(Counter c, uint64_t value) const {
  using Clock = std::chrono::steady_clock;
  // Spin briefly (the peers usually arrive within microseconds), then sleep until the
  // awaited rank publishes: a waiting engine takes no core from compute, and the last
  // rank to arrive wakes the others at once (no sleep to oversleep, no yield loop).
  const auto spin_until = Clock::now() + kSpin;
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    std::atomic_ref<uint64_t> v = counter(q, c);
    while (v.load(std::memory_order_acquire) < value && Clock::now() < spin_until)
      for (int i = 0; i < 16; ++i) cpu_relax();
    while (v.load(std::memory_order_acquire) < value) {
      if (aborted_.load(std::memory_order_relaxed))
        fail(Code::kCancelled, "shared-memory allreduce abandoned: the runtime is shutting down after an error");
      std::atomic_ref<uint32_t> sleepers(*word(q, c, kSleepers)), wake(*word(q, c, kWakeWord));
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = wake.load(std::memory_order_seq_cst);
      if (v.load(std::memory_order_seq_cst) < value) futex_wait(word(q, c, kWakeWord), seen, kSleepAtMost);
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
}

void ShmAllreduce::abort() {
  aborted_.store(true, std::memory_order_relaxed);
  for (int q = 0; q < size(); ++q)
    for (Counter c : {kFilled, kReduced}) futex_wake_all(word(q, c, kWakeWord));
}

void ShmAllreduce::allreduce(const void* in, void* out, size_t count, DType t, kernels::Reduce op,
                             const AcrossNodes& across) {
  if (count == 0) return;
  size_t esize = dtype_size(t);
  size_t per_piece = std::max<size_t>(1, slot_bytes_ / esize);
  for (size_t first = 0; first < count; first += per_piece)
    piece(static_cast<const char*>(in) + first * esize, static_cast<char*>(out) + first * esize,
          std::min(per_piece, count - first), esize, t, op, across);
  if (in != out) stream_fence();  // the caller's next stores (its completion) come after `out`
}

void ShmAllreduce::and_words(std::vector<uint64_t>& words) {
  const uint64_t k = ++pieces_;
  if (!words.empty()) std::memcpy(slot(rank_, k), words.data(), words.size() * sizeof(uint64_t));
  publish(kFilled, k);
  wait_all(kFilled, k);
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    const unsigned char* theirs = slot(q, k);
    for (size_t i = 0; i < words.size(); ++i) {
      uint64_t w;
      std::memcpy(&w, theirs + i * sizeof w, sizeof w);
      words[i] &= w;
    }
  }
}

void ShmAllreduce::piece(const char* in, char* out, size_t n, size_t esize, DType t, kernels::Reduce op,
                         const AcrossNodes& across) {
  const uint64_t k = ++pieces_;
  const Segment mine = segment(rank_, n, esize);
  // A: publish every segment but my own.
  unsigned char* published = slot(rank_, k);
  if (mine.begin) copy_bytes(published, in, mine.begin * esize);
  if (n > mine.end) copy_bytes(published + mine.end * esize, in + mine.end * esize, (n - mine.end) * esize);
  publish(kFilled, k);

  // B: reduce my segment (my data, then the others' in rank order), in place in the
  // buffer; out of place in my slot, which is in the cache (the first combination reads
  // `in` and the first peer's slot and writes mine), and from there into `out`.
  // Out of place, `out` is only ever written, with non-temporal stores: a plain store
  // would first read each line of `out` from memory, a third more traffic than in place.
  wait_all(kFilled, k);
  const bool in_place = in == out;
  const size_t len = mine.end - mine.begin;
  if (len) {
    char* acc = in_place ? out + mine.begin * esize : reinterpret_cast<char*>(published) + mine.begin * esize;
    // Out of place, the first combination reads `in` and writes the slot in one pass.
    const char* first = in + mine.begin * esize;
    for (int q = 0; q < size(); ++q) {
      if (q == rank_) continue;
      kernels::combine_to(acc, first, slot(q, k) + mine.begin * esize, len, t, op);
      first = acc;
    }
    if (first != acc) copy_bytes(acc, first, len * esize);  // one rank, out of place
    if (across) across(acc, len);
    if (in_place)
      copy_bytes(published + mine.begin * esize, acc, len * esize);
    else
      stream_bytes(out + mine.begin * esize, acc, len * esize);
  }
  publish(kReduced, k);

  // C: gather the others' reduced segments.
  wait_all(kReduced, k);
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    Segment s = segment(q, n, esize);
    if (s.end == s.begin) continue;
    const size_t at = s.begin * esize, bytes = (s.end - s.begin) * esize;
    if (in_place)
      copy_bytes(out + at, slot(q, k) + at, bytes);
    else
      stream_bytes(out + at, slot(q, k) + at, bytes);
  }
}

}  // namespace cohort::comm
