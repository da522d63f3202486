// Sharding and order: disjoint coverage across ranks, equal batch counts, padding at
// the end, seeded per (seed, epoch).
#include <gtest/gtest.h>

#include <set>

#include "core/status.h"
#include "data/sampler.h"

namespace cohort::data {
namespace {

struct Case {
  int64_t n, batch;
  int size;
  bool drop;
};

TEST(Sampler, RanksCoverTheEpochDisjointlyWithEqualBatchCounts) {
  for (Case c : {Case{100, 8, 1, false}, Case{100, 8, 3, false}, Case{101, 7, 2, false}, Case{10, 4, 3, false},
                 Case{101, 7, 2, true}, Case{1000, 16, 3, true}}) {
    for (int64_t epoch : {0, 1}) {
      std::multiset<int64_t> seen;
      int64_t steps = -1, padded = 0;
      for (int r = 0; r < c.size; ++r) {
        Sampler s({c.n, r, c.size, c.batch, 42, true, c.drop});
        if (steps >= 0) {
          EXPECT_EQ(s.steps_per_epoch(), steps) << "ranks must agree on the batch count";
        }
        steps = s.steps_per_epoch();
        std::vector<int64_t> b;
        for (int64_t step = 0; step < steps; ++step) {
          s.batch(epoch, step, b);
          ASSERT_EQ(static_cast<int64_t>(b.size()), c.batch);
          bool in_padding = false;
          for (int64_t i : b) {
            if (i < 0) {
              in_padding = true;
              ++padded;
            } else {
              EXPECT_FALSE(in_padding) << "padding must sit at the end of a batch";
              seen.insert(i);
            }
          }
        }
      }
      std::set<int64_t> unique(seen.begin(), seen.end());
      EXPECT_EQ(unique.size(), seen.size()) << "shards overlap";
      if (!c.drop) {
        EXPECT_EQ(static_cast<int64_t>(seen.size()), c.n) << "every sample once per epoch";
      } else {
        EXPECT_EQ(static_cast<int64_t>(seen.size()), steps * c.batch * c.size);
        EXPECT_EQ(padded, 0);
      }
    }
  }
}

TEST(Sampler, ShuffleIsSeededByEpochAndSeed) {
  Sampler a({50, 0, 1, 10, 7, true, false}), b({50, 0, 1, 10, 7, true, false}), c({50, 0, 1, 10, 8, true, false});
  EXPECT_EQ(a.permutation(0), b.permutation(0));
  EXPECT_NE(a.permutation(0), a.permutation(1));
  EXPECT_NE(a.permutation(0), c.permutation(0));
  Sampler plain({50, 0, 1, 10, 7, false, false});
  auto p = plain.permutation(3);
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(p[static_cast<size_t>(i)], i);
}

TEST(Sampler, RejectsImpossibleConfigurations) {
  EXPECT_THROW(Sampler({0, 0, 1, 4, 0, true, false}), Error);
  EXPECT_THROW(Sampler({10, 2, 2, 4, 0, true, false}), Error);
  EXPECT_THROW(Sampler({5, 0, 2, 4, 0, true, true}), Error);  // drop leaves nothing
}

}  // namespace
}  // namespace cohort::data
