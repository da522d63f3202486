// The training core of src/train, without the C API: the agreement on the root's
// outcome (ranks as threads), the model (names, checks, gradient hook), the trainer
// (step, checkpoints saved and loaded, the model kept alive), pipelines made for a
// model, and what a runtime that was shut down still allows.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "support/temp_dir.h"
#include "runtime/runtime.h"
#include "thread_collectives.h"
#include "train/agreement.h"
#include "train/model.h"
#include "train/model_data.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace cohort::train {
namespace {

namespace fs = std::filesystem;
using testing::run_ranks;
using testing::ThreadCollectives;

using testing::TempDir;

// One runtime for the whole binary (a single rank, no mpirun).
std::shared_ptr<Runtime> runtime() {
  static std::shared_ptr<Runtime> rt = [] {
    Config c;
    c.set("device", "cpu");
    return std::make_shared<Runtime>(c);
  }();
  return rt;
}

Config config() {
  Config c;
  c.set("optimizer", "sgd");
  c.set("lr", "0.5");
  c.set("weight_decay", "0");
  c.set("compute_threads", "1");
  return c;
}

// {F=4} → dense 3 → loss.
std::shared_ptr<Model> tiny(const Config& c, std::shared_ptr<Runtime> rt = runtime()) {
  auto m = Model::custom(rt, {4}, c);
  m->graph().dense(m->graph().num_layers() - 1, "fc", 3);
  m->graph().softmax_xent(m->graph().num_layers() - 1, "loss");
  return m;
}

struct Batch {
  Tensor images = Tensor::empty({6, 4}, DType::kF32);
  Tensor labels = Tensor::empty({6}, DType::kI32);
  Batch() {
    for (int64_t i = 0; i < 24; ++i) images.data_as<float>()[i] = static_cast<float>(std::sin(0.7 * i));
    for (int64_t i = 0; i < 6; ++i) labels.data_as<int32_t>()[i] = static_cast<int32_t>(i % 3);
  }
};

std::vector<float> weights(Model& m) {
  const Tensor& w = m.graph().params()[0].value;
  return {w.data_as<float>(), w.data_as<float>() + w.numel()};
}

// ---------------------------------------------------------------- agreement

TEST(Agreement, RootFailureIsTheSameErrorOnEveryRank) {
  std::mutex mu;
  std::vector<std::pair<Code, std::string>> seen;
  run_ranks(3, [&](int rank, ThreadCollectives& c) {
    try {
      run_on_root_and_agree(c, "save", 0, "save a checkpoint in 'd'", [] { fail(Code::kIo, "disk full"); });
      ADD_FAILURE() << "rank " << rank << " did not fail";
    } catch (const Error& e) {
      std::lock_guard lock(mu);
      seen.emplace_back(e.code(), e.what());
    }
  });
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& [code, text] : seen) {
    EXPECT_EQ(code, Code::kIo);
    EXPECT_EQ(text, "rank 0 could not save a checkpoint in 'd': disk full");
  }
}

TEST(Agreement, RootSuccessIsSuccessEverywhereAndOnlyTheRootWorks) {
  std::mutex mu;
  std::vector<int> worked;
  run_ranks(3, [&](int rank, ThreadCollectives& c) {
    run_on_root_and_agree(c, "work", 1, "work", [&] {
      std::lock_guard lock(mu);
      worked.push_back(rank);
    });
  });
  EXPECT_EQ(worked, std::vector<int>{1});
}

TEST(Agreement, ForeignExceptionsStillFailEveryRank) {
  std::mutex mu;
  std::vector<Code> codes;
  run_ranks(2, [&](int, ThreadCollectives& c) {
    try {
      run_on_root_and_agree(c, "x", 0, "do it", [] { throw std::runtime_error("boom"); });
    } catch (const Error& e) {
      std::lock_guard lock(mu);
      codes.push_back(e.code());
      EXPECT_NE(std::string(e.what()).find("internal error: boom"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(codes, (std::vector<Code>{Code::kInternal, Code::kInternal}));
}

// ---------------------------------------------------------------- model

TEST(Model, ZooNameMustAgreeWithTheModelOption) {
  Config c = config();
  EXPECT_EQ(Model::from_zoo(runtime(), "mnist_cnn", c)->name(), "mnist_cnn");
  c.set("model", "resnet50");
  try {
    Model::from_zoo(runtime(), "mnist_cnn", c);
    FAIL() << "expected a disagreement error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'mnist_cnn' disagrees with the option model=resnet50"), std::string::npos);
  }
  c.set("model", "mnist_cnn");
  EXPECT_NO_THROW(Model::from_zoo(runtime(), "mnist_cnn", c));
}

TEST(Model, CustomModelsAreNamedByTheOptionOrCustom) {
  Config c = config();
  EXPECT_EQ(tiny(c)->name(), "custom");
  c.set("model", "tiny_mlp");
  EXPECT_EQ(tiny(c)->name(), "tiny_mlp");
}

TEST(Model, IoShapeAndInputChecks) {
  auto m = Model::from_zoo(runtime(), "mnist_cnn", config());
  const IoShape io = m->io_shape();
  EXPECT_EQ(io.channels, 1);
  EXPECT_EQ(io.height, 28);
  EXPECT_EQ(io.width, 28);
  EXPECT_EQ(io.classes, 10);
  Tensor wrong = Tensor::empty({2, 3, 28, 28}, DType::kF32);
  try {
    m->check_images(wrong);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("images have shape [2, 3, 28, 28] but the model takes [2, 1, 28, 28]"),
              std::string::npos);
  }
  EXPECT_THROW(m->check_labels(Tensor::empty({2}, DType::kI64), 2), Error);
}

TEST(Model, GradientHookFiresPerParameterAndIsClearedByItsToken) {
  auto m = tiny(config());
  Batch b;
  std::vector<size_t> ready;
  const uint64_t token = m->set_grad_ready([&](size_t i, const Event&) { ready.push_back(i); });
  const float loss = m->forward_backward(b.images, b.labels);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(ready.size(), m->graph().params().size());
  m->clear_grad_ready(token + 1);  // another owner's token: the hook stays
  m->forward_backward(b.images, b.labels);
  EXPECT_EQ(ready.size(), 2 * m->graph().params().size());
  m->clear_grad_ready(token);
  m->forward_backward(b.images, b.labels);
  EXPECT_EQ(ready.size(), 2 * m->graph().params().size());
}

// ---------------------------------------------------------------- trainer

TEST(Trainer, StepsLearnAndPaddingDoesNotCount) {
  auto m = tiny(config());
  Trainer t(m, config());
  Batch b;
  const StepStats first = t.train_step(b.images, b.labels, 6);
  StepStats last;
  for (int i = 0; i < 20; ++i) last = t.train_step(b.images, b.labels, 6);
  EXPECT_LT(last.loss, first.loss);
  EXPECT_EQ(last.step, 21);
  EXPECT_TRUE(last.updated);
  EXPECT_GE(last.total_s, last.compute_s);
  // A batch without valid rows still updates (a zero gradient), with loss 0.
  const StepStats empty = t.train_step(b.images, b.labels, 0);
  EXPECT_EQ(empty.loss, 0);
  EXPECT_EQ(empty.valid, 0);
  EXPECT_EQ(empty.images, 6);
  EXPECT_THROW(t.train_step(b.images, b.labels, 7), Error);
}

TEST(Trainer, OnlyADedicatedServerStepsWithoutABatch) {
  auto m = tiny(config());
  Trainer t(m, config());
  try {
    t.train_step_without_batch();
    FAIL() << "a rank that computes stepped without a batch";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("only a dedicated parameter server"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.steps(), 0);
}

TEST(Trainer, KeepsItsModelAlive) {
  std::weak_ptr<Model> watch;
  {
    auto m = tiny(config());
    watch = m;
    Trainer t(m, config());
    m.reset();  // the caller's reference goes first
    ASSERT_FALSE(watch.expired());
    Batch b;
    EXPECT_EQ(t.train_step(b.images, b.labels, 6).step, 1);
  }
  EXPECT_TRUE(watch.expired());  // and goes with the trainer
}

TEST(Trainer, RemovesItsHookButNotAnotherOne) {
  auto m = tiny(config());
  int calls = 0;
  { Trainer t(m, config()); }
  Batch b;
  m->forward_backward(b.images, b.labels);  // no hook left: nothing to call
  m->set_grad_ready([&](size_t, const Event&) { ++calls; });
  m->forward_backward(b.images, b.labels);
  EXPECT_EQ(calls, static_cast<int>(m->graph().params().size()));
}

// The trainer tells the model whether its hook enqueues work on the model's stream (a sum
// over passes, a compression): a device plan with graphs then hands the events out
// between them. Its removal says none does.
TEST(Trainer, SaysWhetherItsHookEnqueuesWorkOfItsOwn) {
  auto m = tiny(config());
  {
    Trainer t(m, config());
    EXPECT_FALSE(m->graph().grad_ready_enqueues());
  }
  Config passes = config();
  passes.set("backward_passes_per_step", "2");
  {
    Trainer t(m, passes);
    EXPECT_TRUE(m->graph().grad_ready_enqueues());
  }
  EXPECT_FALSE(m->graph().grad_ready_enqueues()) << "the trainer's hook went with it";
  m->set_grad_ready([](size_t, const Event&) {}, true);
  EXPECT_TRUE(m->graph().grad_ready_enqueues());
  m->set_grad_ready(nullptr, true);
  EXPECT_FALSE(m->graph().grad_ready_enqueues()) << "no hook enqueues nothing";
}

TEST(Trainer, CheckpointRoundTripContinuesTheSameCurve) {
  TempDir dir;
  Config c = config();
  c.set("optimizer", "momentum");
  auto a = tiny(c), b = tiny(c);
  Trainer ta(a, c), tb(b, c);
  EXPECT_FALSE(tb.load_checkpoint(dir.path()).has_value());
  Batch batch;
  for (int i = 0; i < 3; ++i) ta.train_step(batch.images, batch.labels, 6);
  ta.save_checkpoint(dir.path(), {2, 999, 4, 5});
  const auto pos = tb.load_checkpoint(dir.path());
  ASSERT_TRUE(pos.has_value());
  EXPECT_EQ(pos->epoch, 2);
  EXPECT_EQ(pos->step, 3);  // the optimizer's count, not the caller's
  EXPECT_EQ(pos->pipeline_epoch, 4);
  EXPECT_EQ(pos->pipeline_step, 5);
  EXPECT_EQ(weights(*a), weights(*b));
  EXPECT_EQ(ta.train_step(batch.images, batch.labels, 6).loss, tb.train_step(batch.images, batch.labels, 6).loss);
}

TEST(Trainer, APositionMovesToTheSameSampleAtAnotherGlobalBatch) {
  const StepShape four{32, 4, 1}, two{32, 2, 1}, accumulating{32, 2, 2};
  RunPosition p{1, 30, 1, 7, 4};
  RunPosition q = rescale_position(p, four, two, 0);
  EXPECT_EQ(q.step, 60);
  EXPECT_EQ(q.pipeline_step, 14);
  EXPECT_EQ(q.epoch, 1);
  EXPECT_EQ(q.pipeline_epoch, 1);
  q = rescale_position({1, 61, 1, 15, 2}, two, four, 0);  // partial batches are seen again
  EXPECT_EQ(q.step, 30);
  EXPECT_EQ(q.pipeline_step, 7);
  q = rescale_position(p, four, accumulating, 0);  // two passes of 64 samples per update
  EXPECT_EQ(q.step, 30);
  EXPECT_EQ(q.pipeline_step, 14);
  q = rescale_position({0, 9, 0, 9, 4}, four, two, 18);  // the end of an epoch is the next one's start
  EXPECT_EQ(q.pipeline_epoch, 1);
  EXPECT_EQ(q.pipeline_step, 0);
  q = rescale_position(p, {}, two, 0);  // nothing recorded: nothing changes
  EXPECT_EQ(q.step, 30);
  EXPECT_EQ(q.pipeline_step, 7);
}

TEST(Trainer, ACheckpointOfAnotherGlobalBatchResumesAtTheSameSample) {
  TempDir dir;
  Config big = config(), small = config();
  big.set("batch_size", "8");
  small.set("batch_size", "2");
  for (Config* c : {&big, &small}) c->set("lr_schedule", "cosine");
  auto a = tiny(big), b = tiny(small);
  Trainer ta(a, big), tb(b, small);
  ta.set_run_length(3, 100);
  tb.set_run_length(10, 400);
  Batch batch;
  for (int i = 0; i < 3; ++i) ta.train_step(batch.images, batch.labels, 6);
  ta.save_checkpoint(dir.path(), {0, 0, 0, 5});
  const auto pos = tb.load_checkpoint(dir.path());
  ASSERT_TRUE(pos.has_value());
  EXPECT_EQ(pos->saved_ranks, 1);
  EXPECT_EQ(pos->step, 12);  // 3 steps of 8 samples are 12 of 2
  EXPECT_EQ(tb.steps(), 12);
  EXPECT_EQ(pos->pipeline_epoch, 1) << "pipeline step 20 is past an epoch of 10: the next epoch starts";
  EXPECT_EQ(pos->pipeline_step, 0);
  EXPECT_EQ(pos->epoch, 0);
  Trainer fresh(tiny(small), small);
  fresh.set_run_length(10, 400);
  const double lr12 = [&] {
    for (int i = 0; i < 12; ++i) fresh.train_step(batch.images, batch.labels, 6);
    return fresh.next_lr();
  }();
  EXPECT_DOUBLE_EQ(tb.next_lr(), lr12) << "the schedule continues at the converted step";
  EXPECT_EQ(weights(*a), weights(*b));
}

TEST(Trainer, FailedSaveSaysWhyAndKeepsNothingHalfWritten) {
  TempDir dir;
  auto m = tiny(config());
  Trainer t(m, config());
  std::ofstream(dir.path() / "plain_file") << "x";
  try {
    t.save_checkpoint((dir.path() / "plain_file" / "ck").string(), {});
    FAIL() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo);
    const std::string text = e.what();
    EXPECT_EQ(text.rfind("rank 0 could not save a checkpoint in '", 0), 0u) << text;
    EXPECT_NE(text.find("Not a directory"), std::string::npos) << text;
  }
  EXPECT_THROW(t.save_checkpoint("", {}), Error);
}

TEST(Trainer, LoadOfAnotherModelIsRefused) {
  TempDir dir;
  Config c = config();
  c.set("model", "first");
  auto a = tiny(c);
  Trainer ta(a, c);
  ta.save_checkpoint(dir.path(), {});
  c.set("model", "second");
  auto b = tiny(c);
  Trainer tb(b, c);
  try {
    tb.load_checkpoint(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rank 0 could not load the checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("first"), std::string::npos) << e.what();
  }
}

TEST(Trainer, DynamicLossScalingIsExactAndItsStateIsCheckpointed) {
  // Scaling the loss by a power of two and the gradients back is exact in f32: the
  // parameters match an unscaled run's bit for bit.
  Config off = config();
  off.set("loss_scaling", "off");
  Config on = config();
  on.set("loss_scaling", "dynamic");
  on.set("loss_scale_init", "1048576");  // 2^20: seven digits, which the checkpoint must keep
  auto a = tiny(off), b = tiny(on);
  Trainer ta(a, off), tb(b, on);
  Batch batch;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(ta.train_step(batch.images, batch.labels, 6).updated);
    EXPECT_TRUE(tb.train_step(batch.images, batch.labels, 6).updated);
  }
  EXPECT_EQ(weights(*a), weights(*b));
  EXPECT_NE(weights(*a), weights(*tiny(off)));  // it trained
  EXPECT_EQ(ta.loss_scale(), 0.0);
  EXPECT_EQ(tb.loss_scale(), 1048576.0);
  // The scale and its count of good steps travel with a checkpoint.
  TempDir dir;
  tb.save_checkpoint(dir.path(), {});
  Config later = on;
  later.set("loss_scale_init", "8");
  auto c = tiny(later);
  Trainer tc(c, later);
  EXPECT_EQ(tc.loss_scale(), 8.0);
  ASSERT_TRUE(tc.load_checkpoint(dir.path()).has_value());
  EXPECT_EQ(tc.loss_scale(), 1048576.0);
  tc.train_step(batch.images, batch.labels, 6);
  tb.train_step(batch.images, batch.labels, 6);
  EXPECT_EQ(weights(*b), weights(*c));
  // A mode that cannot unscale refuses rather than train on scaled gradients.
  Config ps = on;
  ps.set("variable_update", "parameter_server");
  try {
    Trainer t(tiny(ps), ps);
    ADD_FAILURE() << "a parameter server trained with loss scaling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss scaling"), std::string::npos) << e.what();
  }
}

TEST(Trainer, PrecisionIsCheckedInOnePlace) {
  Config c = config();
  c.set("precision", "f16");
  EXPECT_THROW(check_precision(c, Device::cpu()), Error);
  EXPECT_THROW(Trainer(tiny(config()), c), Error);
  EXPECT_NO_THROW(check_precision(c, Device::cuda(0)));  // f16 trains on GPUs (loss scaling)
  c.set("precision", "bf16");
  EXPECT_NO_THROW(check_precision(c, Device::cuda(0)));
  c.set("precision", "f32");
  EXPECT_NO_THROW(check_precision(c, Device::cpu()));
}

// ---------------------------------------------------------------- pipelines for a model

TEST(ModelData, PipelineTakesTheModelsSizeChannelsAndClasses) {
  auto m = Model::from_zoo(runtime(), "mnist_cnn", config());
  Config c = config();  // synthetic data, image_size 0 (which alone would mean 224)
  const data::PipelineOptions o = pipeline_options_for(*m, c);
  EXPECT_EQ(o.image_size, 28);
  EXPECT_EQ(o.synthetic_channels, 1);
  EXPECT_EQ(o.source.num_classes, 10);
  c.set("image_size", "28");  // saying the same is fine
  EXPECT_NO_THROW(pipeline_options_for(*m, c));
  c.set("image_size", "32");
  try {
    pipeline_options_for(*m, c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image_size=32 disagrees with model 'mnist_cnn'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline_options_for(*tiny(config()), config()), Error);  // feature vectors
}

TEST(ModelData, EvaluationCoversAnEpochOrTheStepsAskedFor) {
  auto m = Model::from_zoo(runtime(), "trivial", config());
  Config c = config();
  c.set("batch_size", "4");
  c.set("synthetic_samples", "12");
  data::PipelineOptions o = pipeline_options_for(*m, c);
  auto source = data::open_source(o.source);
  data::Pipeline p(o, source);
  check_pipeline_fits(*m, p);
  EXPECT_EQ(evaluate(*m, &p, 0).samples, 12);
  EXPECT_EQ(evaluate(*m, &p, 2).samples, 8);
  EXPECT_EQ(evaluate(*m, nullptr, 0).samples, 0);  // a rank without data adds nothing
}

// ---------------------------------------------------------------- teardown

TEST(Teardown, AfterShutdownObjectsOnlyFreeMemory) {
  Config rc;
  rc.set("device", "cpu");
  auto rt = std::make_shared<Runtime>(rc);
  auto m = tiny(config(), rt);
  auto t = std::make_unique<Trainer>(m, config());
  rt->shutdown();
  EXPECT_TRUE(rt->is_shut_down());
  Batch b;
  try {
    t->train_step(b.images, b.labels, 6);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidState);
    EXPECT_NE(std::string(e.what()).find("cohort_runtime_destroy"), std::string::npos);
  }
  EXPECT_THROW(m->forward_backward(b.images, b.labels), Error);
  EXPECT_THROW(rt->engine(), Error);
  EXPECT_NO_THROW(rt->shutdown());  // idempotent
  t.reset();
  m.reset();
  rt.reset();  // the last reference: nothing collective is left to do
}

}  // namespace
}  // namespace cohort::train
