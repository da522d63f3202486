// The shared-memory allreduce with ranks as threads over regions of one heap block:
// every dtype and op against a reference computed here in double, pieces that do not
// divide among the ranks, many pieces per call, results bit-identical on every rank,
// slot reuse across hundreds of calls mixed with the negotiation's AND of words, a wait
// for a late peer that sleeps instead of polling, and an abandoned wait that abort() ends.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "comm/shm/shm_allreduce.h"
#include "core/status.h"
#include "support/tensor_values.h"
#include "tensor/tensor.h"

namespace cohort::comm {
namespace {

using kernels::Reduce;

// One block holding every rank's region, 64-byte aligned, counters zeroed.
class Regions {
 public:
  Regions(int n, size_t slot_bytes) : bytes_(ShmAllreduce::region_bytes(slot_bytes)) {
    block_ = std::make_unique<unsigned char[]>(bytes_ * static_cast<size_t>(n) + 64);
    auto base = (reinterpret_cast<uintptr_t>(block_.get()) + 63) / 64 * 64;
    for (int q = 0; q < n; ++q) {
      unsigned char* r = reinterpret_cast<unsigned char*>(base) + bytes_ * static_cast<size_t>(q);
      ShmAllreduce::zero_counters(r);
      regions_.push_back(r);
    }
  }
  const std::vector<unsigned char*>& regions() const { return regions_; }

 private:
  size_t bytes_;
  std::unique_ptr<unsigned char[]> block_;
  std::vector<unsigned char*> regions_;
};

void run_ranks(int n, size_t slot_bytes, const std::function<void(ShmAllreduce&, int)>& fn) {
  Regions regions(n, slot_bytes);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ShmAllreduce shm(r, regions.regions(), slot_bytes);
      fn(shm, r);
    });
  for (auto& t : threads) t.join();
}

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8};
const Reduce kOps[] = {Reduce::kSum, Reduce::kMin, Reduce::kMax, Reduce::kProd};

// Small integers: exact in every dtype, sums and products of up to 4 ranks included.
double value(int rank, size_t i) { return static_cast<double>((static_cast<size_t>(rank) * 7 + i) % 3 + 1); }

double reference(Reduce op, int n, size_t i) {
  double acc = value(0, i);
  for (int q = 1; q < n; ++q) {
    double v = value(q, i);
    acc = op == Reduce::kSum   ? acc + v
          : op == Reduce::kMin ? std::min(acc, v)
          : op == Reduce::kMax ? std::max(acc, v)
                               : acc * v;
  }
  return acc;
}

TEST(ShmAllreduce, EveryDtypeAndOpMatchesTheReference) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t slot : {size_t{64}, size_t{4096}}) {
      std::atomic<int> wrong{0};
      run_ranks(n, slot, [&](ShmAllreduce& shm, int rank) {
        for (DType t : kDTypes) {
          size_t esize = dtype_size(t);
          // Empty, shorter than one line per rank, ragged, exactly one piece, several pieces.
          for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{17}, size_t{64}, size_t{65}, slot / esize,
                               3 * slot / esize + 7}) {
            for (Reduce op : kOps) {
              Tensor buf = Tensor::empty({static_cast<int64_t>(count)}, t);
              for (size_t i = 0; i < count; ++i) test::set(buf, static_cast<int64_t>(i), value(rank, i));
              shm.allreduce(buf.data(), count, t, op);
              for (size_t i = 0; i < count; ++i) {
                double got = test::get(buf, static_cast<int64_t>(i));
                if (got != reference(op, n, i) && wrong++ < 5)
                  ADD_FAILURE() << "rank " << rank << " of " << n << ", slot " << slot << ", " << dtype_name(t)
                                << " op " << static_cast<int>(op) << " count " << count << " [" << i << "]: " << got
                                << " != " << reference(op, n, i);
              }
            }
          }
        }
      });
    }
  }
}

TEST(ShmAllreduce, OutOfPlaceFillsTheOutputAndLeavesTheInputAlone) {
  // The output at the start of a line and one element past it (its stores are
  // non-temporal from the first whole line on), with a guard element on each side.
  for (int n : {1, 2, 3}) {
    std::atomic<int> wrong{0};
    run_ranks(n, 4096, [&](ShmAllreduce& shm, int rank) {
      for (DType t : {DType::kF32, DType::kBF16, DType::kI64}) {
        for (size_t count : {size_t{1}, size_t{65}, 3 * 4096 / dtype_size(t) + 7}) {
          for (int64_t shift : {0, 1}) {
            for (Reduce op : kOps) {
              Tensor in = Tensor::empty({static_cast<int64_t>(count)}, t);
              Tensor out = Tensor::empty({static_cast<int64_t>(count) + 2}, t);
              for (size_t i = 0; i < count; ++i) test::set(in, static_cast<int64_t>(i), value(rank, i));
              for (int64_t i = 0; i < out.numel(); ++i) test::set(out, i, 99);
              shm.allreduce(in.data(), static_cast<char*>(out.data()) + shift * static_cast<int64_t>(dtype_size(t)),
                            count, t, op);
              for (size_t i = 0; i < count; ++i) {
                const auto at = static_cast<int64_t>(i);
                if ((test::get(out, at + shift) != reference(op, n, i) || test::get(in, at) != value(rank, i)) &&
                    wrong++ < 5)
                  ADD_FAILURE() << "rank " << rank << " of " << n << ", " << dtype_name(t) << " count " << count
                                << " shift " << shift << " [" << i << "]: out " << test::get(out, at + shift)
                                << " (expected " << reference(op, n, i) << "), in " << test::get(in, at) << " (was "
                                << value(rank, i) << ")";
              }
              const int64_t after = static_cast<int64_t>(count) + shift;
              for (int64_t g = 0; g < out.numel(); ++g)
                if ((g < shift || g >= after) && test::get(out, g) != 99 && wrong++ < 5)
                  ADD_FAILURE() << "rank " << rank << ", " << dtype_name(t) << " count " << count << " shift " << shift
                                << ": the element " << g << " outside the output changed to " << test::get(out, g);
            }
          }
        }
      }
    });
  }
}

TEST(ShmAllreduce, ResultsAreBitIdenticalOnEveryRankInPlaceOrNot) {
  const int n = 3;
  const size_t count = 10007;  // 3 pieces of 4 KiB, none divisible by 3
  std::vector<std::vector<float>> out(n);
  run_ranks(n, 4096, [&](ShmAllreduce& shm, int rank) {
    std::mt19937 rng(static_cast<unsigned>(rank) + 1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = dist(rng) * 1e3f;  // sums round differently in different orders
    std::vector<float> apart(count);
    shm.allreduce(v.data(), apart.data(), count, DType::kF32, Reduce::kSum);
    shm.allreduce(v.data(), count, DType::kF32, Reduce::kSum);
    // Out of place combines in the same order as in place.
    EXPECT_EQ(std::memcmp(apart.data(), v.data(), count * sizeof(float)), 0) << "rank " << rank;
    out[static_cast<size_t>(rank)] = v;
  });
  for (int q = 1; q < n; ++q)
    EXPECT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(q)].data(), count * sizeof(float)), 0) << q;
}

TEST(ShmAllreduce, SlotsAreReusedAcrossManyCallsMixedWithAndWords) {
  const int n = 3;
  std::atomic<int> wrong{0};
  run_ranks(n, 256, [&](ShmAllreduce& shm, int rank) {
    ASSERT_TRUE(shm.words_fit(32));
    ASSERT_FALSE(shm.words_fit(33));
    for (int step = 0; step < 400; ++step) {
      size_t count = static_cast<size_t>(step % 7) * 37 + 1;  // 1..223 floats: 1 to 4 pieces
      std::vector<int32_t> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = rank * 1000 + step + static_cast<int32_t>(i);
      shm.allreduce(v.data(), count, DType::kI32, Reduce::kSum);
      for (size_t i = 0; i < count; ++i)
        if (v[i] != 3000 + 3 * (step + static_cast<int32_t>(i))) ++wrong;
      // Each rank clears its own bit of word 0 and sets a bit pattern in word 1.
      std::vector<uint64_t> words = {~(uint64_t{1} << rank), uint64_t{0xff} << (8 * rank) | 1, ~uint64_t{0}};
      shm.and_words(words);
      if (words[0] != ~uint64_t{7} || words[1] != 1 || words[2] != ~uint64_t{0}) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

// Voluntary context switches (sleeps) and CPU seconds of the calling thread so far.
struct ThreadUsage {
  long sleeps;
  double cpu_s;
};
ThreadUsage thread_usage() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return {u.ru_nvcsw, static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                          1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec)};
}

TEST(ShmAllreduce, ARankWaitingForALatePeerSleepsUntilThePeerArrives) {
  // A negotiation cycle's barrier where one rank comes 300 ms late (it was computing):
  // the waiting rank must neither poll (yield or sleep in a loop) nor burn its core.
  ThreadUsage used{};
  run_ranks(2, 256, [&](ShmAllreduce& shm, int rank) {
    std::vector<uint64_t> words = {~uint64_t{0}};
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const ThreadUsage before = thread_usage();
    shm.and_words(words);
    const ThreadUsage after = thread_usage();
    if (rank == 0) used = {after.sleeps - before.sleeps, after.cpu_s - before.cpu_s};
  });
  EXPECT_LE(used.sleeps, 10) << "the waiting rank woke up again and again to look for its peer";
  EXPECT_LT(used.cpu_s, 0.03) << "the waiting rank used CPU while its peer was late";
}

TEST(ShmAllreduce, AbortEndsAWaitForARankThatNeverComes) {
  Regions regions(2, 256);
  ShmAllreduce shm(0, regions.regions(), 256);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    shm.abort();
  });
  std::vector<float> v(16, 1.0f);
  try {
    shm.allreduce(v.data(), v.size(), DType::kF32, Reduce::kSum);  // rank 1 never calls
    ADD_FAILURE() << "the allreduce returned without its peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kCancelled);
    EXPECT_NE(std::string(e.what()).find("shutting down"), std::string::npos) << e.what();
  }
  stopper.join();
}

TEST(ShmAllreduce, RejectsTinySlotsAndMisalignedRegions) {
  Regions regions(2, 256);
  EXPECT_THROW(ShmAllreduce(0, regions.regions(), 32), Error);
  std::vector<unsigned char*> shifted = regions.regions();
  shifted[1] += 8;
  EXPECT_THROW(ShmAllreduce(0, shifted, 256), Error);
  EXPECT_THROW(ShmAllreduce(2, regions.regions(), 256), Error);
}

}  // namespace
}  // namespace cohort::comm
