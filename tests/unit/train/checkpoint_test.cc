// Checkpoint files: round trip, every kind of corruption and mismatch reported clearly,
// the checkpoint directory's "latest" pointer and pruning, a SIGKILL during a write,
// and an optimizer resumed from a checkpoint continuing bit-exactly.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "support/temp_dir.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "core/crc32c.h"

namespace cohort {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

Tensor f32(Shape shape, float start) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = start + 0.5f * static_cast<float>(i);
  return t;
}

Checkpoint sample(int64_t step = 7) {
  Checkpoint ck;
  ck.model = "mnist_cnn";
  ck.epoch = 2;
  ck.step = step;
  ck.pipeline_epoch = 2;
  ck.pipeline_step = 13;
  ck.seed = 1234;
  ck.rng_counter = 0xDEADBEEFCAFEull;
  ck.metadata = {{"optimizer", "momentum"}, {"cohort", "0.1.0"}};
  ck.params = {{"conv1.weight", f32({4, 1, 3, 3}, 1.0f)}, {"conv1.bias", f32({4}, -2.0f)}, {"empty", f32({0}, 0)}};
  Tensor step_t = Tensor::empty({1}, DType::kI64);
  *step_t.data_as<int64_t>() = step;
  ck.optimizer_state = {{"conv1.weight/velocity", f32({4, 1, 3, 3}, 0.25f)}, {"step", step_t}};
  return ck;
}

void expect_same_tensors(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].tensor.dtype(), b[i].tensor.dtype());
    EXPECT_EQ(a[i].tensor.shape(), b[i].tensor.shape());
    ASSERT_EQ(a[i].tensor.nbytes(), b[i].tensor.nbytes());
    if (a[i].tensor.nbytes() > 0) {
      EXPECT_EQ(0, std::memcmp(a[i].tensor.data(), b[i].tensor.data(), a[i].tensor.nbytes())) << a[i].name;
    }
  }
}

std::string error_of(const std::function<void()>& f, Code* code = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (code != nullptr) *code = e.code();
    return e.what();
  }
  return "(no error)";
}

std::vector<char> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::vector<char>& d) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(d.data(), static_cast<std::streamsize>(d.size()));
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  // Extending in pieces equals one pass, whatever the split.
  std::string text = "The quick brown fox jumps over the lazy dog, again and again.";
  for (size_t cut = 0; cut <= text.size(); ++cut)
    EXPECT_EQ(crc32c_extend(crc32c(text.data(), cut), text.data() + cut, text.size() - cut),
              crc32c(text.data(), text.size()));
}

TEST(Checkpoint, RoundTripKeepsEverything) {
  TempDir dir;
  const fs::path file = dir.path() / "a.cohort";
  Checkpoint ck = sample();
  write_checkpoint(file, ck);
  Checkpoint back = read_checkpoint(file);
  EXPECT_EQ(back.model, "mnist_cnn");
  EXPECT_EQ(back.epoch, 2);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.pipeline_epoch, 2);
  EXPECT_EQ(back.pipeline_step, 13);
  EXPECT_EQ(back.seed, 1234u);
  EXPECT_EQ(back.rng_counter, 0xDEADBEEFCAFEull);
  EXPECT_EQ(back.metadata, ck.metadata);
  expect_same_tensors(back.params, ck.params);
  expect_same_tensors(back.optimizer_state, ck.optimizer_state);
  // No temporary file is left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
}

TEST(Checkpoint, CorruptionIsReportedWithTheFileName) {
  TempDir dir;
  const fs::path file = dir.path() / "c.cohort";
  write_checkpoint(file, sample());
  const std::vector<char> good = slurp(file);
  struct Case {
    const char* what;
    std::function<void(std::vector<char>&)> damage;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"flipped payload byte", [](auto& d) { d[d.size() / 2] ^= 0x01; }, "checksum mismatch"},
      {"flipped last byte", [](auto& d) { d.back() ^= 0x80; }, "checksum mismatch"},
      {"bad magic", [](auto& d) { d[0] = 'X'; }, "bad magic"},
      {"truncated to half", [](auto& d) { d.resize(d.size() / 2); }, "is truncated"},
      {"truncated by one byte", [](auto& d) { d.pop_back(); }, "is truncated"},
      {"truncated in the header", [](auto& d) { d.resize(20); }, "is truncated"},
      {"truncated in the magic", [](auto& d) { d.resize(3); }, "is truncated"},
      {"empty", [](auto& d) { d.clear(); }, "is empty"},
      {"trailing junk", [](auto& d) { d.push_back('j'); }, "unexpected bytes"},
      {"payload size changed", [](auto& d) { d[16] ^= 0x04; }, "corrupt header"},
      {"newer version",
       [](auto& d) {
         uint32_t v = 2;
         std::memcpy(d.data() + 8, &v, 4);
         uint32_t c = crc32c(d.data(), 28);
         std::memcpy(d.data() + 28, &c, 4);
       },
       "format version 2"},
  };
  for (const Case& c : cases) {
    std::vector<char> d = good;
    c.damage(d);
    spit(file, d);
    Code code = Code::kOk;
    std::string msg = error_of([&] { read_checkpoint(file); }, &code);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(file.string()), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(code, Code::kCorruptData) << c.what;
  }
  Code code = Code::kOk;
  std::string msg = error_of([&] { read_checkpoint(dir.path() / "missing.cohort"); }, &code);
  EXPECT_EQ(code, Code::kIo);
  EXPECT_NE(msg.find("missing.cohort"), std::string::npos) << msg;
}

// Rewrites the header's payload and header checksums after a deliberate edit.
void fix_checksums(std::vector<char>& d) {
  uint32_t payload = crc32c(d.data() + 32, d.size() - 32);
  std::memcpy(d.data() + 24, &payload, 4);
  uint32_t header = crc32c(d.data(), 28);
  std::memcpy(d.data() + 28, &header, 4);
}

TEST(Checkpoint, MalformedContentWithValidChecksumsIsReported) {
  TempDir dir;
  const fs::path file = dir.path() / "m.cohort";
  write_checkpoint(file, sample());
  const std::vector<char> good = slurp(file);
  const std::string name = "conv1.weight";
  auto at = std::search(good.begin() + 32, good.end(), name.begin(), name.end()) - good.begin();
  struct Case {
    const char* what;
    std::function<void(std::vector<char>&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"unknown dtype", [&](auto& d) { d[static_cast<size_t>(at) + name.size()] = 9; }, "unknown dtype"},
      {"huge rank", [&](auto& d) { d[static_cast<size_t>(at) + name.size() + 2] = 100; }, "has rank 100"},
      {"byte count off", [&](auto& d) { d[static_cast<size_t>(at) + name.size() + 6 + 32] ^= 4; }, "bytes for shape"},
      {"name length too long", [&](auto& d) { d[static_cast<size_t>(at) - 2] = 0x7f; }, "malformed"},
      {"cut after a tensor",
       [&](auto& d) {
         d.resize(d.size() - 3);
         uint64_t n = d.size() - 32;
         std::memcpy(d.data() + 16, &n, 8);
       },
       "runs past the end"},
  };
  for (const Case& c : cases) {
    std::vector<char> d = good;
    c.edit(d);
    fix_checksums(d);
    spit(file, d);
    Code code = Code::kOk;
    std::string msg = error_of([&] { read_checkpoint(file); }, &code);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find("is malformed at byte"), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(code, Code::kCorruptData) << c.what;
  }
  EXPECT_NO_THROW(parse_checkpoint(std::string_view(good.data(), good.size()), "in memory"));
}

TEST(Checkpoint, MismatchedModelOrShapesAreClearErrors) {
  Checkpoint ck = sample();
  const fs::path file = "/ckpts/ckpt-7.cohort";
  std::vector<NamedTensor> model = {
      {"conv1.weight", f32({4, 1, 3, 3}, 0)}, {"conv1.bias", f32({4}, 0)}, {"empty", f32({0}, 0)}};
  EXPECT_NO_THROW(check_checkpoint_matches(ck, "mnist_cnn", model, file));

  std::string msg = error_of([&] { check_checkpoint_matches(ck, "resnet50", model, file); });
  EXPECT_NE(msg.find("saved for model 'mnist_cnn', this run's model is 'resnet50'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file.string()), std::string::npos);

  auto other_shape = model;
  other_shape[0].tensor = f32({8, 1, 3, 3}, 0);
  msg = error_of([&] { check_checkpoint_matches(ck, "mnist_cnn", other_shape, file); });
  EXPECT_NE(msg.find("parameter 'conv1.weight' is f32[4, 1, 3, 3] in the checkpoint but f32[8, 1, 3, 3] in the model"),
            std::string::npos)
      << msg;

  auto renamed = model;
  renamed[1].name = "conv1.b";
  msg = error_of([&] { check_checkpoint_matches(ck, "mnist_cnn", renamed, file); });
  EXPECT_NE(msg.find("has no parameter 'conv1.b'"), std::string::npos) << msg;

  auto fewer = model;
  fewer.pop_back();
  msg = error_of([&] { check_checkpoint_matches(ck, "mnist_cnn", fewer, file); });
  EXPECT_NE(msg.find("has parameter 'empty' that model 'mnist_cnn' does not have"), std::string::npos) << msg;
}

TEST(Checkpoint, OptimizerStateIsTiedToTheOptimizerKind) {
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  Optimizer a(adam);
  Tensor w = f32({2}, 1.0f), g = f32({2}, 0.5f);
  ParamGrad p{"w", w, g};
  a.step({&p, 1}, 0.1);
  Checkpoint ck;
  store_optimizer_state(ck, a);
  EXPECT_EQ(ck.metadata.at("optimizer"), "adam");
  Optimizer b(adam);
  restore_optimizer_state(ck, b, "ck.cohort");
  EXPECT_EQ(b.steps(), 1);
  Optimizer m{OptimizerOptions{}};  // momentum
  std::string msg = error_of([&] { restore_optimizer_state(ck, m, "/ck/x.cohort"); });
  EXPECT_NE(msg.find("checkpoint '/ck/x.cohort' holds the state of optimizer=adam; this run uses optimizer=momentum"),
            std::string::npos)
      << msg;
  ck.metadata.erase("optimizer");  // without the kind, the entries themselves give it away
  msg = error_of([&] { restore_optimizer_state(ck, m, "/ck/x.cohort"); });
  EXPECT_NE(msg.find("checkpoint '/ck/x.cohort': optimizer state: entry 'w/adam_m'"), std::string::npos) << msg;
}

TEST(Checkpoint, RestoreCopiesParameterValues) {
  Checkpoint ck = sample();
  std::vector<NamedTensor> model = {
      {"conv1.bias", f32({4}, 0)}, {"conv1.weight", f32({4, 1, 3, 3}, 0)}, {"empty", f32({0}, 0)}};
  restore_parameters(ck, "mnist_cnn", model, "x");
  EXPECT_EQ(0, std::memcmp(model[0].tensor.data(), ck.params[1].tensor.data(), 16));
  EXPECT_EQ(model[1].tensor.data_as<float>()[35], ck.params[0].tensor.data_as<float>()[35]);
}

TEST(Checkpoint, WriteErrorsNameTheFile) {
  Code code = Code::kOk;
  std::string msg = error_of([&] { write_checkpoint("/nonexistent-dir/x.cohort", sample()); }, &code);
  EXPECT_EQ(code, Code::kIo);
  EXPECT_NE(msg.find("/nonexistent-dir/x.cohort"), std::string::npos) << msg;
  Checkpoint dup = sample();
  dup.params.push_back(dup.params[0]);
  TempDir dir;
  EXPECT_THROW(write_checkpoint(dir.path() / "d.cohort", dup), Error);
  EXPECT_FALSE(fs::exists(dir.path() / "d.cohort"));
}

TEST(CheckpointDir, LatestPointsAtTheNewestAndOldOnesArePruned) {
  TempDir dir;
  CheckpointDir cd(dir.path() / "run", 2);
  EXPECT_FALSE(cd.latest().has_value());
  Code code = Code::kOk;
  std::string msg = error_of([&] { cd.load_latest(); }, &code);
  EXPECT_EQ(code, Code::kIo);
  EXPECT_NE(msg.find("no checkpoint in"), std::string::npos) << msg;

  for (int64_t step : {100, 200, 300}) cd.save(sample(step));
  ASSERT_TRUE(cd.latest().has_value());
  EXPECT_EQ(cd.latest()->filename(), "ckpt-000000000300.cohort");
  EXPECT_EQ(cd.load_latest().step, 300);
  EXPECT_FALSE(fs::exists(cd.dir() / "ckpt-000000000100.cohort"));
  EXPECT_TRUE(fs::exists(cd.dir() / "ckpt-000000000200.cohort"));

  spit(cd.dir() / "latest", {'g', 'o', 'n', 'e', '\n'});
  msg = error_of([&] { cd.latest(); }, &code);
  EXPECT_EQ(code, Code::kCorruptData);
  EXPECT_NE(msg.find("names 'gone', which does not exist"), std::string::npos) << msg;
  spit(cd.dir() / "latest", {'.', '.', '/', 'x'});
  EXPECT_THROW(cd.latest(), Error);
  spit(cd.dir() / "latest", std::vector<char>(10000, 'a'));
  msg = error_of([&] { cd.latest(); }, &code);
  EXPECT_NE(msg.find("should hold one checkpoint file name"), std::string::npos) << msg;
}

// Checkpoints and the "latest" pointer get the mode any new file of the user gets.
TEST(CheckpointDir, FilesHonourTheUmask) {
  TempDir dir;
  for (mode_t mask : {mode_t{002}, mode_t{077}}) {
    const mode_t old = ::umask(mask);
    const fs::path file = CheckpointDir(dir.path() / "run", 1).save(sample(mask));
    ::umask(old);
    for (const fs::path& f : {file, dir.path() / "run" / "latest"}) {
      struct stat st {};
      ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
      EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask) << f << " under umask " << std::oct << mask;
    }
  }
}

// A child process writes a large checkpoint and is killed part-way: the previous
// "latest" must still load, and the next save must clean up the leftover.
TEST(CheckpointDir, KillDuringWriteLeavesLatestIntact) {
  TempDir dir;
  CheckpointDir cd(dir.path(), 2);
  const Checkpoint first = sample(1);
  cd.save(first);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    Checkpoint big = sample(2);
    big.params.push_back({"huge", Tensor::empty({int64_t{16} << 20}, DType::kF32)});  // 64 MiB
    bool told = false;
    CheckpointWriteOptions o;
    o.on_progress = [&](uint64_t written) {
      if (!told && written > (uint64_t{8} << 20)) {
        char c = 'w';
        told = ::write(fds[1], &c, 1) == 1;
      }
      if (told) ::usleep(20000);  // slow down so the kill lands mid-write
    };
    try {
      CheckpointDir(dir.path(), 2).save(big, o);
    } catch (...) {
    }
    ::_exit(3);  // reached only if the kill did not land
  }
  ::close(fds[1]);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(fds[0]);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child exited normally: the kill came too late";

  bool partial = false;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().starts_with(".tmp-")) partial = fs::file_size(e.path()) > (8u << 20);
  EXPECT_TRUE(partial) << "expected the killed write's temporary file";
  EXPECT_FALSE(fs::exists(dir.path() / "ckpt-000000000002.cohort"));
  Checkpoint back = cd.load_latest();
  EXPECT_EQ(back.step, 1);
  expect_same_tensors(back.params, first.params);

  cd.save(sample(3));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_FALSE(e.path().filename().string().starts_with(".tmp-")) << e.path();
  EXPECT_EQ(cd.load_latest().step, 3);
}

// Training, saving, restoring into fresh objects and training on gives the same bits
// as training straight through.
TEST(Checkpoint, ResumedOptimizerContinuesBitExactly) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  auto grad_of = [](const Tensor& w, int step, Tensor& g) {
    for (int64_t i = 0; i < w.numel(); ++i)
      g.data_as<float>()[i] = w.data_as<float>()[i] * 0.1f + 0.01f * static_cast<float>(step % 3) - 0.02f;
  };
  auto run = [&](Optimizer& opt, Tensor& w, int from, int to) {
    Tensor g = Tensor::empty(w.shape(), DType::kF32);
    for (int s = from; s < to; ++s) {
      grad_of(w, s, g);
      ParamGrad p{"fc.weight", w, g};
      opt.step({&p, 1}, 0.01);
    }
  };
  Tensor straight = f32({16, 8}, -1.0f);
  Optimizer a(o);
  run(a, straight, 0, 10);

  TempDir dir;
  Tensor w = f32({16, 8}, -1.0f);
  Optimizer b(o);
  run(b, w, 0, 4);
  Checkpoint ck;
  ck.model = "toy";
  ck.step = b.steps();
  ck.params = {{"fc.weight", w}};
  ck.optimizer_state = b.export_state();
  CheckpointDir(dir.path()).save(ck);

  Checkpoint back = CheckpointDir(dir.path()).load_latest();
  Tensor w2 = f32({16, 8}, 99.0f);
  std::vector<NamedTensor> model = {{"fc.weight", w2}};
  restore_parameters(back, "toy", model, "latest");
  Optimizer c(o);
  c.import_state(back.optimizer_state);
  EXPECT_EQ(c.steps(), 4);
  run(c, w2, 4, 10);
  EXPECT_EQ(0, std::memcmp(w2.data(), straight.data(), straight.nbytes()));
}

}  // namespace
}  // namespace cohort
