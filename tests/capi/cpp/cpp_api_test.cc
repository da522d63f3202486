// cohort.hpp, the C++ layer over the public API, on one rank: each class's calls reach
// the C function they name, errors arrive as cohort::Error with the C status and
// message, and every handle is released once (valgrind and ASan run this too).
#include <cohort/cohort.hpp>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// Whether Config::set takes a value of type V.
template <class V, class = void>
struct Settable : std::false_type {};
template <class V>
struct Settable<V, std::void_t<decltype(std::declval<cohort::Config&>().set(std::string(), std::declval<V>()))>>
    : std::true_type {};
static_assert(Settable<int>::value && Settable<int64_t>::value && Settable<unsigned long>::value);
static_assert(Settable<double>::value && Settable<float>::value && Settable<bool>::value);
static_assert(Settable<const char*>::value && Settable<std::string>::value);
static_assert(!Settable<char>::value, "a character is not a number: 'A' would be 65");
static_assert(!Settable<cohort_reduce_op_t>::value, "an enum would otherwise convert to bool");

// The one runtime of the process's tests (world=process: no mpirun needed).
cohort::Runtime& runtime() {
  // Destroyed at exit before MPI is finalized: the library registers its exit handler
  // while the runtime is made, so that handler runs after this object's destructor.
  static cohort::Runtime rt([] {
    cohort::Config cfg;
    cfg.set("device", "cpu").set("world", "process").set("threads_per_rank", 1);
    return cfg;
  }());
  return rt;
}

cohort::Config training_config() {
  cohort::Config cfg;
  cfg.set("optimizer", "sgd").set("lr", 0.5).set("weight_decay", 0.0).set("compute_threads", 1);
  return cfg;
}

// A dense softmax classifier of 4 inputs and 3 classes.
cohort::Model tiny_model(const cohort::Config& cfg) {
  cohort::Model m = cohort::Model::custom(runtime(), cfg, {4});
  m.add_layer("dense", "fc", {}, "out=3");
  m.add_layer("softmax_xent", "loss");
  return m;
}

// Eight rows whose label is the largest of the first three inputs: learnable.
struct Batch {
  std::vector<float> x = std::vector<float>(8 * 4);
  std::vector<int32_t> y = std::vector<int32_t>(8);
  cohort::View<float> images{x.data(), {8, 4}};
  cohort::View<int32_t> labels{y.data(), {8}};
  Batch() {
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
    for (size_t r = 0; r < y.size(); ++r) {
      const float* row = &x[4 * r];
      y[r] = row[0] >= row[1] && row[0] >= row[2] ? 0 : row[1] >= row[2] ? 1 : 2;
    }
  }
  cohort_batch_t batch() const {
    cohort_batch_t b{};
    b.struct_size = sizeof b;
    b.images = *images.get();
    b.labels = *labels.get();
    b.valid = 8;
    return b;
  }
};

template <class Call>
cohort::Error error_of(Call call) {
  try {
    call();
  } catch (const cohort::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no cohort::Error was thrown";
  return cohort::Error(COHORT_OK, "");
}

TEST(CppConfig, ValuesOfEveryTypeRoundTripAndTheirSourceIsExplicit) {
  cohort::Config cfg;
  EXPECT_EQ(cfg.source("batch_size"), COHORT_SOURCE_DEFAULT);
  cfg.set("batch_size", 48).set("lr", 0.25).set("crc_check", false).set("augment", "none");
  EXPECT_EQ(cfg.get_int("batch_size"), 48);
  EXPECT_DOUBLE_EQ(cfg.get_float("lr"), 0.25);
  EXPECT_FALSE(cfg.get_bool("crc_check"));
  EXPECT_EQ(cfg.get("augment"), "none");
  EXPECT_EQ(cfg.get("batch_size"), "48");
  EXPECT_EQ(cfg.source("batch_size"), COHORT_SOURCE_EXPLICIT);
  cfg.unset("batch_size");
  EXPECT_EQ(cfg.source("batch_size"), COHORT_SOURCE_DEFAULT);
}

TEST(CppConfig, TextLongerThanTheFirstBufferIsReadWhole) {
  const std::string dir = "/tmp/" + std::string(700, 'd');
  cohort::Config cfg;
  cfg.set("data_dir", dir);
  EXPECT_EQ(cfg.get("data_dir"), dir);
}

TEST(CppConfig, ACopyIsIndependentAndAMovedFromConfigIsEmpty) {
  cohort::Config a;
  a.set("batch_size", 16);
  cohort::Config b = a;
  b.set("batch_size", 32);
  EXPECT_EQ(a.get_int("batch_size"), 16);
  EXPECT_EQ(b.get_int("batch_size"), 32);
  a = b;
  EXPECT_EQ(a.get_int("batch_size"), 32);
  cohort::Config c = std::move(a);
  EXPECT_EQ(c.get_int("batch_size"), 32);
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
}

TEST(CppConfig, AnUnknownKeyOrABadValueThrowsTheCStatusAndMessage) {
  cohort::Config cfg;
  cohort::Error unknown = error_of([&] { cfg.set("batch_sise", 8); });
  EXPECT_EQ(unknown.status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(unknown.status_text(), cohort_status_string(COHORT_ERR_INVALID_ARGUMENT));
  EXPECT_NE(std::string(unknown.what()).find("batch_sise"), std::string::npos) << unknown.what();
  EXPECT_NE(std::string(unknown.what()).find("batch_size"), std::string::npos) << "names the nearest key";
  const char* none = nullptr;
  cohort::Error null_value = error_of([&] { cfg.set("augment", none); });
  EXPECT_NE(std::string(null_value.what()).find("value"), std::string::npos) << null_value.what();
  cohort::Error bad = error_of([&] { cfg.set("batch_size", "many"); });
  EXPECT_NE(std::string(bad.what()).find("many"), std::string::npos) << bad.what();
  EXPECT_EQ(cfg.source("batch_size"), COHORT_SOURCE_DEFAULT) << "a refused value changes nothing";
}

TEST(CppConfig, ParseArgsConsumesOptionsAndHandsBackTheRest) {
  std::string a0 = "prog", a1 = "--batch_size=12", a2 = "input.txt", a3 = "--no-crc_check";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data()};
  cohort::Config cfg;
  std::vector<char*> rest = cfg.parse_args(4, argv, COHORT_PARSE_STRICT);
  ASSERT_EQ(rest.size(), 2U);
  EXPECT_EQ(std::string(rest[0]), "prog");
  EXPECT_EQ(std::string(rest[1]), "input.txt");
  EXPECT_EQ(cfg.get_int("batch_size"), 12);
  EXPECT_FALSE(cfg.get_bool("crc_check"));
  std::string b1 = "--batch_sise=3";
  char* bad[] = {a0.data(), b1.data()};
  EXPECT_EQ(error_of([&] { cfg.parse_args(2, bad, COHORT_PARSE_STRICT); }).status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cfg.get_int("batch_size"), 12);
}

TEST(CppOptions, TheRegistryIsListedAndDescribed) {
  std::vector<std::string> names = cohort::option_names();
  ASSERT_EQ(names.size(), cohort_option_count());
  cohort_option_info_t info = cohort::describe_option("batch_size");
  EXPECT_STREQ(info.name, "batch_size");
  EXPECT_EQ(info.type, COHORT_OPTION_INT);
  EXPECT_EQ(cohort::describe_option(names.front()).name, names.front());
  EXPECT_EQ(error_of([] { cohort::describe_option("no_such_key"); }).status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cohort::version_string(), std::string(COHORT_VERSION_STRING));
  EXPECT_EQ(std::string(cohort::build_info().cohort_version), cohort::version_string());
}

TEST(CppRuntime, ReportsOneRankOnTheCpuAndItsOptions) {
  cohort::Runtime& rt = runtime();
  EXPECT_EQ(rt.rank(), 0);
  EXPECT_EQ(rt.size(), 1);
  cohort_runtime_info_t info = rt.info();
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(rt.device(), "cpu");
  EXPECT_EQ(rt.config().get("world"), "process");
  cohort_memory_stats_t mem = rt.memory_stats();
  EXPECT_EQ(mem.device_id, -1) << "no compute-device cache on the CPU";
  rt.empty_cache();
  EXPECT_GT(rt.cpu_times().process_s, 0.0) << "the process has run";
  const uint64_t completed = rt.engine_stats().completed;
  std::vector<float> v = {1};
  cohort::View<float> t(v.data(), {1});
  cohort::allreduce(rt, "runtime.counted", *t.get());
  EXPECT_EQ(rt.engine_stats().completed, completed + 1) << "the engine counts the allreduce";
  rt.barrier();
  rt.mark_step();
}

TEST(CppModel, AZooModelDescribesItself) {
  cohort::Config cfg;
  cfg.set("compute_threads", 1);
  cohort::Model m(runtime(), "mnist_cnn", cfg);
  cohort::IoShape io = m.io_shape();
  EXPECT_EQ(io.channels, 1);
  EXPECT_EQ(io.height, 28);
  EXPECT_EQ(io.num_classes, 10);
  EXPECT_GT(m.num_params(), 0);
  EXPECT_GT(m.summary().size(), 256U) << "longer than the first buffer: read in a second call";
  m.materialize();
  ASSERT_GT(m.num_tensors(), 0U);
  cohort::Param p = m.param(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.value.ndim, 0);
  EXPECT_EQ(error_of([&] { m.param(m.num_tensors()); }).status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(error_of([&] { cohort::Model(runtime(), "no_such_model", cfg); }).status(), COHORT_ERR_INVALID_ARGUMENT);
}

TEST(CppModel, ALayerOfAnUnknownKindIsRefusedByName) {
  cohort::Config cfg = training_config();
  cohort::Model m = cohort::Model::custom(runtime(), cfg, {4});
  EXPECT_EQ(m.add_layer("dense", "fc", {}, "out=3"), 1) << "layer 0 is the input";
  cohort::Error e = error_of([&] { m.add_layer("densest", "fc2"); });
  EXPECT_EQ(e.status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("densest"), std::string::npos) << e.what();
}

TEST(CppModel, BackwardCallsTheGradientCallbackOncePerParameter) {
  cohort::Config cfg = training_config();
  cohort::Model m = tiny_model(cfg);
  m.materialize();
  std::vector<size_t> seen;
  m.set_grad_ready([&](size_t index) { seen.push_back(index); });
  Batch b;
  const float loss = m.forward_backward(*b.images.get(), *b.labels.get());
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(seen.size(), m.num_tensors());
  m.set_grad_ready({});
  m.forward_backward(*b.images.get(), *b.labels.get());
  EXPECT_EQ(seen.size(), m.num_tensors()) << "a cleared callback is not called";
  EXPECT_FLOAT_EQ(m.loss(*b.images.get(), *b.labels.get()), loss) << "no update in between";
}

TEST(CppModel, ForwardGivesLogitsAndProfilingTimesTheLayers) {
  cohort::Config cfg = training_config();
  cohort::Model m = tiny_model(cfg);
  m.set_profiling(true);
  Batch b;
  m.forward_backward(*b.images.get(), *b.labels.get());
  std::vector<float> logits(8 * 3, -1.0F);
  cohort::View<float> out(logits.data(), {8, 3});
  m.forward(*b.images.get(), *out.get());
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(m.profile().find("fc"), std::string::npos) << m.profile();
}

TEST(CppModel, EvaluationOverAPipelineFromMemoryCountsItsSamples) {
  std::vector<uint8_t> pixels(20 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7) % 255);
  std::vector<int32_t> labels(20);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  cohort::View<uint8_t> images(pixels.data(), {20, 28, 28});
  cohort::View<int32_t> ys(labels.data(), {20});
  cohort::Config cfg;
  cfg.set("batch_size", 5).set("augment", "none").set("num_classes", 10).set("compute_threads", 1);
  cohort::Model m(runtime(), "mnist_cnn", cfg);
  cohort::Pipeline p = cohort::Pipeline::from_memory(&runtime(), cfg, *images.get(), *ys.get());
  cohort_eval_result_t r = m.evaluate(p, 2);
  EXPECT_EQ(r.samples, 10);
  EXPECT_GE(r.top1, 0.0);
  EXPECT_LE(r.top1, 1.0);
}

TEST(CppModel, AMovedModelKeepsItsCallback) {
  cohort::Config cfg = training_config();
  cohort::Model a = tiny_model(cfg);
  int calls = 0;
  a.set_grad_ready([&](size_t) { ++calls; });
  cohort::Model b = std::move(a);
  Batch batch;
  b.forward_backward(*batch.images.get(), *batch.labels.get());
  EXPECT_EQ(static_cast<size_t>(calls), b.num_tensors());
}

TEST(CppModel, MoveAssignmentReleasesTheOldModelAndKeepsTheNewCallback) {
  cohort::Config cfg = training_config();
  cohort::Model a = tiny_model(cfg);
  int calls_a = 0, calls_b = 0;
  a.set_grad_ready([&](size_t) { ++calls_a; });
  cohort::Model b = tiny_model(cfg);
  b.set_grad_ready([&](size_t) { ++calls_b; });
  a = std::move(b);
  Batch batch;
  a.forward_backward(*batch.images.get(), *batch.labels.get());
  EXPECT_EQ(calls_a, 0) << "the released model's callback is gone";
  EXPECT_EQ(static_cast<size_t>(calls_b), a.num_tensors());
}

TEST(CppOptimizer, TrainingGoesOnAfterTheModelObjectIsDestroyed) {
  cohort::Config cfg = training_config();
  std::optional<cohort::Model> m(tiny_model(cfg));
  int calls = 0;
  m->set_grad_ready([&](size_t) { ++calls; });
  cohort::Optimizer opt(*m, cfg);  // keeps the C model alive and installs its own callback
  m.reset();
  Batch b;
  const cohort_batch_t batch = b.batch();
  const double first = opt.train_step(batch).loss;
  double last = first;
  for (int s = 0; s < 30; ++s) last = opt.train_step(batch).loss;
  EXPECT_LT(last, first);
  EXPECT_EQ(calls, 0) << "the optimizer replaced the callback";
}

TEST(CppView, CopiesPointToTheirOwnShapeAndAMovedFromViewIsEmpty) {
  std::vector<float> data(6);
  cohort::View<float> a(data.data(), {2, 3});
  cohort::View<float> copy = a;
  EXPECT_NE(copy.get()->shape, a.get()->shape);
  EXPECT_EQ(copy.get()->shape[1], 3);
  EXPECT_EQ(copy.get()->data, data.data());
  EXPECT_EQ(copy.get()->dtype.code, kDLFloat);
  EXPECT_EQ(copy.get()->dtype.bits, 32);
  cohort::View<float> moved = std::move(a);
  EXPECT_EQ(moved.get()->ndim, 2);
  EXPECT_EQ(moved.get()->shape, moved.shape().data());
  EXPECT_EQ(a.get()->ndim, 0);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(a.get()->data, nullptr);
  cohort::View<const int64_t> c(nullptr, {0});
  EXPECT_EQ(c.get()->dtype.code, kDLInt);
  EXPECT_EQ(c.get()->dtype.bits, 64);
  cohort::Tensor empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.shape().empty());
}

TEST(CppOptimizer, TrainingLowersTheLossAndACheckpointRestoresTheSteps) {
  cohort::Config cfg = training_config();
  cohort::Model m = tiny_model(cfg);
  m.set_grad_ready([](size_t) {});  // replaced by the optimizer's own
  cohort::Optimizer opt(m, cfg);
  opt.set_run_length(10, 40);
  opt.broadcast(0);
  Batch b;
  const cohort_batch_t batch = b.batch();
  const double first = opt.train_step(batch).loss;
  cohort_train_stats_t st{};
  for (int s = 1; s < 40; ++s) st = opt.train_step(batch);
  EXPECT_LT(st.loss, first * 0.5) << "first " << first << ", last " << st.loss;
  EXPECT_EQ(st.step, 40);
  EXPECT_EQ(opt.state().steps, 40);
  opt.check_consistency();

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cohort-cpp-" + std::to_string(static_cast<long>(getpid())));
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(opt.load_checkpoint(dir.string()).has_value()) << "no checkpoint there yet";
  cohort_checkpoint_info_t saved{};
  saved.epoch = 4;
  saved.pipeline_epoch = 4;
  opt.save_checkpoint(dir.string(), saved);
  opt.train_step(batch);
  std::optional<cohort_checkpoint_info_t> loaded = opt.load_checkpoint(dir.string());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->epoch, 4);
  EXPECT_EQ(loaded->step, 40);
  EXPECT_EQ(opt.state().steps, 40);
  std::filesystem::remove_all(dir);
}

TEST(CppPipeline, BatchesFromMemoryHaveThePipelinesGeometry) {
  std::vector<uint8_t> pixels(20 * 6 * 6);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 251);
  std::vector<int32_t> labels(20);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 4);
  cohort::View<uint8_t> images(pixels.data(), {20, 6, 6});
  cohort::View<int32_t> ys(labels.data(), {20});
  cohort::Config cfg;
  cfg.set("batch_size", 5).set("augment", "none").set("num_classes", 4).set("shuffle", false);
  cohort::Pipeline p = cohort::Pipeline::from_memory(&runtime(), cfg, *images.get(), *ys.get());
  EXPECT_EQ(p.steps_per_epoch(), 4);
  EXPECT_EQ(p.info().batch_size, 5);
  cohort_batch_t b = p.next();
  EXPECT_EQ(b.valid, 5);
  EXPECT_EQ(b.images.shape[0], 5);
  EXPECT_EQ(p.position(), std::make_pair(int64_t{0}, int64_t{1}));
  EXPECT_EQ(p.stats().batches, 1);
  p.seek(1, 2);
  cohort_batch_t later = p.next();
  EXPECT_EQ(later.epoch, 1);
  EXPECT_EQ(later.step, 2);
  EXPECT_FALSE(p.verdict().empty());
  EXPECT_EQ(error_of([&] { p.seek(0, 4); }).status(), COHORT_ERR_INVALID_ARGUMENT);
  cohort::View<float> wrong(reinterpret_cast<float*>(pixels.data()), {20, 6, 6});
  EXPECT_EQ(error_of([&] { cohort::Pipeline::from_memory(nullptr, cfg, *wrong.get(), *ys.get()); }).status(),
            COHORT_ERR_INVALID_ARGUMENT);
}

TEST(CppCollectives, OnOneRankTheyApplyTheirScalesAndReturnTheirResults) {
  cohort::Runtime& rt = runtime();
  std::vector<float> v = {1, 2, 3, 4};
  cohort::View<float> t(v.data(), {2, 2});
  cohort::allreduce(rt, "cpp.sum", *t.get(), nullptr, cohort::allreduce_options(COHORT_REDUCE_SUM, 2.0, 0.5));
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3, 4}));
  std::vector<float> out(4);
  cohort::View<float> o(out.data(), {2, 2});
  cohort::Request r =
      cohort::allreduce_async(rt, "cpp.scaled", *t.get(), o.get(), cohort::allreduce_options(COHORT_REDUCE_SUM, 3.0));
  r.wait();
  EXPECT_TRUE(r.test());
  EXPECT_EQ(out, (std::vector<float>{3, 6, 9, 12}));
  cohort::Tensor g = cohort::allgather(rt, "cpp.gather", *t.get());
  EXPECT_EQ(g.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(g.data<float>()[3], 4.0F);
  cohort::Request a = cohort::allgather_async(rt, "cpp.gather2", *t.get());
  a.wait();
  EXPECT_EQ(a.output().numel(), 4);
  cohort::broadcast(rt, "cpp.bcast", *t.get(), 0);
  cohort::barrier(rt);
  cohort::Error e = error_of([&] { cohort::allreduce(rt, "__reserved", *t.get()); });
  EXPECT_EQ(e.status(), COHORT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.what()).find("__reserved"), std::string::npos) << e.what();
}

TEST(CppMetrics, MeasuredStepsAfterTheWarmUpAreSummarised) {
  cohort::Metrics m(1);
  m.record(1.0, 0, 0, 10);  // warm-up
  m.record(0.5, 0, 0, 100);
  m.record(0.5, 0.1, 0, 100);
  cohort_rate_summary_t s = m.summary();
  EXPECT_EQ(s.count, 2);
  EXPECT_DOUBLE_EQ(s.median, 200.0);
}

}  // namespace
