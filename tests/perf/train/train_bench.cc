// Benchmarks of the training building blocks, each printed beside a peer measured in
// the same run (timings here vary ±30% run to run): optimizer updates on a
// ResNet-50-sized parameter set against a plain axpy pass over the same memory (each
// with its goal, from the arrays it reads and writes), CRC32C
// against memcpy, and a checkpoint write/read against writing/reading the raw bytes.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "core/crc32c.h"

namespace {
using namespace cohort;
namespace fs = std::filesystem;

constexpr int64_t kParams = 25557032;  // ResNet-50

double median_seconds(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void bench_optimizers() {
  Tensor w = Tensor::empty({kParams}, DType::kF32);
  Tensor g = Tensor::empty({kParams}, DType::kF32);
  for (int64_t i = 0; i < kParams; ++i) g.data_as<float>()[i] = 1e-3f * static_cast<float>(i % 7);
  float* wp = w.data_as<float>();
  const float* gp = g.data_as<float>();
  const double axpy = median_seconds(5, [&] {
    for (int64_t i = 0; i < kParams; ++i) wp[i] -= 0.1f * gp[i];
  });
  std::printf("optimizer update, %lld f32 parameters (ResNet-50), 1 thread\n", static_cast<long long>(kParams));
  std::printf("  peer: axpy w -= lr*g            %8.2f ms  (3 arrays: w read and written, g read)\n", axpy * 1e3);
  // SGD, momentum and LARS are memory-bound: the goal is the axpy's time per array an
  // update reads or writes, with a 1.5x allowance for this machine's noise (LARS's
  // arrays include its norms pass over w and g). Adam has none: its three divisions and
  // square root per element bound it at the baseline x86-64 build's 4-wide vectors.
  struct Case {
    OptimizerKind kind;
    int arrays;
    bool memory_bound;
  };
  for (Case c : {Case{OptimizerKind::kSgd, 3, true}, Case{OptimizerKind::kMomentum, 5, true},
                 Case{OptimizerKind::kNesterov, 5, true}, Case{OptimizerKind::kAdam, 7, false},
                 Case{OptimizerKind::kAdamW, 7, false}, Case{OptimizerKind::kLars, 7, true}}) {
    OptimizerOptions o;
    o.kind = c.kind;
    Optimizer opt(o);
    ParamGrad p{"w", w, g};
    opt.step({&p, 1}, 0.1);  // allocates the state
    const double t = median_seconds(5, [&] { opt.step({&p, 1}, 0.1); });
    const double goal = 1.5 * c.arrays / 3.0;
    std::printf("  %-10s                      %8.2f ms  (%.2fx axpy; %d arrays",
                std::string(optimizer_kind_name(c.kind)).c_str(), t * 1e3, t / axpy, c.arrays);
    if (c.memory_bound)
      std::printf(", goal <= %.2fx: %s)\n", goal, t / axpy <= goal ? "met" : "NOT met");
    else
      std::printf("; arithmetic-bound, no goal)\n");
  }
}

void bench_crc() {
  std::vector<char> a(size_t{256} << 20, 'x'), b(a.size());
  const double copy = median_seconds(5, [&] { std::memcpy(b.data(), a.data(), a.size()); });
  uint32_t sink = 0;
  const double crc = median_seconds(5, [&] { sink ^= crc32c(a.data(), a.size()); });
  std::printf("CRC32C over 256 MiB: %.2f GB/s; peer memcpy %.2f GB/s (ratio %.2f) [%08x]\n", a.size() / crc / 1e9,
              a.size() / copy / 1e9, crc / copy, sink);
}

void bench_checkpoint() {
  const fs::path dir = fs::temp_directory_path() / ("cohort-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Checkpoint ck;
  ck.model = "resnet50";
  ck.params = {{"w", Tensor::empty({kParams}, DType::kF32)}};
  const size_t bytes = ck.params[0].tensor.nbytes();
  const double raw_write = median_seconds(3, [&] {
    int fd = ::open((dir / "raw").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (::write(fd, ck.params[0].tensor.data(), bytes) != static_cast<ssize_t>(bytes)) std::perror("write");
    ::fsync(fd);
    ::close(fd);
  });
  const double write = median_seconds(3, [&] { write_checkpoint(dir / "ck.cohort", ck); });
  std::vector<char> buf(bytes);
  const double raw_read = median_seconds(3, [&] {
    int fd = ::open((dir / "raw").c_str(), O_RDONLY);
    if (::read(fd, buf.data(), bytes) != static_cast<ssize_t>(bytes)) std::perror("read");
    ::close(fd);
  });
  const double read = median_seconds(3, [&] { read_checkpoint(dir / "ck.cohort"); });
  std::printf(
      "checkpoint of %.1f MB: write %.0f ms (raw write+fsync %.0f ms, ratio %.2f); "
      "read+verify %.0f ms (raw read %.0f ms, ratio %.2f)\n",
      bytes / 1e6, write * 1e3, raw_write * 1e3, write / raw_write, read * 1e3, raw_read * 1e3, read / raw_read);
  fs::remove_all(dir);
}

}  // namespace

int main() {
  bench_optimizers();
  bench_crc();
  bench_checkpoint();
  return 0;
}
