// cohort.hpp across ranks (mpirun -np 2 and 3): the collectives' results, a
// disagreement thrown on every rank as cohort::Error, and data-parallel training that
// keeps every rank's parameters identical.
#include <cohort/cohort.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

cohort::Runtime& runtime() {
  // Destroyed at exit before MPI is finalized: the library registers its exit handler
  // while the runtime is made, so that handler runs after this object's destructor.
  static cohort::Runtime rt([] {
    cohort::Config cfg;
    cfg.set("device", "cpu").set("threads_per_rank", 1);
    return cfg;
  }());
  return rt;
}

TEST(CppRanks, AllreduceSumsAndTakesTheMaximumOverTheRanks) {
  cohort::Runtime& rt = runtime();
  const int n = rt.size(), r = rt.rank();
  ASSERT_GE(n, 2);
  std::vector<double> v = {static_cast<double>(r), 1.0};
  cohort::View<double> t(v.data(), {2});
  cohort::allreduce(rt, "ranks.sum", *t.get());
  EXPECT_EQ(v[0], n * (n - 1) / 2.0);
  EXPECT_EQ(v[1], static_cast<double>(n));
  std::vector<float> f = {static_cast<float>(r + 1)};
  cohort::View<float> ft(f.data(), {1});
  cohort::Request req =
      cohort::allreduce_async(rt, "ranks.max", *ft.get(), nullptr, cohort::allreduce_options(COHORT_REDUCE_MAX));
  req.wait();
  EXPECT_EQ(f[0], static_cast<float>(n));
}

TEST(CppRanks, BroadcastAllgatherReducescatterAndAlltoallvMoveTheRowsTheyShould) {
  cohort::Runtime& rt = runtime();
  const int n = rt.size(), r = rt.rank();
  std::vector<int32_t> b = {r, r};
  cohort::View<int32_t> bt(b.data(), {2});
  cohort::broadcast(rt, "ranks.bcast", *bt.get(), n - 1);
  EXPECT_EQ(b, (std::vector<int32_t>{n - 1, n - 1}));

  std::vector<int64_t> mine = {10 * r, 10 * r + 1};
  cohort::View<int64_t> mt(mine.data(), {1, 2});
  cohort::Tensor all = cohort::allgather(rt, "ranks.gather", *mt.get());
  ASSERT_EQ(all.shape(), (std::vector<int64_t>{n, 2}));
  for (int q = 0; q < n; ++q) EXPECT_EQ(all.data<int64_t>()[2 * q + 1], 10 * q + 1);

  std::vector<float> rows(static_cast<size_t>(n), 1.0F);
  cohort::View<float> rt_rows(rows.data(), {n});
  cohort::Tensor part = cohort::reducescatter(rt, "ranks.scatter", *rt_rows.get());
  ASSERT_EQ(part.numel(), 1);
  EXPECT_EQ(part.data<float>()[0], static_cast<float>(n));

  // Rank r sends q + 1 rows to rank q, each holding r.
  std::vector<int64_t> splits;
  std::vector<int32_t> send;
  for (int q = 0; q < n; ++q) {
    splits.push_back(q + 1);
    send.insert(send.end(), static_cast<size_t>(q + 1), r);
  }
  cohort::View<int32_t> st(send.data(), {static_cast<int64_t>(send.size())});
  cohort::Request a = cohort::alltoallv_async(rt, "ranks.a2a", *st.get(), splits);
  a.wait();
  cohort::Tensor got = a.output();
  EXPECT_EQ(got.numel(), static_cast<int64_t>(n) * (r + 1));
  EXPECT_EQ(a.recv_splits(static_cast<size_t>(n)), std::vector<int64_t>(static_cast<size_t>(n), r + 1));
  EXPECT_EQ(got.data<int32_t>()[got.numel() - 1], n - 1) << "the last rows come from the last rank";
}

TEST(CppRanks, ADisagreementThrowsTheMismatchOnEveryRank) {
  cohort::Runtime& rt = runtime();
  std::vector<float> v(static_cast<size_t>(rt.rank() + 1), 1.0F);  // a length of its own on each rank
  cohort::View<float> t(v.data(), {static_cast<int64_t>(v.size())});
  try {
    cohort::allreduce(rt, "ranks.mismatch", *t.get());
    ADD_FAILURE() << "shapes that differ over the ranks were reduced";
  } catch (const cohort::Error& e) {
    EXPECT_EQ(e.status(), COHORT_ERR_MISMATCH);
    EXPECT_NE(std::string(e.what()).find("ranks.mismatch"), std::string::npos) << e.what();
  }
  cohort::barrier(rt);
}

TEST(CppRanks, TrainingOnEachRanksOwnDataKeepsTheParametersIdentical) {
  cohort::Runtime& rt = runtime();
  cohort::Config cfg;
  cfg.set("optimizer", "momentum").set("lr", 0.1).set("compute_threads", 1);
  cohort::Model m = cohort::Model::custom(rt, cfg, {4});
  m.add_layer("dense", "fc", {}, "out=3");
  m.add_layer("softmax_xent", "loss");
  cohort::Optimizer opt(m, cfg);
  opt.broadcast(0);
  std::vector<float> x(6 * 4);
  std::vector<int32_t> y(6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::cos(0.3 * static_cast<double>(i) + rt.rank()));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + static_cast<size_t>(rt.rank())) % 3);
  cohort::View<float> images(x.data(), {6, 4});
  cohort::View<int32_t> labels(y.data(), {6});
  cohort_batch_t batch{};
  batch.struct_size = sizeof batch;
  batch.images = *images.get();
  batch.labels = *labels.get();
  batch.valid = 6;
  for (int s = 0; s < 5; ++s) EXPECT_EQ(opt.train_step(batch).updated, 1);
  opt.check_consistency();  // throws naming a parameter that differs on some rank
  EXPECT_EQ(opt.state().steps, 5);
  const int last = cohort::join(rt);  // every rank has joined: the same rank everywhere
  EXPECT_GE(last, 0);
  EXPECT_LT(last, rt.size());
}

}  // namespace
