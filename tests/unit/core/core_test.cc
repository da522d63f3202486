#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "core/logging.h"
#include "core/status.h"
#include "core/strings.h"
#include "core/threads.h"

namespace cohort {
namespace {

TEST(Status, CodesMatchTheCApi) {
  EXPECT_EQ(static_cast<int>(Code::kOk), 0);
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 1);
  EXPECT_EQ(static_cast<int>(Code::kPeerLost), 201);
  EXPECT_STREQ(code_name(Code::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(code_name(static_cast<Code>(9999)), "unknown status");
}

TEST(Status, FailCarriesCodeAndMessage) {
  try {
    fail(Code::kIo, "cannot open '", "x.bin", "': ", 2);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo);
    EXPECT_STREQ(e.what(), "cannot open 'x.bin': 2");
    EXPECT_EQ(e.status().code(), Code::kIo);
    return;
  }
  FAIL();
}

TEST(Strings, StrictParses) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_EQ(parse_int("+7"), 7);
  EXPECT_EQ(parse_int("-3"), -3);
  EXPECT_FALSE(parse_int("4x"));
  EXPECT_FALSE(parse_int(""));
  EXPECT_FALSE(parse_int("99999999999999999999999"));
  EXPECT_EQ(parse_double("1.5e2"), 150.0);
  EXPECT_FALSE(parse_double("inf"));
  EXPECT_FALSE(parse_double("1.5.2"));
  EXPECT_EQ(parse_bool("On"), true);
  EXPECT_FALSE(parse_bool("2"));
  EXPECT_EQ(parse_size("512M"), 512ull << 20);
  EXPECT_EQ(parse_size("8"), 8u);
  EXPECT_EQ(parse_size("1g"), 1ull << 30);
  EXPECT_FALSE(parse_size("-1K"));
  EXPECT_FALSE(parse_size("99999999999T"));
}

TEST(Strings, Helpers) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(format_double(128), "128");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
}

TEST(Threads, BudgetDividesCoresAmongTheRanksSharingThem) {
  int cores = available_cores();
  EXPECT_GE(cores, 1);
  EXPECT_EQ(thread_budget(1, 0), cores);
  EXPECT_EQ(thread_budget(cores * 4, 0), 1);
  EXPECT_EQ(thread_budget(2, 5), 5);
}

TEST(Threads, RanksBoundToCoresOfTheirOwnShareThemWithNoOne) {
  auto mask = [](std::initializer_list<int> cpus) {
    cpu_set_t m;
    CPU_ZERO(&m);
    for (int c : cpus) CPU_SET(c, &m);
    return m;
  };
  // Unbound: every rank may run on every core.
  const std::vector<cpu_set_t> anywhere(4, mask({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ranks_sharing_cpus(anywhere, 2), 4);
  // cohortrun's -map-by slot:PE=2 -bind-to core: two cores each.
  const std::vector<cpu_set_t> bound = {mask({0, 1}), mask({2, 3}), mask({4, 5}), mask({6, 7})};
  EXPECT_EQ(ranks_sharing_cpus(bound, 0), 1);
  EXPECT_EQ(ranks_sharing_cpus(bound, 3), 1);
  // Two ranks bound to one core, a third overlapping it.
  const std::vector<cpu_set_t> mixed = {mask({0}), mask({0}), mask({0, 1}), mask({2})};
  EXPECT_EQ(ranks_sharing_cpus(mixed, 0), 3);
  EXPECT_EQ(ranks_sharing_cpus(mixed, 3), 1);
}

TEST(Threads, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  pool.parallel_for(0, [](size_t) { FAIL(); });
}

TEST(Threads, ParallelForRethrowsAfterAllIndicesRan) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(50,
                                 [&](size_t i) {
                                   ran++;
                                   if (i == 10) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 50);
}

TEST(Threads, PoolWithoutWorkersRunsOnCaller) {
  ThreadPool pool(0);
  int sum = 0;
  pool.parallel_for(10, [&](size_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum, 45);
}

TEST(Logging, LevelFilters) {
  LogLevel old = log_level();
  set_log_level(LogLevel::kWarn);
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_THROW(parse_log_level("loud"), Error);
  set_log_level(old);
}

}  // namespace
}  // namespace cohort
