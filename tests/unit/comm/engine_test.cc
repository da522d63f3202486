// The collective engine over the local transport (ranks as threads): negotiation in
// any order, fusion, the response cache, every op and dtype against a reference
// computed here, error paths (mismatch, stall, duplicates), join and the timeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "comm/engine.h"
#include "comm/local/local_transport.h"
#include "kernels/reduce.h"
#include "support/tensor_values.h"

namespace cohort::comm {
namespace {

// Runs fn(engine, rank) on n threads, each with its own engine over one LocalWorld.
void run_ranks(int n, const EngineOptions& options, const std::function<void(Engine&, int)>& fn) {
  auto world = std::make_shared<LocalWorld>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Engine engine(std::make_unique<LocalTransport>(world, r), options);
      fn(engine, r);
    });
  }
  for (auto& t : threads) t.join();
}

// run_ranks with a device transport factory per rank.
void run_ranks_with_device(int n, const std::function<DeviceTransportFactory(int)>& device,
                           const std::function<void(Engine&, int)>& fn) {
  auto world = std::make_shared<LocalWorld>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      EngineOptions o;
      o.cycle_time_ms = 0.5;
      Engine engine(std::make_unique<LocalTransport>(world, r), o, {}, device(r));
      fn(engine, r);
    });
  }
  for (auto& t : threads) t.join();
}

EngineOptions fast_options() {
  EngineOptions o;
  o.cycle_time_ms = 0.5;
  return o;
}

using test::get;
using test::set;

// Small integers: exact in every dtype, for sums and products over a few ranks.
double value(int rank, int64_t i, bool non_negative) {
  int64_t v = (rank * 3 + i * 7 + 1) % 5;
  return non_negative ? static_cast<double>(v) : static_cast<double>(v - 2);
}

Tensor filled(DType t, const Shape& shape, int rank, bool non_negative = false) {
  Tensor x = Tensor::empty(shape, t);
  for (int64_t i = 0; i < x.numel(); ++i) set(x, i, value(rank, i, non_negative));
  return x;
}

TensorEntry allreduce(const std::string& name, Tensor in, ReduceOp op = ReduceOp::kSum, Tensor out = {}) {
  TensorEntry e;
  e.name = name;
  e.type = OpType::kAllreduce;
  e.op = op;
  e.input = std::move(in);
  e.output = std::move(out);
  return e;
}

const DType kAllTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kU8};

TEST(CommEngine, AllreduceEveryOpAndDtypeMatchesReference) {
  const int n = 3;
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    for (DType t : kAllTypes) {
      bool nn = t == DType::kU8;
      for (ReduceOp op : ops) {
        Tensor in = filled(t, {5, 3}, rank, nn);
        Tensor out = Tensor::empty({5, 3}, t);
        bool in_place = (static_cast<int>(op) + static_cast<int>(t)) % 2 == 0;
        std::string name = cat("ar.", dtype_name(t), ".", reduce_op_name(op));
        Status s = engine.submit(allreduce(name, in, op, in_place ? Tensor() : out))->wait();
        ASSERT_TRUE(s.is_ok()) << s.message();
        const Tensor& result = in_place ? in : out;
        for (int64_t i = 0; i < in.numel(); ++i) {
          double expect = value(0, i, nn);
          for (int r = 1; r < n; ++r) {
            double v = value(r, i, nn);
            switch (op) {
              case ReduceOp::kSum:
              case ReduceOp::kAverage:
                expect += v;
                break;
              case ReduceOp::kMin:
                expect = std::min(expect, v);
                break;
              case ReduceOp::kMax:
                expect = std::max(expect, v);
                break;
              case ReduceOp::kProduct:
                expect *= v;
                break;
            }
          }
          if (op == ReduceOp::kAverage) {
            expect /= n;
            if (t == DType::kI32 || t == DType::kI64 || t == DType::kU8) expect = std::trunc(expect);
          }
          if (t == DType::kU8) expect = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(expect)));
          double tol = t == DType::kF16    ? 1e-3 * std::abs(expect) + 1e-3
                       : t == DType::kBF16 ? 1e-2 * std::abs(expect) + 1e-2
                                           : 1e-6;
          ASSERT_NEAR(get(result, i), expect, tol) << name << " element " << i;
        }
      }
    }
  });
}

TEST(CommEngine, PrescaleAndPostscale) {
  run_ranks(2, fast_options(), [&](Engine& engine, int rank) {
    Tensor in = Tensor::empty({4}, DType::kF32);
    for (int i = 0; i < 4; ++i) in.data_as<float>()[i] = static_cast<float>(rank + i);
    TensorEntry e = allreduce("scaled", in, ReduceOp::kAverage);
    e.prescale = 2.0;
    e.postscale = 3.0;
    ASSERT_TRUE(engine.submit(e)->wait().is_ok());
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(in.data_as<float>()[i], 3.0f * (2.0f * (i + i + 1)) / 2.0f);
  });
}

TEST(CommEngine, HundredsOfTensorsInRandomOrderPerRankAreFused) {
  const int n = 3, count = 300;
  std::vector<EngineStats> stats(n);
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    std::vector<int> order(count);
    for (int i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
    std::mt19937 rng(static_cast<unsigned>(rank * 7919 + 1));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Tensor> tensors(count);
    std::vector<std::shared_ptr<Request>> requests;
    for (int i : order) {
      tensors[static_cast<size_t>(i)] = filled(DType::kF32, {1 + i % 17}, rank + i);
      requests.push_back(engine.submit(allreduce(cat("t", i), tensors[static_cast<size_t>(i)])));
    }
    for (auto& r : requests) ASSERT_TRUE(r->wait().is_ok()) << r->status().message();
    for (int i = 0; i < count; ++i) {
      const Tensor& t = tensors[static_cast<size_t>(i)];
      for (int64_t k = 0; k < t.numel(); ++k) {
        double expect = 0;
        for (int r = 0; r < n; ++r) expect += value(r + i, k, false);
        ASSERT_EQ(get(t, k), expect) << "tensor " << i;
      }
    }
    stats[static_cast<size_t>(rank)] = engine.stats();
  });
  EXPECT_GT(stats[0].fused_batches, 0u);
  EXPECT_EQ(stats[0].completed, static_cast<uint64_t>(count));
}

TEST(CommEngine, TensorsLargerThanTheFusionBufferAndZeroSize) {
  EngineOptions o = fast_options();
  o.fusion_bytes = 4096;
  run_ranks(2, o, [&](Engine& engine, int rank) {
    std::vector<Tensor> ts = {filled(DType::kF32, {3000}, rank), filled(DType::kF64, {600000}, rank),
                              filled(DType::kF32, {0}, rank), filled(DType::kF32, {100}, rank),
                              filled(DType::kF32, {0, 4}, rank)};
    std::vector<std::shared_ptr<Request>> reqs;
    for (size_t i = 0; i < ts.size(); ++i) reqs.push_back(engine.submit(allreduce(cat("big", i), ts[i])));
    for (auto& r : reqs) ASSERT_TRUE(r->wait().is_ok()) << r->status().message();
    for (const Tensor& t : ts)
      for (int64_t k = 0; k < t.numel(); k += 97) ASSERT_EQ(get(t, k), value(0, k, false) + value(1, k, false));
  });
}

TEST(CommEngine, RepeatedNamesHitTheCacheAndShapeChangesInvalidateIt) {
  std::vector<EngineStats> stats(2);
  run_ranks(2, fast_options(), [&](Engine& engine, int rank) {
    for (int step = 0; step < 6; ++step) {
      std::vector<Tensor> ts;
      std::vector<std::shared_ptr<Request>> reqs;
      for (int i = 0; i < 20; ++i) {
        int64_t len = step >= 4 && i == 3 ? 9 : 5;  // tensor 3 changes shape at step 4
        ts.push_back(filled(DType::kF32, {len}, rank + step));
        reqs.push_back(engine.submit(allreduce(cat("grad", i), ts.back())));
      }
      for (auto& r : reqs) ASSERT_TRUE(r->wait().is_ok()) << r->status().message();
      for (const Tensor& t : ts)
        for (int64_t k = 0; k < t.numel(); ++k) ASSERT_EQ(get(t, k), value(step, k, false) + value(1 + step, k, false));
    }
    stats[static_cast<size_t>(rank)] = engine.stats();
  });
  EXPECT_GT(stats[0].cache_hits, 40u);
}

TEST(CommEngine, MismatchedShapeFailsOnEveryRankNamingEachShape) {
  run_ranks(3, fast_options(), [&](Engine& engine, int rank) {
    Tensor t = filled(DType::kF32, {rank == 1 ? 3 : 4}, rank);
    Status s = engine.submit(allreduce("w", t))->wait();
    EXPECT_EQ(s.code(), Code::kMismatch);
    EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 1: allreduce sum f32[3]"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 0: allreduce sum f32[4]"), std::string::npos) << s.message();
    // The engine keeps working after the error, and the dtype is checked too.
    Tensor d = Tensor::empty({2}, rank == 2 ? DType::kF64 : DType::kF32);
    EXPECT_EQ(engine.submit(allreduce("d", d))->wait().code(), Code::kMismatch);
    Tensor ok = filled(DType::kF32, {4}, rank);
    EXPECT_TRUE(engine.submit(allreduce("w", ok))->wait().is_ok());
  });
}

TEST(CommEngine, MismatchAfterCachingIsStillDetected) {
  run_ranks(2, fast_options(), [&](Engine& engine, int rank) {
    for (int step = 0; step < 3; ++step) {
      Tensor t = filled(DType::kF32, {4}, rank);
      ASSERT_TRUE(engine.submit(allreduce("c", t))->wait().is_ok());
    }
    Tensor t = filled(DType::kF32, {rank == 0 ? 4 : 6}, rank);
    EXPECT_EQ(engine.submit(allreduce("c", t))->wait().code(), Code::kMismatch);
    TensorEntry e = allreduce("c", filled(DType::kF32, {4}, rank), rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
    EXPECT_EQ(engine.submit(e)->wait().code(), Code::kMismatch);
  });
}

TEST(CommEngine, BroadcastFromEveryRootInAndOutOfPlace) {
  const int n = 3;
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    for (DType t : kAllTypes) {
      for (int root = 0; root < n; ++root) {
        Tensor in = filled(t, {7}, rank, true);
        Tensor out = Tensor::empty({7}, t);
        TensorEntry e;
        e.name = cat("b.", dtype_name(t), ".", root);
        e.type = OpType::kBroadcast;
        e.root = root;
        e.input = in;
        if (root % 2) e.output = out;
        ASSERT_TRUE(engine.submit(e)->wait().is_ok());
        const Tensor& result = root % 2 ? out : in;
        for (int64_t i = 0; i < 7; ++i) ASSERT_EQ(get(result, i), value(root, i, true));
      }
    }
  });
}

TEST(CommEngine, AllgatherWithDifferentFirstDimensions) {
  const int n = 3;
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    for (DType t : kAllTypes) {
      TensorEntry e;
      e.name = cat("g.", dtype_name(t));
      e.type = OpType::kAllgather;
      e.input = filled(t, {rank + 1, 2}, rank, true);
      auto req = engine.submit(e);
      ASSERT_TRUE(req->wait().is_ok()) << req->status().message();
      Tensor out = req->output();
      ASSERT_EQ(out.shape(), (Shape{6, 2}));
      for (int r = 0, off = 0; r < n; off += (r + 1) * 2, ++r)
        for (int64_t k = 0; k < (r + 1) * 2; ++k) ASSERT_EQ(get(out, off + k), value(r, k, true));
    }
  });
}

TEST(CommEngine, AlltoallWithSplitSizes) {
  const int n = 3;
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    // Rank s sends (s + d) % 3 rows to rank d; row values encode (sender, row).
    TensorEntry e;
    e.name = "a2a";
    e.type = OpType::kAlltoall;
    int64_t rows = 0;
    for (int d = 0; d < n; ++d) {
      e.splits.push_back((rank + d) % 3);
      rows += (rank + d) % 3;
    }
    e.input = Tensor::empty({rows, 2}, DType::kI64);
    for (int64_t i = 0; i < rows * 2; ++i) e.input.data_as<int64_t>()[i] = rank * 1000 + i;
    auto req = engine.submit(e);
    ASSERT_TRUE(req->wait().is_ok()) << req->status().message();
    Tensor out = req->output();
    std::vector<int64_t> expect;
    for (int s = 0; s < n; ++s) {
      int64_t offset = 0;
      for (int d = 0; d < rank; ++d) offset += (s + d) % 3;
      for (int64_t i = 0; i < (s + rank) % 3 * 2; ++i) expect.push_back(s * 1000 + offset * 2 + i);
    }
    ASSERT_EQ(out.numel(), static_cast<int64_t>(expect.size()));
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(out.data_as<int64_t>()[i], expect[i]);
    EXPECT_EQ(req->recv_splits(), (std::vector<int64_t>{rank % 3, (1 + rank) % 3, (2 + rank) % 3}));
  });
}

TEST(CommEngine, ReducescatterSplitsRowsAcrossRanks) {
  const int n = 3;
  run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
    for (DType t : kAllTypes) {
      TensorEntry e;
      e.name = cat("rs.", dtype_name(t));
      e.type = OpType::kReducescatter;
      e.op = ReduceOp::kMax;
      e.input = filled(t, {7, 2}, rank, true);
      auto req = engine.submit(e);
      ASSERT_TRUE(req->wait().is_ok()) << req->status().message();
      Tensor out = req->output();
      int64_t rows = rank == 0 ? 3 : 2, first = rank == 0 ? 0 : 3 + (rank - 1) * 2;
      ASSERT_EQ(out.shape(), (Shape{rows, 2}));
      for (int64_t i = 0; i < rows * 2; ++i) {
        double expect = 0;
        for (int r = 0; r < n; ++r) expect = std::max(expect, value(r, first * 2 + i, true));
        ASSERT_EQ(get(out, i), expect);
      }
    }
  });
}

TEST(CommEngine, BarrierAndGroupedSubmission) {
  run_ranks(3, fast_options(), [&](Engine& engine, int rank) {
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
    std::vector<TensorEntry> group;
    std::vector<Tensor> ts;
    for (int i = 0; i < 10; ++i) {
      ts.push_back(filled(DType::kF32, {i + 1}, rank));
      group.push_back(allreduce(cat("grp", i), ts.back()));
    }
    ASSERT_TRUE(engine.submit(std::move(group))->wait().is_ok());
    for (const Tensor& t : ts)
      for (int64_t k = 0; k < t.numel(); ++k)
        ASSERT_EQ(get(t, k), value(0, k, false) + value(1, k, false) + value(2, k, false));
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
  });
}

TEST(CommEngine, JoinLetsARankWithFewerStepsFinish) {
  run_ranks(3, fast_options(), [&](Engine& engine, int rank) {
    int steps = rank == 1 ? 2 : 5;  // rank 1 runs out of data first
    for (int step = 0; step < steps; ++step) {
      Tensor t = filled(DType::kF32, {6}, rank);
      ASSERT_TRUE(engine.submit(allreduce("grad", t))->wait().is_ok());
      for (int64_t k = 0; k < 6; ++k) {
        double expect = 0;
        for (int r = 0; r < 3; ++r)
          if (step < 2 || r != 1) expect += value(r, k, false);
        ASSERT_EQ(get(t, k), expect) << "step " << step;
      }
      TensorEntry g;
      g.name = "rows";
      g.type = OpType::kAllgather;
      g.input = filled(DType::kF32, {1, 2}, rank);
      auto req = engine.submit(g);
      ASSERT_TRUE(req->wait().is_ok());
      EXPECT_EQ(req->output().dim(0), step < 2 ? 3 : 2);
    }
    auto j = engine.join();
    ASSERT_TRUE(j->wait().is_ok()) << j->status().message();
    EXPECT_GE(j->join_last_rank(), 0);
    EXPECT_NE(j->join_last_rank(), 1);
    // After everybody joined, collectives work normally again.
    Tensor t = filled(DType::kF32, {2}, rank);
    ASSERT_TRUE(engine.submit(allreduce("after", t))->wait().is_ok());
    EXPECT_EQ(get(t, 0), value(0, 0, false) + value(1, 0, false) + value(2, 0, false));
  });
}

// One step of every collective on `rank`; `active[r]` says which ranks still submit
// (the others have joined). Results are checked against references computed here.
void every_op_step(Engine& engine, int rank, int n, const std::vector<bool>& active, int step) {
  SCOPED_TRACE(cat("rank ", rank, " step ", step));
  // allreduce: the joined ranks add zeros.
  Tensor ar = filled(DType::kF32, {6}, rank);
  ASSERT_TRUE(engine.submit(allreduce("j.allreduce", ar))->wait().is_ok());
  for (int64_t k = 0; k < 6; ++k) {
    double expect = 0;
    for (int r = 0; r < n; ++r)
      if (active[static_cast<size_t>(r)]) expect += value(r, k, false);
    ASSERT_EQ(get(ar, k), expect);
  }
  // allgather: rank r gives r + 1 rows; the joined ranks none.
  TensorEntry g;
  g.name = "j.allgather";
  g.type = OpType::kAllgather;
  g.input = Tensor::empty({rank + 1, 2}, DType::kI32);
  for (int64_t i = 0; i < g.input.numel(); ++i) g.input.data_as<int32_t>()[i] = static_cast<int32_t>(rank * 100 + i);
  auto gr = engine.submit(g);
  ASSERT_TRUE(gr->wait().is_ok()) << gr->status().message();
  {
    std::vector<int32_t> expect;
    for (int r = 0; r < n; ++r)
      if (active[static_cast<size_t>(r)])
        for (int i = 0; i < (r + 1) * 2; ++i) expect.push_back(r * 100 + i);
    Tensor out = gr->output();
    ASSERT_EQ(out.numel(), static_cast<int64_t>(expect.size()));
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(out.data_as<int32_t>()[i], expect[i]);
  }
  // broadcast from rank 0 (which never joins early here).
  TensorEntry b;
  b.name = "j.broadcast";
  b.type = OpType::kBroadcast;
  b.root = 0;
  b.input = filled(DType::kF64, {4}, rank);
  ASSERT_TRUE(engine.submit(b)->wait().is_ok());
  for (int64_t k = 0; k < 4; ++k) ASSERT_EQ(get(b.input, k), value(0, k, false));
  // reducescatter with a prescale: the joined ranks add zeros; 5 rows over n ranks.
  TensorEntry rs;
  rs.name = "j.reducescatter";
  rs.type = OpType::kReducescatter;
  rs.prescale = 2.0;
  rs.input = filled(DType::kF32, {5, 2}, rank);
  auto rr = engine.submit(rs);
  ASSERT_TRUE(rr->wait().is_ok()) << rr->status().message();
  {
    int64_t first = 0, rows = 5 / n + (rank < 5 % n ? 1 : 0);
    for (int q = 0; q < rank; ++q) first += 5 / n + (q < 5 % n ? 1 : 0);
    Tensor out = rr->output();
    ASSERT_EQ(out.dim(0), rows);
    for (int64_t i = 0; i < rows * 2; ++i) {
      double expect = 0;
      for (int r = 0; r < n; ++r)
        if (active[static_cast<size_t>(r)]) expect += 2.0 * value(r, first * 2 + i, false);
      ASSERT_EQ(get(out, i), expect) << "element " << i;
    }
  }
  // alltoall: rank s sends q + 1 rows to rank q, row j of that block holds
  // s * 100 + q * 10 + j; blocks from or to joined ranks are empty.
  TensorEntry a;
  a.name = "j.alltoall";
  a.type = OpType::kAlltoall;
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    a.splits.push_back(q + 1);
    total += q + 1;
  }
  a.input = Tensor::empty({total, 1}, DType::kI64);
  for (int q = 0, row = 0; q < n; ++q)
    for (int j = 0; j <= q; ++j, ++row) a.input.data_as<int64_t>()[row] = rank * 100 + q * 10 + j;
  auto atr = engine.submit(a);
  ASSERT_TRUE(atr->wait().is_ok()) << atr->status().message();
  {
    std::vector<int64_t> expect, splits;
    for (int s = 0; s < n; ++s) {
      bool on = active[static_cast<size_t>(s)];
      splits.push_back(on ? rank + 1 : 0);
      if (on)
        for (int j = 0; j <= rank; ++j) expect.push_back(s * 100 + rank * 10 + j);
    }
    EXPECT_EQ(atr->recv_splits(), splits);
    Tensor out = atr->output();
    ASSERT_EQ(out.numel(), static_cast<int64_t>(expect.size()));
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(out.data_as<int64_t>()[i], expect[i]);
  }
  // barrier: the joined ranks count as arrived.
  ASSERT_TRUE(engine.barrier()->wait().is_ok());
}

TEST(CommEngine, JoinedRankTakesPartInEveryCollective) {
  for (int n : {2, 3}) {
    run_ranks(n, fast_options(), [&](Engine& engine, int rank) {
      // rank 1 runs out of data after 2 steps, rank 2 (n = 3) after 3, rank 0 does 5.
      int steps = rank == 0 ? 5 : rank + 1;
      for (int step = 0; step < steps; ++step) {
        std::vector<bool> active(static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) active[static_cast<size_t>(r)] = step < (r == 0 ? 5 : r + 1);
        every_op_step(engine, rank, n, active, step);
        if (testing::Test::HasFatalFailure()) return;
      }
      auto j = engine.join();
      ASSERT_TRUE(j->wait().is_ok()) << j->status().message();
      EXPECT_EQ(j->join_last_rank(), 0);  // rank 0 had the most steps
      // Afterwards every rank takes part with data again, barriers included.
      std::vector<bool> all(static_cast<size_t>(n), true);
      every_op_step(engine, rank, n, all, 100);
      ASSERT_TRUE(engine.barrier()->wait().is_ok());
    });
  }
}

TEST(CommEngine, BroadcastFromAJoinedRootFailsOnEveryRank) {
  run_ranks(3, fast_options(), [&](Engine& engine, int rank) {
    if (rank == 2) {
      auto j = engine.join();
      ASSERT_TRUE(j->wait().is_ok()) << j->status().message();
      return;
    }
    TensorEntry b;
    b.name = "from.joined";
    b.type = OpType::kBroadcast;
    b.root = 2;
    b.input = filled(DType::kF32, {3}, rank);
    Status s = engine.submit(b)->wait();
    EXPECT_EQ(s.code(), Code::kMismatch);
    EXPECT_NE(s.message().find("'from.joined'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("root rank 2 has joined"), std::string::npos) << s.message();
    // The failure leaves the engine usable: the others still broadcast among themselves.
    b.name = "from.zero";
    b.root = 0;
    ASSERT_TRUE(engine.submit(b)->wait().is_ok());
    EXPECT_EQ(get(b.input, 1), value(0, 1, false));
    auto j = engine.join();
    ASSERT_TRUE(j->wait().is_ok()) << j->status().message();
  });
}

TEST(CommEngine, StallShutdownFailsTheWithheldCollectiveAndReportsIt) {
  EngineOptions o = fast_options();
  o.stall_warning_s = 0.2;
  o.stall_shutdown_s = 0.5;
  std::string report;
  std::atomic<bool> stalled{false};
  run_ranks(2, o, [&](Engine& engine, int rank) {
    if (rank == 0) {
      Tensor t = filled(DType::kF32, {3}, rank);
      auto start = Clock::now();
      Status s = engine.submit(allreduce("withheld", t))->wait();
      EXPECT_EQ(s.code(), Code::kStalled);
      EXPECT_NE(s.message().find("ranks [1] never submitted it"), std::string::npos) << s.message();
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
      report = engine.last_stall_report();
      stalled = true;
    }
    while (!stalled) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
    Tensor t = filled(DType::kF32, {3}, rank);
    EXPECT_TRUE(engine.submit(allreduce("fine", t))->wait().is_ok());
  });
  EXPECT_NE(report.find("'withheld'"), std::string::npos) << report;
  EXPECT_NE(report.find("missing on ranks [1]"), std::string::npos) << report;
  EXPECT_NE(report.find("operations submitted per rank"), std::string::npos) << report;
}

TEST(CommEngine, CachedNameWithheldByOneRankStillStalls) {
  EngineOptions o = fast_options();
  o.stall_warning_s = 0.2;
  o.stall_shutdown_s = 0.4;
  std::atomic<bool> stalled{false};
  run_ranks(2, o, [&](Engine& engine, int rank) {
    for (int i = 0; i < 3; ++i) {
      Tensor t = filled(DType::kF32, {3}, rank);
      ASSERT_TRUE(engine.submit(allreduce("cached", t))->wait().is_ok());
    }
    if (rank == 1) {
      Tensor t = filled(DType::kF32, {3}, rank);
      EXPECT_EQ(engine.submit(allreduce("cached", t))->wait().code(), Code::kStalled);
      stalled = true;
    }
    while (!stalled) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
  });
}

TEST(CommEngine, BadArgumentsFailAtSubmit) {
  run_ranks(1, fast_options(), [&](Engine& engine, int) {
    Tensor t = filled(DType::kF32, {4}, 0);
    auto expect_invalid = [&](TensorEntry e, const char* what) {
      try {
        engine.submit(std::move(e));
        ADD_FAILURE() << "no error for " << what;
      } catch (const Error& err) {
        EXPECT_EQ(err.code(), Code::kInvalidArgument) << what;
      }
    };
    expect_invalid(allreduce("", t), "empty name");
    expect_invalid(allreduce("__x", t), "reserved name");
    expect_invalid(allreduce("x", t, ReduceOp::kSum, Tensor::empty({5}, DType::kF32)), "output shape");
    TensorEntry b;
    b.name = "b";
    b.type = OpType::kBroadcast;
    b.input = t;
    b.root = 3;
    expect_invalid(b, "root");
    TensorEntry a;
    a.name = "a";
    a.type = OpType::kAlltoall;
    a.input = t;
    a.splits = {3};
    expect_invalid(a, "splits");
    TensorEntry g;
    g.name = "g";
    g.type = OpType::kAllgather;
    g.input = Tensor::empty({}, DType::kF32);
    expect_invalid(g, "scalar allgather");
    std::vector<TensorEntry> dup = {allreduce("same", t), allreduce("same", t)};
    try {
      engine.submit(std::move(dup));
      ADD_FAILURE() << "duplicate names in a group";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Code::kInvalidArgument);
    }
  });
}

// ---------------------------------------------------------------- device transport

const Device kGpu0{Device::Kind::kCuda, 0};

// Stands in for NCCL on a machine without a GPU: "device" tensors are host memory
// labelled cuda:0, moved by a LocalTransport of a world of their own. Counts the data
// calls, so a test sees which transport ran what.
class FakeDeviceTransport final : public Transport {
 public:
  FakeDeviceTransport(std::shared_ptr<LocalWorld> world, int rank, std::atomic<int>* calls)
      : inner_(std::move(world), rank), calls_(calls) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* name() const override { return "fake-device"; }
  bool supports(Device d) const override { return d.kind == Device::Kind::kCuda; }
  void and_words(std::vector<uint64_t>& words) override { inner_.and_words(words); }
  std::vector<std::string> allgather_bytes(const std::string& mine) override { return inner_.allgather_bytes(mine); }
  void allreduce(void* buf, size_t count, DType t, kernels::Reduce op) override {
    ++*calls_;
    inner_.allreduce(buf, count, t, op);
  }
  void allgatherv(const void* send, void* recv, const std::vector<size_t>& bytes) override {
    ++*calls_;
    inner_.allgatherv(send, recv, bytes);
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    ++*calls_;
    inner_.broadcast(buf, bytes, root);
  }
  void alltoallv(const void* send, const std::vector<size_t>& send_bytes, void* recv,
                 const std::vector<size_t>& recv_bytes) override {
    ++*calls_;
    inner_.alltoallv(send, send_bytes, recv, recv_bytes);
  }
  void reduce_scatter(const void* send, void* recv, const std::vector<size_t>& counts, DType t,
                      kernels::Reduce op) override {
    ++*calls_;
    inner_.reduce_scatter(send, recv, counts, t, op);
  }
  void barrier() override { inner_.barrier(); }

 private:
  LocalTransport inner_;
  std::atomic<int>* calls_;
};

// A host tensor relabelled as living on cuda:0 (its memory stays owned by `host`).
Tensor on_gpu(const Tensor& host) { return Tensor::wrap(host.data(), host.shape(), host.dtype(), kGpu0); }

// A factory for rank `rank` of `world` whose device transport is the fake above.
DeviceTransportFactory fake_gpu(std::shared_ptr<LocalWorld> world, int rank, std::atomic<int>* calls) {
  DeviceTransportFactory f;
  f.device = kGpu0;
  f.create = [world, rank, calls] { return std::make_unique<FakeDeviceTransport>(world, rank, calls); };
  return f;
}

TEST(CommEngine, DeviceTensorWithoutADeviceTransportIsAClearError) {
  auto world = std::make_shared<LocalWorld>(1);
  DeviceTransportFactory none;
  none.unavailable = "no GPU is usable on this rank; copy the tensor to host memory";
  Engine engine(std::make_unique<LocalTransport>(world, 0), fast_options(), {}, none);
  Tensor host = filled(DType::kF32, {4}, 0);
  for (OpType type : {OpType::kAllreduce, OpType::kBroadcast, OpType::kAllgather, OpType::kReducescatter}) {
    TensorEntry e;
    e.name = cat("dev.", op_type_name(type));
    e.type = type;
    e.input = on_gpu(host);
    try {
      engine.submit(e);
      ADD_FAILURE() << "no error for a device tensor in " << op_type_name(type);
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), Code::kUnsupported);
      std::string m = err.what();
      EXPECT_NE(m.find("'" + e.name + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("CUDA memory (cuda:0)"), std::string::npos) << m;
      EXPECT_NE(m.find("copy the tensor to host memory"), std::string::npos) << m;
    }
  }
  // Host tensors still work on the same engine.
  ASSERT_TRUE(engine.submit(allreduce("host", host))->wait().is_ok());
}

TEST(CommEngine, DeviceTensorOnAnotherGpuIsRejected) {
  auto world = std::make_shared<LocalWorld>(1);
  auto dev_world = std::make_shared<LocalWorld>(1);
  std::atomic<int> calls{0};
  Engine engine(std::make_unique<LocalTransport>(world, 0), fast_options(), {}, fake_gpu(dev_world, 0, &calls));
  Tensor host = filled(DType::kF32, {4}, 0);
  try {
    engine.submit(allreduce("gpu1", Tensor::wrap(host.data(), {4}, DType::kF32, {Device::Kind::kCuda, 1})));
    ADD_FAILURE() << "no error for a tensor on cuda:1";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), Code::kUnsupported);
    EXPECT_NE(std::string(err.what()).find("'gpu1': the tensor is on cuda:1"), std::string::npos) << err.what();
  }
}

TEST(CommEngine, DeviceTensorsRunOnTheDeviceTransportAndHostTensorsDoNot) {
  const int n = 3;
  auto dev_world = std::make_shared<LocalWorld>(n);
  std::atomic<int> created{0};
  std::vector<std::atomic<int>> calls(n);
  run_ranks_with_device(
      n,
      [&](int rank) {
        DeviceTransportFactory f;
        f.device = kGpu0;
        f.create = [&, rank] {
          ++created;
          return std::make_unique<FakeDeviceTransport>(dev_world, rank, &calls[static_cast<size_t>(rank)]);
        };
        return f;
      },
      [&](Engine& engine, int rank) {
        // Rank 2 runs out of data after the first step and joins.
        int steps = rank == 2 ? 1 : 3;
        for (int step = 0; step < steps; ++step) {
          SCOPED_TRACE(cat("rank ", rank, " step ", step));
          auto active = [&](int r) { return r != 2 || step < 1; };
          int before = calls[static_cast<size_t>(rank)];
          // Host allreduce: the host transport, never the device one.
          Tensor h = filled(DType::kF32, {5}, rank);
          ASSERT_TRUE(engine.submit(allreduce("host", h))->wait().is_ok());
          EXPECT_EQ(calls[static_cast<size_t>(rank)], before);
          // Device allreduce with average and scales, f32 and f16 (no fusion: one call each).
          for (DType t : {DType::kF32, DType::kF16}) {
            Tensor x = filled(t, {7}, rank);
            TensorEntry e = allreduce(cat("dev.avg.", dtype_name(t)), on_gpu(x), ReduceOp::kAverage);
            e.prescale = 2.0;
            e.postscale = 0.5;
            ASSERT_TRUE(engine.submit(e)->wait().is_ok());
            for (int64_t k = 0; k < 7; ++k) {
              double expect = 0;
              for (int r = 0; r < n; ++r)
                if (active(r)) expect += 2.0 * value(r, k, false);
              expect = expect / n * 0.5;
              ASSERT_NEAR(get(x, k), expect, t == DType::kF16 ? 2e-3 : 1e-6) << dtype_name(t) << " element " << k;
            }
          }
          // Device broadcast, allgather, reducescatter (6 rows: divisible by 3), alltoall.
          Tensor b = filled(DType::kI32, {3}, rank);
          TensorEntry be;
          be.name = "dev.bcast";
          be.type = OpType::kBroadcast;
          be.root = 1;
          be.input = on_gpu(b);
          ASSERT_TRUE(engine.submit(be)->wait().is_ok());
          for (int64_t k = 0; k < 3; ++k) ASSERT_EQ(get(b, k), value(1, k, false));
          Tensor g = filled(DType::kF32, {1, 2}, rank);
          TensorEntry ge;
          ge.name = "dev.gather";
          ge.type = OpType::kAllgather;
          ge.input = on_gpu(g);
          auto gr = engine.submit(ge);
          ASSERT_TRUE(gr->wait().is_ok());
          int active_count = 0;
          for (int r = 0; r < n; ++r) active_count += active(r) ? 1 : 0;
          ASSERT_EQ(gr->output().dim(0), active_count);
          Tensor rs = filled(DType::kF32, {6, 1}, rank);
          TensorEntry re;
          re.name = "dev.rs";
          re.type = OpType::kReducescatter;
          re.input = on_gpu(rs);
          auto rr = engine.submit(re);
          ASSERT_TRUE(rr->wait().is_ok()) << rr->status().message();
          for (int64_t k = 0; k < 2; ++k) {
            double expect = 0;
            for (int r = 0; r < n; ++r)
              if (active(r)) expect += value(r, rank * 2 + k, false);
            ASSERT_EQ(get(rr->output(), k), expect);
          }
          Tensor a = filled(DType::kF32, {3, 1}, rank);
          TensorEntry ae;
          ae.name = "dev.a2a";
          ae.type = OpType::kAlltoall;
          ae.input = on_gpu(a);
          auto ar = engine.submit(ae);
          ASSERT_TRUE(ar->wait().is_ok()) << ar->status().message();
          std::vector<int64_t> splits;
          for (int r = 0; r < n; ++r) splits.push_back(active(r) ? 1 : 0);
          EXPECT_EQ(ar->recv_splits(), splits);
          EXPECT_EQ(calls[static_cast<size_t>(rank)], before + 6);  // 2 allreduces + 4 others
        }
        auto j = engine.join();
        ASSERT_TRUE(j->wait().is_ok()) << j->status().message();
      });
  EXPECT_EQ(created, n);  // once per rank
}

TEST(CommEngine, DeviceCollectiveFailsOnEveryRankWhenSomeRankHasNoDeviceTransport) {
  const int n = 3;
  auto dev_world = std::make_shared<LocalWorld>(n);
  std::atomic<int> calls{0};
  run_ranks_with_device(
      n,
      [&](int rank) {
        DeviceTransportFactory f = fake_gpu(dev_world, rank, &calls);
        if (rank == 1) {
          f.create = nullptr;
          f.unavailable = "no GPU is usable on this rank";
        }
        return f;
      },
      [&](Engine& engine, int rank) {
        if (rank == 1) {  // has no GPU and no data: joins at once
          ASSERT_TRUE(engine.join()->wait().is_ok());
          return;
        }
        for (int attempt = 0; attempt < 2; ++attempt) {
          Tensor x = filled(DType::kF32, {4}, rank);
          Status s = engine.submit(allreduce("dev.x", on_gpu(x)))->wait();
          EXPECT_EQ(s.code(), Code::kUnsupported);
          EXPECT_NE(s.message().find("'dev.x'"), std::string::npos) << s.message();
          EXPECT_NE(s.message().find("rank 1: no GPU is usable on this rank"), std::string::npos) << s.message();
        }
        // Host collectives go on.
        Tensor h = filled(DType::kF32, {4}, rank);
        ASSERT_TRUE(engine.submit(allreduce("host", h))->wait().is_ok());
        ASSERT_TRUE(engine.join()->wait().is_ok());
      });
  EXPECT_EQ(calls, 0);
}

TEST(CommEngine, HostOnOneRankAndDeviceOnAnotherIsAMismatchOnEveryRank) {
  const int n = 2;
  auto dev_world = std::make_shared<LocalWorld>(n);
  std::atomic<int> calls{0};
  run_ranks_with_device(
      n, [&](int rank) { return fake_gpu(dev_world, rank, &calls); },
      [&](Engine& engine, int rank) {
        Tensor x = filled(DType::kF32, {4}, rank);
        Status s = engine.submit(allreduce("mixed", rank == 0 ? on_gpu(x) : x))->wait();
        EXPECT_EQ(s.code(), Code::kMismatch);
        EXPECT_NE(s.message().find("rank 0: allreduce sum f32[4] on cuda; rank 1: allreduce sum f32[4]"),
                  std::string::npos)
            << s.message();
      });
  EXPECT_EQ(calls, 0);
}

// A device transport whose allreduce never returns by itself, as NCCL's does not when
// a peer is lost in the middle of it; only abort_waits() ends the wait.
class HangingDeviceTransport final : public Transport {
 public:
  explicit HangingDeviceTransport(std::shared_ptr<LocalWorld> world) : inner_(std::move(world), 0) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "hanging-device"; }
  bool supports(Device d) const override { return d.kind == Device::Kind::kCuda; }
  void and_words(std::vector<uint64_t>& words) override { inner_.and_words(words); }
  std::vector<std::string> allgather_bytes(const std::string& mine) override { return inner_.allgather_bytes(mine); }
  void allreduce(void*, size_t, DType, kernels::Reduce) override {
    std::unique_lock lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return aborted_; });
    fail(Code::kCancelled, "the hanging allreduce was aborted");
  }
  void allgatherv(const void*, void*, const std::vector<size_t>&) override {}
  void broadcast(void*, size_t, int) override {}
  void alltoallv(const void*, const std::vector<size_t>&, void*, const std::vector<size_t>&) override {}
  void reduce_scatter(const void*, void*, const std::vector<size_t>&, DType, kernels::Reduce) override {}
  void barrier() override {}
  void abort_waits() override {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }
  void wait_entered() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }

 private:
  LocalTransport inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, aborted_ = false;
};

TEST(CommEngine, AbortEndsAWaitInTheDeviceTransport) {
  auto world = std::make_shared<LocalWorld>(1);
  auto dev_world = std::make_shared<LocalWorld>(1);
  std::atomic<HangingDeviceTransport*> device{nullptr};
  DeviceTransportFactory f;
  f.device = kGpu0;
  f.create = [&] {
    auto t = std::make_unique<HangingDeviceTransport>(dev_world);
    device = t.get();
    return t;
  };
  Engine engine(std::make_unique<LocalTransport>(world, 0), fast_options(), {}, f);
  Tensor x = filled(DType::kF32, {4}, 0);
  auto req = engine.submit(allreduce("dev.stuck", on_gpu(x)));
  while (!device) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  device.load()->wait_entered();
  engine.abort();
  bool done = false;
  for (int i = 0; i < 5000 && !(done = req->test()); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!done) device.load()->abort_waits();  // let the engine thread finish, then fail
  ASSERT_TRUE(done) << "Engine::abort did not reach the device transport";
  EXPECT_EQ(req->status().code(), Code::kCancelled) << req->status().message();
  try {
    engine.submit(allreduce("after", x));
    ADD_FAILURE() << "an aborted engine took a submission";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidState) << e.what();
  }
}

TEST(CommEngine, SameNameTwiceWhilePendingFailsTheSecond) {
  EngineOptions o = fast_options();
  o.stall_shutdown_s = 0.3;
  std::atomic<bool> stalled{false};
  run_ranks(2, o, [&](Engine& engine, int rank) {
    if (rank == 0) {
      Tensor a = filled(DType::kF32, {2}, 0), b = filled(DType::kF32, {2}, 0);
      auto first = engine.submit(allreduce("twice", a));
      auto second = engine.submit(allreduce("twice", b));
      EXPECT_EQ(second->wait().code(), Code::kInvalidArgument);
      EXPECT_EQ(first->wait().code(), Code::kStalled);
      stalled = true;
    }
    while (!stalled) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
  });
}

TEST(CommEngine, PendingRequestsAreCancelledAtShutdown) {
  // Rank 1 shuts down only once it knows rank 0 is shutting down, so rank 0's request
  // stays pending to the end (rank 0 keeps its own) and is cancelled then.
  std::shared_ptr<Request> left;
  run_ranks(2, fast_options(), [&](Engine& engine, int rank) {
    if (rank == 0) left = engine.submit(allreduce("never", filled(DType::kF32, {2}, 0)));
    while (rank == 1 && engine.stats().ranks_shutting_down == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_TRUE(left->test());
  EXPECT_EQ(left->status().code(), Code::kCancelled);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Waits for `request` no longer than `limit_s` (a hang would fail the test instead).
Status wait_at_most(const std::shared_ptr<Request>& request, double limit_s) {
  if (!request->wait_for(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(limit_s))))
    return Status(Code::kInternal, cat("still pending after ", limit_s, " s"));
  return request->status();
}

// What a rank that stays gets once `gone` has shut down without submitting its collective.
void expect_peer_shutdown(const Status& s, const std::string& what, const std::string& gone) {
  EXPECT_EQ(s.code(), Code::kPeerShutdown) << what << ": " << s.message();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(gone + " has shut down its collective engine"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(gone + "'s own error output"), std::string::npos) << s.message();
}

TEST(CommEngine, ARankThatShutsDownFailsWhatItNeverSubmittedOnTheRanksThatWait) {
  // Rank 2 leaves after one step (as after an error of its own) while ranks 0 and 1 wait
  // in their next allreduce. They learn it within a few cycles, not after
  // stall_shutdown_s, and every later collective of theirs fails the same way, except
  // one that rank 2 submitted before it left: that one still runs, with its data.
  EngineOptions o = fast_options();
  o.stall_shutdown_s = 20;
  const int n = 3;
  Tensor left_behind = filled(DType::kF32, {4}, 2);
  std::shared_ptr<Request> left_request;
  std::atomic<bool> waiting{false};
  run_ranks(n, o, [&](Engine& engine, int rank) {
    Tensor first = filled(DType::kF32, {4}, rank);
    ASSERT_TRUE(engine.submit(allreduce("step", first))->wait().is_ok());
    if (rank == 2) {
      left_request = engine.submit(allreduce("late", left_behind));
      while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;  // the engine shuts down
    }
    Tensor again = filled(DType::kF32, {4}, rank);
    auto start = Clock::now();
    auto step = engine.submit(allreduce("step", again));  // cached: one bit per cycle
    waiting = true;
    expect_peer_shutdown(wait_at_most(step, 10), "collective 'step' (allreduce sum f32[4])", "rank 2");
    EXPECT_LT(seconds_since(start), 5.0);
    EXPECT_EQ(engine.stats().ranks_shutting_down, 1u);

    Tensor late = filled(DType::kF32, {4}, rank);
    ASSERT_TRUE(wait_at_most(engine.submit(allreduce("late", late)), 10).is_ok());
    for (int64_t i = 0; i < late.numel(); ++i)
      EXPECT_EQ(get(late, i), value(0, i, false) + value(1, i, false) + value(2, i, false));

    start = Clock::now();
    TensorEntry b;
    b.name = "after";
    b.type = OpType::kBroadcast;
    b.input = filled(DType::kF32, {2}, rank);
    expect_peer_shutdown(wait_at_most(engine.submit(b), 10), "collective 'after' (broadcast f32[2] root 0)", "rank 2");
    expect_peer_shutdown(wait_at_most(engine.barrier(), 10), "barrier", "rank 2");
    Status j = wait_at_most(engine.join(), 10);
    EXPECT_EQ(j.code(), Code::kPeerShutdown) << j.message();
    EXPECT_EQ(j.message().rfind("join can never complete: rank 2 has shut down", 0), 0u) << j.message();
    EXPECT_LT(seconds_since(start), 5.0);
  });
  ASSERT_TRUE(left_request->test());
  ASSERT_TRUE(left_request->status().is_ok()) << left_request->status().message();
  for (int64_t i = 0; i < left_behind.numel(); ++i)
    EXPECT_EQ(get(left_behind, i), value(0, i, false) + value(1, i, false) + value(2, i, false));
}

TEST(CommEngine, RanksThatShutDownTogetherAreNamedTogether) {
  EngineOptions o = fast_options();
  o.stall_shutdown_s = 20;
  run_ranks(3, o, [&](Engine& engine, int rank) {
    ASSERT_TRUE(engine.barrier()->wait().is_ok());
    if (rank != 0) return;  // the engine shuts down
    while (engine.stats().ranks_shutting_down < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Status s = wait_at_most(engine.submit(allreduce("alone", filled(DType::kF32, {1}, 0))), 10);
    EXPECT_EQ(s.code(), Code::kPeerShutdown) << s.message();
    EXPECT_NE(s.message().find("ranks [1, 2] have shut down their engines"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("the error output of ranks [1, 2]"), std::string::npos) << s.message();
  });
}

TEST(CommEngine, AJoinedRankThatShutsDownStillServesTheOthers) {
  // A rank that has joined takes part without data even while it shuts down, so the
  // others finish their work and their own join.
  EngineOptions o = fast_options();
  o.stall_shutdown_s = 20;
  run_ranks(2, o, [&](Engine& engine, int rank) {
    if (rank == 1) {
      engine.join();  // left pending: the engine shuts down right away
      return;
    }
    while (engine.stats().ranks_shutting_down == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    Tensor t = filled(DType::kF32, {3}, 0);
    ASSERT_TRUE(wait_at_most(engine.submit(allreduce("alone", t)), 10).is_ok());
    EXPECT_EQ(get(t, 2), value(0, 2, false));  // rank 1 contributed zeros
    Status j = wait_at_most(engine.join(), 10);
    ASSERT_TRUE(j.is_ok()) << j.message();
  });
}

TEST(CommEngine, TimelineHasOneProcessRowPerRankAndStepMarkers) {
  std::string path = ::testing::TempDir() + "cohort_timeline_test.json";
  EngineOptions o = fast_options();
  o.timeline_file = path;
  run_ranks(2, o, [&](Engine& engine, int rank) {
    for (int step = 0; step < 2; ++step) {
      Tensor t = filled(DType::kF32, {4}, rank);
      ASSERT_TRUE(engine.submit(allreduce("tl", t))->wait().is_ok());
      engine.mark_step();
    }
  });
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\"", 0), 0u);
  EXPECT_NE(json.find("\"args\": {\"name\": \"rank 0\"}"), std::string::npos);
  EXPECT_NE(json.find("\"args\": {\"name\": \"rank 1\"}"), std::string::npos);
  EXPECT_NE(json.find("\"NEGOTIATE\""), std::string::npos);
  EXPECT_NE(json.find("\"ALLREDUCE\""), std::string::npos);
  EXPECT_NE(json.find("\"ph\": \"i\""), std::string::npos);
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  std::remove(path.c_str());
}

TEST(CommEngine, HoldDuringComputeRunsReductionsOnceEveryRankHasFinishedComputing) {
  for (bool hold : {true, false}) {
    EngineOptions o = fast_options();
    o.hold_during_compute = hold;
    std::atomic<int> submitted{0};
    std::atomic<bool> released{false};
    run_ranks(2, o, [&](Engine& engine, int rank) {
      if (rank == 0) engine.compute_begin();
      Tensor t = Tensor::empty({1000}, DType::kF32);
      std::fill(t.data_as<float>(), t.data_as<float>() + t.numel(), static_cast<float>(rank + 1));
      auto req = engine.submit(allreduce("held", t));
      ++submitted;
      if (rank == 0) {
        while (submitted < 2) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // many engine cycles
        EXPECT_EQ(req->test(), !hold) << (hold ? "ran while rank 0 computed" : "waited for compute to end");
        released = true;
        engine.compute_end();
      }
      ASSERT_TRUE(req->wait().is_ok());
      if (hold) {
        EXPECT_TRUE(released.load()) << "rank " << rank << " finished before compute ended on rank 0";
      }
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data_as<float>()[i], 3.0f);
    });
  }
}

// Whether every thread of this process may run on the same CPUs (Cpus_allowed_list).
bool all_threads_share_one_affinity() {
  std::string first;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("Cpus_allowed_list:", 0) == 0) break;
    if (first.empty()) first = line;
    if (line != first) return false;
  }
  return true;
}

TEST(CommEngine, TheEndOfComputeRunsHeldReductionsAtOnceNotAtTheNextCycle) {
  // With a cycle far longer than the test's limit, only the wake-up at compute_end can
  // run the held reduction in time.
  EngineOptions o = fast_options();
  o.hold_during_compute = true;
  o.cycle_time_ms = 30000;
  run_ranks(1, o, [&](Engine& engine, int) {
    engine.compute_begin();
    Tensor t = filled(DType::kF32, {16}, 0);
    auto req = engine.submit(allreduce("held", t));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(req->test());
    engine.compute_end();
    EXPECT_TRUE(wait_at_most(req, 10).is_ok()) << "the held reduction waited for the next cycle";
    req->wait();
  });
}

TEST(CommEngine, ARankThatComputesNegotiatesOnceItsComputeEnds) {
  // A backward pass that hands its gradients over one by one while every rank computes:
  // with reductions held during compute, cycling meanwhile (every cycle a barrier of all
  // ranks) could run nothing, so the engines wait for the end of compute.
  EngineOptions o = fast_options();
  o.hold_during_compute = true;
  std::vector<uint64_t> during(3);
  run_ranks(3, o, [&](Engine& engine, int rank) {
    for (int step = 0; step < 2; ++step) {
      engine.compute_begin();
      const uint64_t before = engine.stats().cycles;
      std::vector<std::shared_ptr<Request>> reqs;
      std::vector<Tensor> grads;
      for (int g = 0; g < 8; ++g) {
        grads.push_back(filled(DType::kF32, {256}, rank));
        reqs.push_back(engine.submit(allreduce(cat("grad", g), grads.back())));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // backward computes the next one
      }
      during[static_cast<size_t>(rank)] += engine.stats().cycles - before;
      engine.compute_end();
      for (auto& r : reqs) ASSERT_TRUE(r->wait().is_ok());
      for (int g = 0; g < 8; ++g)
        for (int64_t i = 0; i < 256; ++i)
          ASSERT_EQ(get(grads[static_cast<size_t>(g)], i),
                    value(0, i, false) + value(1, i, false) + value(2, i, false));
    }
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_LE(during[static_cast<size_t>(r)], 2u) << "rank " << r << " cycled while it computed (0.5 ms cycles)";
}

TEST(CommEngine, HeldReductionsLeaveTheEngineThreadFreeToRunAnywhere) {
  EngineOptions o = fast_options();
  o.hold_during_compute = true;
  run_ranks(2, o, [&](Engine& engine, int rank) {
    for (int step = 0; step < 3; ++step) {
      engine.compute_begin();
      Tensor t = filled(DType::kF32, {64}, rank);
      auto req = engine.submit(allreduce("pin", t));
      engine.compute_end();  // held until here
      ASSERT_TRUE(req->wait().is_ok());
    }
  });
  // Engines gone; with one alive, its thread keeps the process's affinity.
  auto world = std::make_shared<LocalWorld>(1);
  Engine engine(std::make_unique<LocalTransport>(world, 0), o);
  engine.compute_begin();
  Tensor t = filled(DType::kF32, {64}, 0);
  auto req = engine.submit(allreduce("pin", t));
  engine.compute_end();
  ASSERT_TRUE(req->wait().is_ok());
  bool shared = false;
  for (int i = 0; i < 1000 && !(shared = all_threads_share_one_affinity()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(shared) << "the engine thread was left pinned after running held reductions";
}

TEST(CommEngine, HoldDuringComputeStillRunsACollectiveThatComputeWaitsFor) {
  EngineOptions o = fast_options();
  o.hold_during_compute = true;
  run_ranks(3, o, [&](Engine& engine, int rank) {
    engine.compute_begin();  // e.g. a gradient-ready callback that waits for its reduction
    Tensor t = Tensor::empty({8}, DType::kF32);
    std::fill(t.data_as<float>(), t.data_as<float>() + t.numel(), 1.0f);
    auto request = engine.submit(allreduce("inside", t));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the engine has put it off by now
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(request->wait().is_ok());
    // At once: the blocked caller woke the engine, which otherwise would negotiate only
    // at its next compute tick.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, Engine::kComputeTick / 2) << "rank " << rank;
    EXPECT_EQ(t.data_as<float>()[7], 3.0f);
    engine.compute_end();
  });
}

}  // namespace
}  // namespace cohort::comm
