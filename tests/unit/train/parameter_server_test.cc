// The variable_update modes' parts without a runtime (ranks as threads over the local
// transport): the roles of ranks, TensorFlow's greedy placement, a synchronous server
// averaging every worker's push, gradients accumulated over passes, an asynchronous
// server applying pushes as they come (staleness counted, a worker never waiting for an
// idle one), and the stale-synchronous bound holding a worker that runs ahead.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "comm/engine.h"
#include "comm/local/local_transport.h"
#include "core/config.h"
#include "train/parameter_server.h"
#include "train/variable_update.h"

namespace cohort::train {
namespace {

// Servers made by serve() in the current run_ranks: PsServer::load is for before any
// worker pushes, so the workers wait for it.
std::atomic<int> g_loaded{0};

void wait_for_server() {
  while (g_loaded.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void run_ranks(int n, const std::function<void(comm::Engine&, int)>& fn) {
  g_loaded = 0;
  auto world = std::make_shared<comm::LocalWorld>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      comm::EngineOptions o;
      o.cycle_time_ms = 0.5;
      comm::Engine engine(std::make_unique<comm::LocalTransport>(world, r), o);
      fn(engine, r);
    });
  for (auto& t : threads) t.join();
}

Tensor vec(std::initializer_list<float> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kF32);
  int64_t i = 0;
  for (float v : values) t.data_as<float>()[i++] = v;
  return t;
}

// Two variables, "a" [2] and "b" [1], starting at {1, 2} and {3}.
struct Vars {
  Tensor a = vec({1, 2}), b = vec({3}), ga = vec({0, 0}), gb = vec({0});
  std::vector<ParamGrad> params() { return {{"a", a, ga}, {"b", b, gb}}; }
  void set_grads(float x) {
    ga.data_as<float>()[0] = x;
    ga.data_as<float>()[1] = 2 * x;
    gb.data_as<float>()[0] = -x;
  }
};

OptimizerOptions plain_sgd() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.weight_decay = 0;
  return o;
}

// A server on `rank` holding both variables, loaded with Vars' starting values.
std::unique_ptr<PsServer> serve(comm::Engine& engine, std::vector<int> workers, bool synchronous, int max_lead = -1) {
  PsServer::Options o;
  o.workers = std::move(workers);
  o.synchronous = synchronous;
  o.max_lead = max_lead;
  o.optimizer = plain_sgd();
  auto server = std::make_unique<PsServer>(engine, o, std::vector<ShardVariable>{{0, "a", {2}}, {1, "b", {1}}});
  Vars start;
  std::vector<Tensor> values = {start.a, start.b};
  server->load(values, {}, 0);
  ++g_loaded;
  return server;
}

TEST(VariableUpdate, RolesFollowTheOptions) {
  Config c;
  Roles r = Roles::from_config(c, 4);
  EXPECT_EQ(r.mode, VariableUpdate::kReplicated);
  EXPECT_FALSE(r.parameter_server());
  EXPECT_EQ(r.update_batch(32), 128);
  c.set("variable_update", "parameter_server");
  c.set("ps_ranks", "2");
  r = Roles::from_config(c, 4);
  EXPECT_EQ(r.workers(), 4);
  EXPECT_EQ(r.server_rank(1), 1);
  EXPECT_EQ(r.server_index(3), -1);
  EXPECT_EQ(r.update_batch(32), 128);
  c.set("ps_dedicated", "true");
  r = Roles::from_config(c, 4);
  EXPECT_EQ(r.workers(), 2);
  EXPECT_TRUE(r.is_worker(1));
  EXPECT_FALSE(r.is_worker(2));
  EXPECT_EQ(r.server_rank(0), 2);
  EXPECT_EQ(r.server_index(3), 1);
  EXPECT_EQ(r.update_batch(32), 64);
  c.set("variable_update", "async_parameter_server");
  EXPECT_EQ(Roles::from_config(c, 4).update_batch(32), 32);
  EXPECT_EQ(Roles::from_config(c, 4).max_lead, 4);
  try {
    Roles::from_config(c, 2);
    ADD_FAILURE() << "2 dedicated servers on 2 ranks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ps_ranks=2 with ps_dedicated=true leaves no rank"), std::string::npos)
        << e.what();
  }
  c.set("variable_update", "independent");
  EXPECT_EQ(Roles::from_config(c, 2).update_batch(32), 32);
  EXPECT_THROW(parse_variable_update("distributed_replicated"), Error);
}

TEST(VariableUpdate, OnlyTheSynchronousModesStepInLockstep) {
  EXPECT_TRUE(workers_in_lockstep(VariableUpdate::kReplicated));
  EXPECT_TRUE(workers_in_lockstep(VariableUpdate::kParameterServer));
  EXPECT_FALSE(workers_in_lockstep(VariableUpdate::kAsyncParameterServer));
  EXPECT_FALSE(workers_in_lockstep(VariableUpdate::kIndependent));
}

TEST(VariableUpdate, GreedyPlacementGivesEachVariableToTheLeastLoadedServer) {
  // In the model's order: 100 → s0, 10 → s1, 10 → s1 (20 < 100), 50 → s1 (70), 40 → s1 (110
  // > 100? no: s1 holds 70 < 100), 5 → s0.
  EXPECT_EQ(place_variables({100, 10, 10, 50, 40, 5}, 2), (std::vector<int>{0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(place_variables({4, 4, 4}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(place_variables({7, 3}, 1), (std::vector<int>{0, 0}));
}

TEST(ParameterServer, ASynchronousServerAveragesOnePushFromEveryWorker) {
  // Rank 0 serves and computes, rank 1 computes; after one step both hold
  // value - lr * mean(gradients): a = {1, 2} - 0.5 * {2, 4} = {0, 0}, b = 3 + 0.5 * 2 = 4.
  run_ranks(2, [](comm::Engine& engine, int rank) {
    std::unique_ptr<PsServer> server;
    if (rank == 0) server = serve(engine, {0, 1}, true);
    Vars v;
    {
      wait_for_server();
      PsWorker worker(engine, PsTags{}, v.params(), {0, 0}, 1);
      v.set_grads(rank == 0 ? 1.0f : 3.0f);
      worker.gradient_ready(1);  // in any order; "a" is pushed by step()
      ASSERT_TRUE(worker.step(0.5, 1));
      EXPECT_FLOAT_EQ(v.a.data_as<float>()[0], 0.0f);
      EXPECT_FLOAT_EQ(v.a.data_as<float>()[1], 0.0f);
      EXPECT_FLOAT_EQ(v.b.data_as<float>()[0], 4.0f);
    }
    server.reset();  // returns once both workers have said goodbye
  });
}

TEST(ParameterServer, ADedicatedServerSumsPassesAveragedOverThem) {
  // Rank 2 only serves. Two passes per step: the pushed gradient is their mean.
  run_ranks(3, [](comm::Engine& engine, int rank) {
    if (rank == 2) {
      auto server = serve(engine, {0, 1}, true);
      server.reset();
      return;
    }
    Vars v;
    wait_for_server();
    PsWorker worker(engine, PsTags{}, v.params(), {2, 2}, 2);
    v.set_grads(1.0f);
    EXPECT_FALSE(worker.step(1.0, 1));  // accumulation pass
    v.set_grads(3.0f);
    ASSERT_TRUE(worker.step(1.0, 1));
    // mean gradient 2 on every worker: a = {1 - 2, 2 - 4}, b = 3 + 2.
    EXPECT_FLOAT_EQ(v.a.data_as<float>()[0], -1.0f);
    EXPECT_FLOAT_EQ(v.a.data_as<float>()[1], -2.0f);
    EXPECT_FLOAT_EQ(v.b.data_as<float>()[0], 5.0f);
  });
}

TEST(ParameterServer, AnAsynchronousServerAppliesPushesWithoutWaitingForIdleWorkers) {
  // Worker 0 takes 5 steps while worker 1 takes none; then worker 1's one step was
  // computed on variables 5 updates old.
  std::atomic<bool> zero_done{false};
  run_ranks(3, [&](comm::Engine& engine, int rank) {
    if (rank == 2) {
      auto server = serve(engine, {0, 1}, false);
      server.reset();  // after both goodbyes
      return;
    }
    Vars v;
    wait_for_server();
    PsWorker worker(engine, PsTags{}, v.params(), {2, 2}, 1);
    if (rank == 0) {
      for (int64_t k = 1; k <= 5; ++k) {
        v.set_grads(1.0f);
        ASSERT_TRUE(worker.step(0.1, k));
      }
      // Five updates of gradient 1 (b: -1): b = 3 + 5 * 0.1.
      EXPECT_NEAR(v.b.data_as<float>()[0], 3.5f, 1e-6);
      zero_done = true;
    } else {
      while (!zero_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      v.set_grads(1.0f);
      ASSERT_TRUE(worker.step(0.1, 1));
      EXPECT_NEAR(v.b.data_as<float>()[0], 3.6f, 1e-6);  // the sixth update
    }
  });
}

TEST(ParameterServer, StalenessIsCountedPerUpdate) {
  PsServer::Stats stats;
  std::atomic<int> phase{0};
  run_ranks(3, [&](comm::Engine& engine, int rank) {
    if (rank == 2) {
      auto server = serve(engine, {0, 1}, false);
      while (phase < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      stats = server->stats();
      server.reset();
      return;
    }
    Vars v;
    wait_for_server();
    PsWorker worker(engine, PsTags{}, v.params(), {2, 2}, 1);
    if (rank == 0) {
      for (int64_t k = 1; k <= 3; ++k) ASSERT_TRUE(worker.step(0.1, k));  // 0 behind each time
      phase = 1;
    } else {
      while (phase < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_TRUE(worker.step(0.1, 1));  // 3 behind
      phase = 2;
    }
  });
  EXPECT_EQ(stats.updates, 4);
  EXPECT_EQ(stats.staleness_max, 3);
  EXPECT_DOUBLE_EQ(stats.staleness_sum, 3.0);
}

TEST(ParameterServer, AWorkerTooFarAheadWaitsForTheSlowestOne) {
  // max_lead 1: worker 0 may finish step 1 alone, but its answer to step 2 waits until
  // worker 1 has pushed once. Staleness stays within (workers - 1)(2 * lead + 1) = 3.
  std::atomic<int> zero_steps{0};
  std::atomic<bool> one_pushed{false};
  PsServer::Stats stats;
  run_ranks(3, [&](comm::Engine& engine, int rank) {
    if (rank == 2) {
      auto server = serve(engine, {0, 1}, false, 1);
      while (zero_steps < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      stats = server->stats();
      server.reset();
      return;
    }
    Vars v;
    wait_for_server();
    PsWorker worker(engine, PsTags{}, v.params(), {2, 2}, 1);
    if (rank == 0) {
      for (int64_t k = 1; k <= 4; ++k) {
        ASSERT_TRUE(worker.step(0.1, k));
        if (k >= 2) {
          EXPECT_TRUE(one_pushed.load()) << "step " << k << " ran 2 ahead of the slowest worker";
        }
        ++zero_steps;
      }
    } else {
      // Only once worker 0 is held at step 2 (it cannot get further alone).
      while (zero_steps < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(zero_steps.load(), 1);
      one_pushed = true;
      for (int64_t k = 1; k <= 3; ++k) ASSERT_TRUE(worker.step(0.1, k));
    }
  });
  EXPECT_EQ(stats.updates, 7);
  EXPECT_LE(stats.staleness_max, 3);
}

}  // namespace
}  // namespace cohort::train
