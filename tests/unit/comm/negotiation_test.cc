// The pieces of negotiation on their own: the cycle flags every rank votes, the
// agreement check on the ranks' announcements, the announcement table, the response
// cache, the wire format, and the stall inspector that reads the table.
#include <gtest/gtest.h>

#include <thread>

#include "comm/negotiation.h"
#include "comm/stall_inspector.h"

namespace cohort::comm {
namespace {

Meta meta(const std::string& name, Shape shape, OpType type = OpType::kAllreduce) {
  Meta m;
  m.name = name;
  m.type = type;
  m.shape = std::move(shape);
  return m;
}

// ---------------------------------------------------------------- cycle flags

TEST(CommNegotiation, EachCycleFlagHasItsOwnBitAndSurvivesTheRoundTrip) {
  bool CycleFlags::*const fields[] = {&CycleFlags::nothing_announced, &CycleFlags::shutting_down, &CycleFlags::idle,
                                      &CycleFlags::releases_held};
  uint64_t seen = 0;
  for (auto field : fields) {
    CycleFlags f;
    f.*field = true;
    uint64_t w = f.to_word();
    EXPECT_EQ(__builtin_popcountll(w), 1);
    EXPECT_EQ(seen & w, 0u) << "two flags share a bit";
    seen |= w;
    CycleFlags back = CycleFlags::from_word(w);
    for (auto other : fields) EXPECT_EQ(back.*other, other == field);
  }
  EXPECT_EQ(CycleFlags{}.to_word(), 0u);
}

TEST(CommNegotiation, AFlagReadsBackSetOnlyWhenEveryRankSetIt) {
  // What the transport's and_words does to word 0 of the exchange.
  CycleFlags a, b;
  a.nothing_announced = b.nothing_announced = true;  // both: set
  a.shutting_down = true;                            // one rank only: not set
  b.idle = true;
  a.releases_held = b.releases_held = true;
  CycleFlags all = CycleFlags::from_word(a.to_word() & b.to_word());
  EXPECT_TRUE(all.nothing_announced);
  EXPECT_FALSE(all.shutting_down);
  EXPECT_FALSE(all.idle);
  EXPECT_TRUE(all.releases_held);
}

// ---------------------------------------------------------------- agreement

TEST(CommNegotiation, AgreeingRanksGiveTheFirstRanksMeta) {
  Response r = agree("g", {std::nullopt, meta("g", {4, 3}), meta("g", {4, 3})});
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.name, "g");
  EXPECT_EQ(r.agreed.shape, (Shape{4, 3}));
  EXPECT_EQ(r.metas.size(), 3u);
}

TEST(CommNegotiation, DisagreeingRanksAreAnErrorNamingEachRanksSignature) {
  Meta other = meta("g", {4, 3});
  other.op = ReduceOp::kMax;
  Response r = agree("g", {meta("g", {4, 3}), other});
  EXPECT_NE(r.error.find("collective 'g' was submitted differently across ranks"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("rank 0: allreduce sum f32[4, 3]; rank 1: allreduce max f32[4, 3]"), std::string::npos)
      << r.error;
  Meta scaled = meta("g", {4, 3});
  scaled.postscale = 0.5;
  EXPECT_FALSE(agree("g", {meta("g", {4, 3}), scaled}).error.empty()) << "a different postscale must not agree";
}

TEST(CommNegotiation, OnlyAllgatherAndAlltoallMayDifferInTheFirstDimension) {
  EXPECT_TRUE(agree("a", {meta("a", {2, 3}, OpType::kAllgather), meta("a", {5, 3}, OpType::kAllgather)}).error.empty());
  std::string e = agree("a", {meta("a", {2, 3}, OpType::kAllgather), meta("a", {2, 4}, OpType::kAllgather)}).error;
  EXPECT_NE(e.find("(only the first dimension may differ)"), std::string::npos) << e;
  EXPECT_FALSE(agree("r", {meta("r", {2, 3}), meta("r", {5, 3})}).error.empty());
}

TEST(CommNegotiation, ABroadcastWhoseRootHasJoinedCannotRun) {
  Meta b = meta("b", {3}, OpType::kBroadcast);
  b.root = 1;
  std::string e = agree("b", {b, std::nullopt}).error;
  EXPECT_NE(e.find("the root rank 1 has joined and has no data to send"), std::string::npos) << e;
  EXPECT_TRUE(agree("b", {std::nullopt, b}).error.empty());
}

// ---------------------------------------------------------------- table, cache, wire

TEST(CommNegotiation, TheTableNamesTheRanksMissingAndTheCountsPerRank) {
  AnnouncementTable table(4);
  AnnouncementTable::Entry e;
  e.metas = {meta("x", {1}), std::nullopt, std::nullopt, meta("x", {1})};
  table.joined[2] = true;  // has joined: not missing
  EXPECT_FALSE(AnnouncementTable(4).any_joined());
  EXPECT_TRUE(table.any_joined());
  EXPECT_EQ(table.missing(e), std::vector<int>{1});
  table.submitted = {12, 11, 3, 12};
  EXPECT_EQ(table.submitted_per_rank(), "0: 12, 1: 11, 2: 3, 3: 12");
  EXPECT_EQ(rank_list({}), "[]");
  EXPECT_EQ(rank_list({0, 2}), "[0, 2]");
}

TEST(CommNegotiation, AMissingRankShuttingDownMeansTheOperationNeverRuns) {
  AnnouncementTable table(4);
  AnnouncementTable::Entry e;
  e.metas = {meta("x", {1}), std::nullopt, std::nullopt, std::nullopt};
  table.joined[2] = true;
  EXPECT_FALSE(table.any_shutting_down());
  EXPECT_TRUE(table.missing_for_good(e).empty());
  EXPECT_TRUE(table.never_joining().empty());
  table.shutting_down[0] = true;  // announced it: it will still run it
  table.shutting_down[2] = true;  // joined: takes part without data
  EXPECT_TRUE(table.any_shutting_down());
  EXPECT_TRUE(table.missing_for_good(e).empty());
  EXPECT_EQ(table.never_joining(), std::vector<int>{0});
  table.shutting_down[3] = true;
  EXPECT_EQ(table.missing_for_good(e), std::vector<int>{3});
  EXPECT_EQ(table.never_joining(), (std::vector<int>{0, 3}));
}

TEST(CommNegotiation, ThePeerShutdownErrorNamesTheRanksAndWhereToLook) {
  Status one = peer_shutdown_status(meta("grad/fc", {4, 3}), {1});
  EXPECT_EQ(one.code(), Code::kPeerShutdown);
  EXPECT_EQ(one.message(),
            "collective 'grad/fc' (allreduce sum f32[4, 3]) can never complete: rank 1 has shut down its collective "
            "engine (cohort_runtime_destroy) without submitting it. Rank 1 stopped making collective calls, most "
            "likely after an error of its own: look for rank 1's own error output for the cause, then end this "
            "rank too (cohort_runtime_destroy)");
  Status two = peer_shutdown_status(meta(kJoinName, {}, OpType::kJoin), {0, 2});
  EXPECT_EQ(two.message().rfind("join can never complete: ranks [0, 2] have shut down their engines "
                                "(cohort_runtime_destroy) without joining",
                                0),
            0u)
      << two.message();
  EXPECT_NE(two.message().find("look for the error output of ranks [0, 2] for the cause"), std::string::npos)
      << two.message();
  Status barrier = peer_shutdown_status(meta("__barrier__.0.3", {}, OpType::kBarrier), {1});
  EXPECT_EQ(barrier.message().rfind("barrier can never complete: rank 1 has shut down", 0), 0u) << barrier.message();
}

TEST(CommNegotiation, TheCacheKeepsBitsStableAndEvictsTheLeastRecentlyUsed) {
  ResponseCache cache(2);
  std::vector<std::optional<Meta>> metas{meta("a", {1})};
  cache.put("a", metas);
  cache.put("b", metas);
  ASSERT_EQ(cache.find("a"), std::optional<size_t>(0));
  ASSERT_EQ(cache.find("b"), std::optional<size_t>(1));
  cache.touch(0);  // "a" used again: "b" is now the oldest
  cache.put("c", metas);
  EXPECT_EQ(cache.find("b"), std::nullopt);
  EXPECT_EQ(cache.find("c"), std::optional<size_t>(1));
  EXPECT_EQ(cache.name(1), "c");
  EXPECT_TRUE(cache.erase("a"));
  EXPECT_FALSE(cache.erase("a"));
  ResponseCache none(0);
  none.put("a", metas);
  EXPECT_EQ(none.find("a"), std::nullopt);
}

TEST(CommNegotiation, MessagesRoundTripAndATruncatedOneIsAnInternalError) {
  Message m;
  m.submitted = 42;
  m.shutting_down = true;
  Meta x = meta("layer.1/grad", {3, 2}, OpType::kAlltoall);
  x.splits = {1, 2};
  x.device = true;
  x.prescale = 0.5;
  m.metas.push_back(x);
  Meta w = meta("gone", {1});
  w.kind = Meta::Kind::kWithdraw;
  m.metas.push_back(w);
  std::string bytes = encode(m);
  Message back = decode(bytes);
  EXPECT_EQ(back.submitted, 42u);
  EXPECT_TRUE(back.shutting_down);
  EXPECT_FALSE(decode(encode(Message{})).shutting_down);
  ASSERT_EQ(back.metas.size(), 2u);
  EXPECT_TRUE(back.metas[0].same_signature(x));
  EXPECT_EQ(back.metas[1].kind, Meta::Kind::kWithdraw);
  try {
    decode(bytes.substr(0, bytes.size() - 3));
    ADD_FAILURE() << "a truncated message decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInternal);
  }
}

// ---------------------------------------------------------------- stall inspector

TEST(CommStallInspector, CachedOperationsAreAnnouncedAgainAtHalfTheFirstThreshold) {
  StallInspector both(0, 60, 10);
  EXPECT_FALSE(both.needs_full_announcement(4.9));
  EXPECT_TRUE(both.needs_full_announcement(5.1));
  StallInspector warn_only(0, 60, 0);
  EXPECT_FALSE(warn_only.needs_full_announcement(29));
  EXPECT_TRUE(warn_only.needs_full_announcement(31));
  StallInspector off(0, 0, 0);
  EXPECT_FALSE(off.needs_full_announcement(1e9));
}

TEST(CommStallInspector, ShutdownFailsAfterItsTimeNamingTheRanksThatNeverSubmitted) {
  AnnouncementTable table(3);
  AnnouncementTable::Entry e;
  e.metas = {meta("w", {3}), std::nullopt, std::nullopt};
  table.entries["w"] = e;
  table.order = {"w"};
  table.submitted = {7, 6, 7};
  StallInspector stalls(0, 0, 2.0);
  EXPECT_FALSE(stalls.stalled(meta("w", {3}), 1.9, table));
  std::optional<Status> s = stalls.stalled(meta("w", {3}), 2.1, table);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->code(), Code::kStalled);
  EXPECT_EQ(s->message(),
            "collective 'w' (allreduce sum f32[3]) stalled for 2 s (stall_shutdown_s): ranks [1, 2] never submitted "
            "it; operations submitted per rank: 0: 7, 1: 6, 2: 7");
  EXPECT_FALSE(stalls.stalled(meta(kJoinName, {}, OpType::kJoin), 100, table)) << "a join waits as long as it takes";
  EXPECT_FALSE(StallInspector(0, 0, 0).stalled(meta("w", {3}), 1e9, table)) << "stall_shutdown_s=0 never fails";
}

TEST(CommStallInspector, Rank0WarnsOnceAboutEachCollectiveWaitingTooLong) {
  AnnouncementTable table(2);
  auto t0 = Clock::now();
  AnnouncementTable::Entry e;
  e.metas = {std::nullopt, meta("late", {2})};
  e.first_seen = t0;
  table.entries["late"] = e;
  table.order = {"late"};
  table.submitted = {4, 5};
  StallInspector stalls(0, 1.0, 0);
  auto later = t0 + std::chrono::seconds(3);
  stalls.check(table, later);
  std::string report = stalls.last_report();
  EXPECT_NE(report.find("stall: collectives have waited more than 1 s (stall_warning_s)"), std::string::npos) << report;
  EXPECT_NE(report.find("'late' (allreduce sum f32[2]): waiting 3 s; submitted by ranks [1], missing on ranks [0]"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("operations submitted per rank: 0: 4, 1: 5"), std::string::npos) << report;
  EXPECT_TRUE(table.entries["late"].warned);
  // Once only: a later check has nothing new to say and keeps the last report.
  table.entries["late"].first_seen = t0;
  stalls.check(table, later + std::chrono::seconds(1));
  EXPECT_EQ(stalls.last_report(), report);

  // Other ranks never warn; neither does a check within the interval.
  AnnouncementTable fresh = table;
  fresh.entries["late"].warned = false;
  StallInspector rank1(1, 1.0, 0);
  rank1.check(fresh, later);
  EXPECT_EQ(rank1.last_report(), "");
  StallInspector soon(0, 1.0, 0);
  fresh.entries["late"].first_seen = Clock::now() - std::chrono::seconds(5);
  soon.check(fresh, Clock::now());  // within kCheckInterval of its construction
  EXPECT_EQ(soon.last_report(), "");
  EXPECT_FALSE(fresh.entries["late"].warned);
}

}  // namespace
}  // namespace cohort::comm
