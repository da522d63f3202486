// DistributedOptimizer with ranks as threads: np = 2 and 3 give the parameters of
// single-rank training on the combined batch (a linear model: no batch norm or dropout),
// identical on every rank; backward_passes_per_step, f16 compression and the predivide
// factor; broadcast_parameters and the consistency check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <unistd.h>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "optim/distributed_optimizer.h"
#include "optim/lr_schedule.h"
#include "tensor/device_api.h"
#include "tensor/memory.h"
#include "linear_model.h"
#include "thread_collectives.h"
#include "train/checkpoint.h"

namespace cohort {
namespace {

using testing::run_ranks;
using testing::ThreadCollectives;

OptimizerOptions momentum() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kMomentum;
  o.weight_decay = 1e-3;
  return o;
}

Linear single_rank_reference(OptimizerOptions o, int steps = kSteps) {
  Linear m(1.0f);
  Optimizer opt(o);
  for (int s = 0; s < steps; ++s) {
    m.backward(s, 0, kGlobalBatch);
    auto p = m.params();
    opt.step(p, 0.1);
  }
  return m;
}

void expect_close(const Tensor& a, const Tensor& b, double rel, const char* what) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    EXPECT_NEAR(x, y, rel * std::max(1.0, std::abs(y))) << what << " element " << i;
  }
}

struct Result {
  std::mutex mu;
  std::vector<std::vector<float>> w, b;
  void keep(const Linear& m) {
    std::lock_guard<std::mutex> lock(mu);
    w.emplace_back(m.w.data_as<float>(), m.w.data_as<float>() + m.w.numel());
    b.emplace_back(m.b.data_as<float>(), m.b.data_as<float>() + m.b.numel());
  }
};

// Each rank starts from a different initialisation (broadcast fixes that), trains on
// its shard of every global batch, with `passes` backward passes per step.
void train_ranks(int np, DistributedOptions d, OptimizerOptions o, Result& out) {
  run_ranks(np, [&](int rank, ThreadCollectives& c) {
    Linear m(rank == 0 ? 1.0f : 5.0f + static_cast<float>(rank));
    Optimizer opt(o);
    DistributedOptimizer dist(opt, c, m.params(), d);
    dist.broadcast_parameters(0);
    const int shard = kGlobalBatch / np, micro = shard / d.backward_passes_per_step;
    for (int s = 0; s < kSteps; ++s) {
      for (int pass = 0; pass < d.backward_passes_per_step; ++pass) {
        const int begin = rank * shard + pass * micro;
        m.backward(s, begin, begin + micro);
        dist.gradient_ready(1);  // backward reports the last layer's bias first
        dist.gradient_ready(0);
        const bool stepped = dist.step(0.1);
        EXPECT_EQ(stepped, pass == d.backward_passes_per_step - 1);
      }
    }
    EXPECT_EQ(opt.steps(), kSteps);
    dist.check_consistency();
    out.keep(m);
  });
}

void expect_matches_reference(int np, DistributedOptions d, double rel) {
  Result r;
  train_ranks(np, d, momentum(), r);
  Linear ref = single_rank_reference(momentum());
  ASSERT_EQ(r.w.size(), static_cast<size_t>(np));
  for (int k = 1; k < np; ++k) {  // identical on every rank
    EXPECT_EQ(r.w[0], r.w[static_cast<size_t>(k)]);
    EXPECT_EQ(r.b[0], r.b[static_cast<size_t>(k)]);
  }
  Tensor w = Tensor::wrap(r.w[0].data(), {kOut, kIn}, DType::kF32);
  Tensor b = Tensor::wrap(r.b[0].data(), {kOut}, DType::kF32);
  expect_close(w, ref.w, rel, "weight");
  expect_close(b, ref.b, rel, "bias");
}

TEST(DistributedOptimizer, TwoRanksEqualSingleRankOnCombinedBatch) { expect_matches_reference(2, {}, 1e-5); }

TEST(DistributedOptimizer, ThreeRanksEqualSingleRankOnCombinedBatch) { expect_matches_reference(3, {}, 1e-5); }

TEST(DistributedOptimizer, BackwardPassesPerStepAccumulateLocally) {
  DistributedOptions d;
  d.backward_passes_per_step = 2;
  expect_matches_reference(2, d, 1e-5);
  d.backward_passes_per_step = 3;  // 2 ranks × 3 passes × 2 samples
  expect_matches_reference(2, d, 1e-5);
}

TEST(DistributedOptimizer, ExchangesOncePerStepNotPerPass) {
  DistributedOptions d;
  d.backward_passes_per_step = 3;
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    Linear m(1.0f);
    Optimizer opt(momentum());
    DistributedOptimizer dist(opt, c, m.params(), d);
    for (int pass = 0; pass < 3; ++pass) {
      m.backward(0, rank * 6 + 2 * pass, rank * 6 + 2 * pass + 2);
      dist.step(0.1);  // no gradient_ready calls: step reports them itself
    }
    EXPECT_EQ(c.allreduces, 2);  // one per parameter
    EXPECT_EQ(opt.steps(), 1);
  });
}

TEST(DistributedOptimizer, PredivideFactorGivesTheSameAverage) {
  DistributedOptions d;
  d.gradient_predivide_factor = 4.0;
  expect_matches_reference(2, d, 1e-5);
}

TEST(DistributedOptimizer, F16AndBF16CompressionStayClose) {
  for (const bool bf16 : {false, true}) {
    DistributedOptions d;
    d.compress_f16 = !bf16;
    d.compress_bf16 = bf16;
    const double tol = bf16 ? 2e-2 : 2e-3;  // 8 or 11 significant bits
    expect_matches_reference(2, d, tol);
    d.backward_passes_per_step = 2;
    expect_matches_reference(3, d, tol);
  }
}

TEST(DistributedOptimizer, BroadcastCopiesParametersAndOptimizerState) {
  run_ranks(3, [&](int rank, ThreadCollectives& c) {
    Linear m(static_cast<float>(rank));
    OptimizerOptions o;
    o.kind = OptimizerKind::kAdam;
    Optimizer opt(o);
    DistributedOptimizer dist(opt, c, m.params(), {});
    for (int s = 0; s < rank; ++s) {  // diverging state: rank r has taken r local steps
      m.backward(s, 0, 4);
      auto p = m.params();
      opt.step(p, 0.01);
    }
    dist.broadcast_parameters(2);
    EXPECT_EQ(opt.steps(), 2);
    Linear root(2.0f);
    Optimizer root_opt(o);
    for (int s = 0; s < 2; ++s) {
      root.backward(s, 0, 4);
      auto p = root.params();
      root_opt.step(p, 0.01);
    }
    EXPECT_EQ(0, std::memcmp(m.w.data(), root.w.data(), m.w.nbytes()));
    auto mine = opt.export_state(), want = root_opt.export_state();
    ASSERT_EQ(mine.size(), want.size());
    for (size_t i = 0; i < mine.size(); ++i)
      EXPECT_EQ(0, std::memcmp(mine[i].tensor.data(), want[i].tensor.data(), want[i].tensor.nbytes())) << mine[i].name;
    dist.check_consistency();
  });
}

TEST(DistributedOptimizer, ConsistencyCheckNamesTheParameterThatDiffers) {
  std::mutex mu;
  std::vector<std::string> messages;
  run_ranks(3, [&](int rank, ThreadCollectives& c) {
    Linear m(1.0f);
    Optimizer opt(momentum());
    DistributedOptimizer dist(opt, c, m.params(), {});
    if (rank == 1) m.b.data_as<float>()[2] += 1e-6f;
    try {
      dist.check_consistency();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kMismatch);
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(e.what());
    }
  });
  ASSERT_EQ(messages.size(), 3u);  // every rank reports it
  for (const std::string& m : messages)
    EXPECT_NE(m.find("parameter 'fc.bias' differs on 1 rank(s) from rank 0"), std::string::npos) << m;
}

TEST(DistributedOptimizer, RejectsMisuse) {
  run_ranks(1, [&](int, ThreadCollectives& c) {
    Linear m(1.0f);
    Optimizer opt(momentum());
    DistributedOptimizer dist(opt, c, m.params(), {});
    EXPECT_THROW(dist.gradient_ready(2), Error);
    dist.gradient_ready(0);
    EXPECT_THROW(dist.gradient_ready(0), Error);
    EXPECT_THROW(dist.broadcast_parameters(1), Error);
    DistributedOptions bad;
    bad.backward_passes_per_step = 0;
    EXPECT_THROW(DistributedOptimizer(opt, c, m.params(), bad), Error);
  });
}

TEST(DistributedOptimizer, SingleRankEqualsThePlainOptimizer) {
  SingleRankCollectives one;
  DistributedOptions d;
  d.gradient_predivide_factor = 8.0;  // scales cancel
  Linear m(1.0f);
  Optimizer opt(momentum());
  DistributedOptimizer dist(opt, one, m.params(), d);
  dist.broadcast_parameters(0);
  for (int s = 0; s < kSteps; ++s) {
    m.backward(s, 0, kGlobalBatch);
    EXPECT_TRUE(dist.step(0.1));
  }
  dist.check_consistency();
  Linear ref = single_rank_reference(momentum());
  expect_close(m.w, ref.w, 1e-6, "weight");
  EXPECT_THROW(one.broadcast("x", m.w, 1), Error);
  Tensor h = Tensor::empty({1}, DType::kF16);
  h.data_as<uint16_t>()[0] = kernels::compress_f16(3.0f);
  one.allreduce_async("h", h, 0.5, 1.0);
  EXPECT_EQ(kernels::decompress_f16(h.data_as<uint16_t>()[0]), 1.5f);
}

// Two ranks train 10 steps straight; a second run stops after 4, rank 0 writes a
// checkpoint, fresh objects (other initial values on rank 1) resume from it through
// rank 0's broadcast, and the last 6 steps give the same bits.
TEST(DistributedOptimizer, ResumeFromCheckpointIsBitExact) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cohort-resume-" + std::to_string(::getpid()));
  LrScheduleOptions lo;
  lo.kind = LrScheduleKind::kCosine;
  lo.total_steps = 10;
  lo.warmup_steps = 3;
  const LrSchedule lr(lo);
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  auto train = [&](int rank, ThreadCollectives& c, Linear& m, Optimizer& opt, int from, int to) {
    DistributedOptimizer dist(opt, c, m.params(), {});
    for (int s = from; s < to; ++s) {
      m.backward(s, rank * 6, rank * 6 + 6);
      dist.step(lr.lr_at(opt.steps()));
    }
  };
  Result straight, resumed;
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    Linear m(1.0f);
    Optimizer opt(o);
    train(rank, c, m, opt, 0, 10);
    straight.keep(m);
  });
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    Linear m(1.0f);
    Optimizer opt(o);
    train(rank, c, m, opt, 0, 4);
    if (rank == 0) {
      Checkpoint ck;
      ck.model = "linear";
      ck.step = opt.steps();
      for (const ParamGrad& p : m.params()) ck.params.push_back({p.name, p.param});
      ck.optimizer_state = opt.export_state();
      CheckpointDir(dir).save(ck);
    }
    c.wait_all();  // a barrier: the file exists before anyone reads
  });
  run_ranks(2, [&](int rank, ThreadCollectives& c) {
    Linear m(rank == 0 ? 0.0f : 3.0f);
    Optimizer opt(o);
    DistributedOptimizer dist(opt, c, m.params(), {});
    if (rank == 0) {
      Checkpoint ck = CheckpointDir(dir).load_latest();
      std::vector<NamedTensor> model;
      for (const ParamGrad& p : m.params()) model.push_back({p.name, p.param});
      restore_parameters(ck, "linear", model, "latest");
      opt.import_state(ck.optimizer_state);
    }
    dist.broadcast_parameters(0);
    EXPECT_EQ(opt.steps(), 4);
    train(rank, c, m, opt, 4, 10);
    resumed.keep(m);
  });
  std::filesystem::remove_all(dir);
  ASSERT_EQ(resumed.w.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(resumed.w[r], straight.w[0]) << "rank " << r;
    EXPECT_EQ(resumed.b[r], straight.b[0]) << "rank " << r;
  }
}

TEST(DistributedOptimizer, OptionsFromConfig) {
  Config cfg;
  cfg.set("backward_passes_per_step", "4");
  cfg.set("compression", "fp16");
  cfg.set("gradient_predivide_factor", "2");
  DistributedOptions d = DistributedOptions::from_config(cfg);
  EXPECT_EQ(d.backward_passes_per_step, 4);
  EXPECT_TRUE(d.compress_f16);
  EXPECT_FALSE(d.compress_bf16);
  EXPECT_DOUBLE_EQ(d.gradient_predivide_factor, 2.0);
  cfg.set("compression", "bfloat16");
  d = DistributedOptions::from_config(cfg);
  EXPECT_TRUE(d.compress_bf16 && !d.compress_f16);
}

// Collectives that record what each allreduce is told to wait for.
class RecordingCollectives final : public Collectives {
 public:
  explicit RecordingCollectives(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void allreduce_async(const std::string& name, Tensor, double, double, const Event& ready) override {
    events.emplace_back(name, ready);
  }
  void wait_all(const Stream&) override {}
  void broadcast(const std::string&, Tensor, int) override {}
  std::vector<std::pair<std::string, Event>> events;

 private:
  int size_;
};

// A gradient a backward pass never reported (a rank without valid rows zeroes them all
// on the compute stream) is exchanged after an event of that stream, not a complete one:
// on a GPU the collectives' stream would read it unordered with the zeroing.
TEST(DistributedOptimizer, UnreportedGradientsWaitForTheComputeStream) {
  const Device test{Device::Kind::kTest, 0};
  Memory memory;
  OwnedStream stream(test);
  Tensor host = Tensor::empty({3}, DType::kF32);
  Tensor w = clone_to(host, *memory.on(test)), g = clone_to(host, *memory.on(test));
  Optimizer opt(momentum());
  RecordingCollectives comm(2);  // one peer (one rank alone exchanges nothing)
  DistributedOptimizer dist(opt, comm, {{"w", w, g}}, {}, stream);
  dist.gradient_ready(0);  // reported, with the default (complete) event of a CPU backward
  ASSERT_TRUE(dist.step(0.1));
  ASSERT_EQ(comm.events.size(), 1u);
  EXPECT_FALSE(comm.events[0].second.recorded());
  ASSERT_TRUE(dist.step(0.1));  // nothing reported this pass
  ASSERT_EQ(comm.events.size(), 2u);
  EXPECT_TRUE(comm.events[1].second.recorded()) << "an unreported gradient must wait for the compute stream";
}

// One rank alone sends nothing where the average is the gradient itself, and sends what
// compression or scaling would round.
TEST(DistributedOptimizer, OneRankAloneExchangesOnlyWhatWouldChange) {
  auto allreduces = [](DistributedOptions d) {
    Linear m(1.0f);
    Optimizer opt(momentum());
    RecordingCollectives comm(1);
    DistributedOptimizer dist(opt, comm, m.params(), d);
    for (int pass = 0; pass < d.backward_passes_per_step; ++pass) {
      m.backward(0, 0, kGlobalBatch);
      dist.step(0.1);
    }
    EXPECT_EQ(opt.steps(), 1);
    return comm.events.size();
  };
  EXPECT_EQ(allreduces({}), 0u);
  DistributedOptions d;
  d.compress_f16 = true;
  EXPECT_EQ(allreduces(d), 2u);  // one per parameter
  d = {};
  d.gradient_predivide_factor = 8.0;
  EXPECT_EQ(allreduces(d), 2u);
  d = {};
  d.backward_passes_per_step = 2;  // the sum over passes is divided by 2
  EXPECT_EQ(allreduces(d), 2u);
  d.average_passes = false;
  EXPECT_EQ(allreduces(d), 0u);
}

}  // namespace
}  // namespace cohort
