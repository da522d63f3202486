#include "comm/shm/shm_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

#include "core/status.h"
#include "core/copy.h"

namespace cohort::comm {
namespace {

constexpr size_t kLine = 128;  // counters sit this far apart (adjacent-line prefetch pairs lines)
constexpr size_t kHeader = 2 * kLine;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

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

void ShmAllreduce::wait_all(Counter c, uint64_t value) const {
  using Clock = std::chrono::steady_clock;
  // Spin briefly (the peer usually runs on another core), then yield the core (it may be
  // waiting for it) for kYieldFor, then sleep with growing pauses up to kMaxSleep (an idle
  // or oversubscribed node). kMaxSleep < kYieldFor by design: a rank that overslept is
  // still met by a peer that is yielding, never by one asleep in turn, so two ranks cannot
  // settle into sleeping alternately on every piece.
  constexpr auto kYieldFor = std::chrono::milliseconds(2);
  constexpr auto kMaxSleep = std::chrono::microseconds(1000);
  static_assert(kMaxSleep < kYieldFor);
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    std::atomic_ref<uint64_t> v = counter(q, c);
    Clock::time_point yield_until{};
    auto pause = std::chrono::microseconds(50);
    for (int tries = 0; v.load(std::memory_order_acquire) < value; ++tries) {
      if (aborted_.load(std::memory_order_relaxed))
        fail(Code::kCancelled, "shared-memory allreduce abandoned: the runtime is shutting down after an error");
      if (tries < 200) {
        cpu_relax();
        continue;
      }
      auto now = Clock::now();
      if (tries == 200) yield_until = now + kYieldFor;
      if (now < yield_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, kMaxSleep);
      }
    }
  }
}

void ShmAllreduce::allreduce(void* buf, size_t count, DType t, kernels::Reduce op, const AcrossNodes& across) {
  if (count == 0) return;
  size_t esize = dtype_size(t);
  size_t per_piece = std::max<size_t>(1, slot_bytes_ / esize);
  for (size_t first = 0; first < count; first += per_piece)
    piece(static_cast<char*>(buf) + first * esize, std::min(per_piece, count - first), esize, t, op, across);
}

void ShmAllreduce::and_words(std::vector<uint64_t>& words) {
  const uint64_t k = ++pieces_;
  if (!words.empty()) std::memcpy(slot(rank_, k), words.data(), words.size() * sizeof(uint64_t));
  counter(rank_, kFilled).store(k, std::memory_order_release);
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

void ShmAllreduce::piece(char* data, size_t n, size_t esize, DType t, kernels::Reduce op, const AcrossNodes& across) {
  const uint64_t k = ++pieces_;
  const Segment mine = segment(rank_, n, esize);
  // A: publish every segment but my own.
  unsigned char* out = slot(rank_, k);
  if (mine.begin) copy_bytes(out, data, mine.begin * esize);
  if (n > mine.end) copy_bytes(out + mine.end * esize, data + mine.end * esize, (n - mine.end) * esize);
  counter(rank_, kFilled).store(k, std::memory_order_release);

  // B: reduce my segment, in rank order.
  wait_all(kFilled, k);
  size_t len = mine.end - mine.begin;
  if (len) {
    char* acc = data + mine.begin * esize;
    for (int q = 0; q < size(); ++q)
      if (q != rank_) kernels::combine(acc, slot(q, k) + mine.begin * esize, len, t, op);
    if (across) across(acc, len);
    copy_bytes(out + mine.begin * esize, acc, len * esize);
  }
  counter(rank_, kReduced).store(k, std::memory_order_release);

  // C: gather the others' reduced segments.
  wait_all(kReduced, k);
  for (int q = 0; q < size(); ++q) {
    if (q == rank_) continue;
    Segment s = segment(q, n, esize);
    if (s.end > s.begin) copy_bytes(data + s.begin * esize, slot(q, k) + s.begin * esize, (s.end - s.begin) * esize);
  }
}

}  // namespace cohort::comm
