// kernels::for_each and kernels::reduce_into against serial loops, below and above the
// size where the host splits the work across a libgomp team (run under TSan too). The
// test's own functors go through the host entry points (a CUDA build instantiates
// device launches only for the library's functors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/for_each.h"
#include "kernels/list_launch.h"
#include "kernels/optim_update.h"
#include "tensor/device.h"

namespace cohort {
namespace {

struct Axpy {
  float a;
  COHORT_HD void operator()(int64_t i, float* y, const float* x) const { y[i] += a * x[i]; }
};

struct Square {
  const int64_t* x;
  int64_t operator()(int64_t i) const { return x[i] * x[i]; }
};

struct Max {
  int64_t operator()(int64_t a, int64_t b) const { return a < b ? b : a; }
};

const int64_t kSizes[] = {
    0, 1, 15, 1000, kernels::kSerialBelow - 1, kernels::kSerialBelow, kernels::kSerialBelow * 3 + 17, 1 << 20};

TEST(ForEach, MatchesASerialLoopOnEveryTeamSize) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : kSizes) {
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        x[static_cast<size_t>(i)] = static_cast<float>(i % 97) * 0.25f;
        y[static_cast<size_t>(i)] = want[static_cast<size_t>(i)] = static_cast<float>(i % 13);
      }
      const Axpy f{2.0f};
      for (int64_t i = 0; i < n; ++i) f(i, want.data(), x.data());
      kernels::host_for_each(threads, n, f, y.data(), static_cast<const float*>(x.data()));
      EXPECT_EQ(y, want) << "n=" << n << " threads=" << threads;
    }
  }
}

TEST(ForEach, RunsEveryIndexExactlyOnce) {
  const int64_t n = kernels::kSerialBelow * 5 + 3;
  std::vector<int> hits(static_cast<size_t>(n), 0);
  struct Count {
    COHORT_HD void operator()(int64_t i, int* h) const { ++h[i]; }
  };
  kernels::host_for_each(4, n, Count{}, hits.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << i;
}

// A host loop calls a copy of the functor, never the caller's object: through a
// reference, every store to a float array could change the functor's float members,
// and the compiler then reloaded them each element and did not vectorise (SGD ran at a
// third of an axpy's speed). The copy is what this pins; the benchmark
// (tests/perf/train/train_bench) measures the speed.
TEST(ForEach, HostLoopsCallACopyOfTheFunctorNotTheCallersObject) {
  struct WhereAmI {
    const void* caller;
    COHORT_HD void operator()(int64_t i, int* seen_caller) const { seen_caller[i] = this == caller; }
    int64_t operator()(int64_t i) const { return (this == caller) + 0 * i; }
  };
  for (int threads : {1, 3}) {
    for (int64_t n : {int64_t{5}, kernels::kSerialBelow * 2}) {
      WhereAmI f{nullptr};
      f.caller = &f;
      std::vector<int> seen(static_cast<size_t>(n), -1);
      kernels::host_for_each(threads, n, f, seen.data());
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), n) << "n=" << n << " threads=" << threads;
      int64_t calls_on_caller = 0;
      kernels::host_reduce_into(threads, n, f, kernels::Plus{}, &calls_on_caller);
      EXPECT_EQ(calls_on_caller, 0) << "n=" << n << " threads=" << threads;
    }
  }
}

TEST(ReduceInto, SumsAndMaximaMatchASerialLoopAndCombineWithTheOutput) {
  for (int threads : {1, 2, 5}) {
    for (int64_t n : kSizes) {
      std::vector<int64_t> x(static_cast<size_t>(n));
      std::iota(x.begin(), x.end(), int64_t{-7});
      int64_t want = 11, got = 11;  // an earlier result the reduction adds to
      for (int64_t v : x) want += v * v;
      kernels::host_reduce_into(threads, n, Square{x.data()}, kernels::Plus{}, &got);
      EXPECT_EQ(got, want) << "n=" << n << " threads=" << threads;
      int64_t top = INT64_MIN;
      kernels::host_reduce_into(threads, n, Square{x.data()}, Max{}, &top);
      int64_t want_top = INT64_MIN;
      for (int64_t v : x) want_top = std::max(want_top, v * v);
      EXPECT_EQ(top, want_top) << "n=" << n;
    }
  }
}

TEST(ReduceInto, TheNonFiniteCountOfLossScalingScalesEveryElement) {
  const int64_t n = kernels::kSerialBelow * 2;
  std::vector<float> g(static_cast<size_t>(n), 4.0f);
  g[5] = INFINITY;
  g[static_cast<size_t>(n - 1)] = NAN;
  uint32_t bad = 0;
  kernels::reduce_into(Stream::host(2), n, kernels::UnscaleCount{g.data(), 0.5f}, kernels::Plus{}, &bad);
  EXPECT_EQ(bad, 2u);
  EXPECT_EQ(g[0], 2.0f);
  EXPECT_EQ(g[static_cast<size_t>(n - 2)], 2.0f);
}

TEST(ForEach, TheLibraryFunctorsRunOnAHostStream) {
  const int64_t n = kernels::kSerialBelow + 5;
  std::vector<float> x(static_cast<size_t>(n), 3.0f);
  kernels::for_each(Stream::host(2), n, kernels::Scale{0.5f}, x.data());
  EXPECT_EQ(x.front(), 1.5f);
  EXPECT_EQ(x.back(), 1.5f);
  kernels::for_each(Stream::host(2), n, kernels::Zero{}, x.data());
  EXPECT_EQ(*std::max_element(x.begin(), x.end()), 0.0f);
}

TEST(ForEachList, EachItemRunsItsOwnFunctorOnItsOwnTensors) {
  std::vector<float> a(kernels::kSerialBelow + 3, 1.0f), b(7, 2.0f), c(1, 4.0f);
  std::vector<float> ga(a.size(), 1.0f), gb(b.size(), 1.0f), gc(c.size(), 1.0f);
  std::vector<float> va(a.size(), 0.0f), vb(b.size(), 0.0f), vc(c.size(), 0.0f);
  using Item = kernels::ForEachItem<kernels::SgdUpdate, float*, const float*, float*>;
  std::vector<Item> items = {
      {static_cast<int64_t>(a.size()), {0.5f, 0.9f, 0.0f, false}, {a.data(), ga.data(), va.data()}},
      {0, {9.0f, 0.0f, 0.0f, false}, {nullptr, nullptr, nullptr}},  // empty: never touched
      {static_cast<int64_t>(b.size()), {0.25f, 0.0f, 0.0f, false}, {b.data(), gb.data(), nullptr}},
      {static_cast<int64_t>(c.size()), {1.0f, 0.5f, 1.0f, false}, {c.data(), gc.data(), vc.data()}}};
  kernels::for_each_list(Stream::host(2), items);
  EXPECT_EQ(a.front(), 0.5f);
  EXPECT_EQ(a.back(), 0.5f);
  EXPECT_EQ(va.back(), 1.0f);
  EXPECT_EQ(b.back(), 1.75f);
  EXPECT_EQ(c[0], 4.0f - (1.0f + 4.0f));  // weight decay 1: d = g + w
}

TEST(ReduceListInto, CountsAcrossEveryItemIntoOneOutput) {
  std::vector<float> a(kernels::kSerialBelow * 2, 2.0f), b(5, 2.0f);
  a[3] = INFINITY;
  b[4] = NAN;
  std::vector<kernels::ReduceItem<kernels::UnscaleCount>> items = {{static_cast<int64_t>(a.size()), {a.data(), 0.5f}},
                                                                   {static_cast<int64_t>(b.size()), {b.data(), 0.25f}}};
  uint32_t bad = 1;  // an earlier count the list adds to
  kernels::reduce_list_into(Stream::host(2), items, kernels::Plus{}, &bad);
  EXPECT_EQ(bad, 3u);
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(b[0], 0.5f);
}

TEST(ReduceEachInto, EachItemCombinesIntoItsOwnOutput) {
  std::vector<float> a(kernels::kSerialBelow * 3 + 1, 0.5f), b(3, 2.0f), c(4, -1.0f);
  double out[4] = {0.0, 1.0, 7.0, 0.0};  // out[1] holds an earlier sum; out[2] no item's
  using Item = kernels::ReduceToItem<double, kernels::SquareF64>;
  const std::vector<Item> items = {{static_cast<int64_t>(a.size()), {a.data()}, &out[0]},
                                   {static_cast<int64_t>(b.size()), {b.data()}, &out[1]},
                                   {0, {nullptr}, &out[3]},  // empty: its output stays
                                   {static_cast<int64_t>(c.size()), {c.data()}, &out[3]}};
  kernels::reduce_each_into(Stream::host(2), items, kernels::Plus{});
  EXPECT_EQ(out[0], 0.25 * static_cast<double>(a.size()));
  EXPECT_EQ(out[1], 1.0 + 3 * 4.0);
  EXPECT_EQ(out[2], 7.0);
  EXPECT_EQ(out[3], 4.0);
}

TEST(ListLaunch, EveryElementOfEveryItemGoesToExactlyOneThread) {
  // Walks each planned launch block by block and thread by thread, as the CUDA kernels
  // do: small and empty items, one larger than its blocks cover in a pass, launches cut
  // at the capacity.
  const std::vector<int64_t> n = {5, 0, 256, 257, 1, kernels::kMaxBlocksPerItem * 64 * 3 + 17, 0, 1000, 64};
  const unsigned threads = 64;
  for (int capacity : {1, 3, 100}) {
    std::vector<std::vector<int>> seen(n.size());
    for (size_t i = 0; i < n.size(); ++i) seen[i].assign(static_cast<size_t>(n[i]), 0);
    const std::vector<kernels::ListLaunchPlan> plans = kernels::plan_list_launches(n, capacity, threads);
    size_t next = 0;
    for (const kernels::ListLaunchPlan& p : plans) {
      ASSERT_LE(static_cast<int>(p.items.size()), capacity);
      ASSERT_EQ(p.first_block.size(), p.items.size() + 1);
      for (size_t k = 0; k < p.items.size(); ++k) {
        while (n[next] == 0) ++next;
        EXPECT_EQ(p.items[k], next++) << "items keep the list's order";
      }
      for (unsigned block = 0; block < p.first_block.back(); ++block)
        for (unsigned t = 0; t < threads; ++t) {
          const kernels::ListShare s =
              kernels::list_share(p.first_block.data(), static_cast<int>(p.items.size()), block, threads, t);
          ASSERT_GE(s.item, 0);
          ASSERT_LT(s.item, static_cast<int>(p.items.size()));
          const size_t item = p.items[static_cast<size_t>(s.item)];
          for (int64_t i = s.first; i < n[item]; i += s.stride) ++seen[item][static_cast<size_t>(i)];
        }
    }
    for (size_t i = 0; i < n.size(); ++i)
      for (size_t e = 0; e < seen[i].size(); ++e)
        ASSERT_EQ(seen[i][e], 1) << "capacity " << capacity << ", item " << i << ", element " << e;
  }
  EXPECT_EQ(kernels::plan_list_launches(n, 3, threads).size(), 3u);  // 7 non-empty items
  EXPECT_TRUE(kernels::plan_list_launches({0, 0}, 3, threads).empty());
}

TEST(ReduceInto, SquaresInF64AreStableAcrossTeamSizes) {
  const int64_t n = 300000;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  double one = 0, four = 0;
  kernels::reduce_into(Stream::host(1), n, kernels::SquareF64{x.data()}, kernels::Plus{}, &one);
  kernels::reduce_into(Stream::host(4), n, kernels::SquareF64{x.data()}, kernels::Plus{}, &four);
  EXPECT_NEAR(one, four, 1e-9 * one);
}

}  // namespace
}  // namespace cohort
