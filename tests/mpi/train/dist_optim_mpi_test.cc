// DistributedOptimizer across real processes: each rank trains a linear model on its
// shard of every global batch, exchanging gradients over MPI; the parameters must equal
// single-rank training on the whole batch (computed on every rank) and be bit-identical
// across ranks, with and without backward_passes_per_step and f16 compression. The
// collectives here are a direct MPI adapter for the test; the trainer uses the engine.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/f16_compress.h"
#include "optim/distributed_optimizer.h"
#include "../../unit/train/linear_model.h"

namespace {
using namespace cohort;

class MpiCollectives : public Collectives {
 public:
  MpiCollectives() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                       const Event& ready) override {
    ready.synchronize();
    pending_.push_back({t, prescale, postscale});
  }
  void wait_all(const Stream&) override {
    for (Pending& p : pending_) run(p);
    pending_.clear();
  }
  void broadcast(const std::string& name, Tensor t, int root) override {
    MPI_Bcast(t.data(), static_cast<int>(t.nbytes()), MPI_BYTE, root, MPI_COMM_WORLD);
  }

 private:
  struct Pending {
    Tensor t;
    double pre, post;
  };
  static void run(Pending& p) {
    const int n = static_cast<int>(p.t.numel());
    switch (p.t.dtype()) {
      case DType::kF32: {
        float* x = p.t.data_as<float>();
        for (int i = 0; i < n; ++i) x[i] *= static_cast<float>(p.pre);
        MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; ++i) x[i] *= static_cast<float>(p.post);
        return;
      }
      case DType::kF16: {  // summed in f32, rounded back to f16
        std::vector<float> f(static_cast<size_t>(n));
        uint16_t* h = p.t.data_as<uint16_t>();
        for (int i = 0; i < n; ++i)
          f[static_cast<size_t>(i)] = kernels::decompress_f16(h[i]) * static_cast<float>(p.pre);
        MPI_Allreduce(MPI_IN_PLACE, f.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < n; ++i)
          h[i] = kernels::compress_f16(f[static_cast<size_t>(i)] * static_cast<float>(p.post));
        return;
      }
      case DType::kF64:
        MPI_Allreduce(MPI_IN_PLACE, p.t.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        return;
      case DType::kI64:
        MPI_Allreduce(MPI_IN_PLACE, p.t.data(), n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        return;
      default:
        fail(Code::kUnsupported, "test collectives: unsupported dtype");
    }
  }

  int rank_ = 0, size_ = 1;
  std::vector<Pending> pending_;
};

int failures = 0;

void check(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
    ++failures;
  }
}

void run_case(MpiCollectives& c, DistributedOptions d, double tol, const char* label) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kNesterov;
  o.weight_decay = 1e-3;
  const int rank = c.rank(), np = c.size();
  Linear m(rank == 0 ? 1.0f : 7.0f);  // other ranks start elsewhere: the broadcast fixes that
  Optimizer opt(o);
  DistributedOptimizer dist(opt, c, m.params(), d);
  dist.broadcast_parameters(0);
  const int shard = kGlobalBatch / np, micro = shard / d.backward_passes_per_step;
  for (int s = 0; s < kSteps; ++s) {
    for (int pass = 0; pass < d.backward_passes_per_step; ++pass) {
      const int begin = rank * shard + pass * micro;
      m.backward(s, begin, begin + micro);
      dist.gradient_ready(1);
      dist.gradient_ready(0);
      dist.step(0.1);
    }
  }
  dist.check_consistency();  // throws kMismatch if any rank differs

  Linear ref(1.0f);
  Optimizer ref_opt(o);
  for (int s = 0; s < kSteps; ++s) {
    ref.backward(s, 0, kGlobalBatch);
    auto p = ref.params();
    ref_opt.step(p, 0.1);
  }
  for (int i = 0; i < kOut * kIn; ++i) {
    const double x = m.w.data_as<float>()[i], y = ref.w.data_as<float>()[i];
    check(std::abs(x - y) <= tol * std::max(1.0, std::abs(y)),
          std::string(label) + ": weight " + std::to_string(i) + " " + std::to_string(x) + " vs " + std::to_string(y),
          rank);
  }
  for (int i = 0; i < kOut; ++i) {
    const double x = m.b.data_as<float>()[i], y = ref.b.data_as<float>()[i];
    check(std::abs(x - y) <= tol * std::max(1.0, std::abs(y)), std::string(label) + ": bias " + std::to_string(i),
          rank);
  }
  // Bit-identical across ranks: compare with rank 0's copy.
  std::vector<float> mine(m.w.data_as<float>(), m.w.data_as<float>() + m.w.numel());
  std::vector<float> root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  check(std::memcmp(mine.data(), root.data(), mine.size() * sizeof(float)) == 0,
        std::string(label) + ": weights differ from rank 0", rank);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MpiCollectives c;
  try {
    run_case(c, {}, 1e-5, "plain");
    DistributedOptions two;
    two.backward_passes_per_step = 2;
    run_case(c, two, 1e-5, "backward_passes_per_step=2");
    DistributedOptions pre;
    pre.gradient_predivide_factor = c.size();
    run_case(c, pre, 1e-5, "gradient_predivide_factor");
    DistributedOptions f16;
    f16.compress_f16 = true;
    run_case(c, f16, 2e-3, "compression=f16");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", c.rank(), e.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (c.rank() == 0) std::printf("dist_optim_mpi: %d ranks, %s\n", c.size(), total == 0 ? "passed" : "FAILED");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
