// Collectives for tests: N ranks as threads in one process. Sums run in rank order, so
// every rank gets bit-identical results, as a real allreduce gives.
#pragma once

#include <barrier>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/f16_compress.h"
#include "optim/distributed_optimizer.h"

namespace cohort::testing {

struct Posted {
  std::string name;
  Tensor t;
  double prescale, postscale;
};

struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), barrier(n), posted(static_cast<size_t>(n)), bcast(static_cast<size_t>(n)) {}
  int size;
  std::barrier<> barrier;
  std::vector<std::vector<Posted>> posted;
  std::vector<Tensor> bcast;
  std::vector<std::string> bcast_names = std::vector<std::string>(static_cast<size_t>(size));
};

class ThreadCollectives : public Collectives {
 public:
  ThreadCollectives(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size; }
  int64_t allreduces = 0;

  void allreduce_async(const std::string& name, Tensor t, double prescale, double postscale,
                       const Event& ready = {}) override {
    ready.synchronize();
    pending_.push_back({name, t, prescale, postscale});
    ++allreduces;
  }

  void wait_all(const Stream& = {}) override {
    g_.posted[static_cast<size_t>(rank_)] = pending_;
    g_.barrier.arrive_and_wait();
    std::vector<std::vector<double>> results;
    for (size_t k = 0; k < pending_.size(); ++k) {
      const Posted& mine = pending_[k];
      std::vector<double> acc(static_cast<size_t>(mine.t.numel()), 0.0);
      for (int r = 0; r < g_.size; ++r) {
        const auto& theirs = g_.posted[static_cast<size_t>(r)];
        if (theirs.size() != pending_.size() || theirs[k].name != mine.name)
          throw std::runtime_error("ranks submitted different allreduces");
        const Tensor& t = theirs[k].t;
        for (int64_t i = 0; i < t.numel(); ++i) acc[static_cast<size_t>(i)] += value(t, i, theirs[k].prescale);
      }
      results.push_back(std::move(acc));
    }
    g_.barrier.arrive_and_wait();  // everyone has read everyone's inputs
    for (size_t k = 0; k < pending_.size(); ++k)
      for (int64_t i = 0; i < pending_[k].t.numel(); ++i)
        store(pending_[k].t, i, results[k][static_cast<size_t>(i)] * pending_[k].postscale);
    pending_.clear();
  }

  void broadcast(const std::string& name, Tensor t, int root) override {
    g_.bcast[static_cast<size_t>(rank_)] = t;
    g_.bcast_names[static_cast<size_t>(rank_)] = name;
    g_.barrier.arrive_and_wait();
    const Tensor& src = g_.bcast[static_cast<size_t>(root)];
    if (g_.bcast_names[static_cast<size_t>(root)] != name || src.nbytes() != t.nbytes())
      throw std::runtime_error("ranks broadcast different tensors: " + name);
    if (rank_ != root && t.nbytes() > 0) std::memcpy(t.data(), src.data(), t.nbytes());
    g_.barrier.arrive_and_wait();
  }

 private:
  // Sums in double in rank order (exact for the i64 values used here, below 2^53); f16
  // values are rounded back to f16 at the end.
  static double value(const Tensor& t, int64_t i, double pre) {
    switch (t.dtype()) {
      case DType::kF32:
        return static_cast<float>(t.data_as<float>()[i] * static_cast<float>(pre));
      case DType::kF16:
        return kernels::decompress_f16(t.data_as<uint16_t>()[i]) * static_cast<float>(pre);
      case DType::kBF16:
        return kernels::bf16_to_float(t.data_as<uint16_t>()[i]) * static_cast<float>(pre);
      case DType::kF64:
        return t.data_as<double>()[i] * pre;
      case DType::kI64:
        return static_cast<double>(t.data_as<int64_t>()[i]);
      default:
        throw std::runtime_error("unsupported dtype");
    }
  }
  static void store(Tensor& t, int64_t i, double v) {
    switch (t.dtype()) {
      case DType::kF32:
        t.data_as<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF16:
        t.data_as<uint16_t>()[i] = kernels::compress_f16(static_cast<float>(v));
        break;
      case DType::kBF16:
        t.data_as<uint16_t>()[i] = kernels::float_to_bf16(static_cast<float>(v));
        break;
      case DType::kF64:
        t.data_as<double>()[i] = v;
        break;
      case DType::kI64:
        t.data_as<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      default:
        throw std::runtime_error("unsupported dtype");
    }
  }

  ThreadGroup& g_;
  int rank_;
  std::vector<Posted> pending_;
};

// Runs fn(rank, collectives) on n threads; rethrows the first exception.
inline void run_ranks(int n, const std::function<void(int, ThreadCollectives&)>& fn) {
  ThreadGroup g(n);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadCollectives c(g, r);
      try {
        fn(r, c);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace cohort::testing
