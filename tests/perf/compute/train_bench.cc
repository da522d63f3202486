// Training-step throughput of a zoo model on the CPU backend: forward, backward and a
// plain SGD update per step, synthetic data. Prints one line per timed step and a
// final "images/sec: MEDIAN CPU_MEDIAN" line (the second is images per second of
// process CPU time, steadier than wall time on a shared machine).
// Usage: train_bench MODEL BATCH THREADS STEPS [WARMUP [PRECISION [--profile] [--pointwise=MODE]]]
// (MODE: the option cpu_pointwise_backward, auto by default).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/zoo.h"
#include "support/host_views.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s MODEL BATCH THREADS STEPS [WARMUP [PRECISION [--profile] [--pointwise=auto|matmul|"
                 "convolution]]]\n",
                 argv[0]);
    return 2;
  }
  const int batch = std::atoi(argv[2]), threads = std::atoi(argv[3]), steps = std::atoi(argv[4]);
  const int warmup = argc > 5 ? std::atoi(argv[5]) : 1;
  const char* precision = argc > 6 ? argv[6] : "f32";
  bool profile = false;
  std::string pointwise = "auto";
  for (int i = 7; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
    } else if (a.rfind("--pointwise=", 0) == 0) {
      pointwise = a.substr(12);
    } else {
      std::fprintf(stderr, "%s: unknown argument '%s'; expected --profile or --pointwise=MODE\n", argv[0], argv[i]);
      return 2;
    }
  }
  try {
    auto g = cohort::build_model(argv[1], {});
    g->materialize(1);
    g->set_backend(cohort::backend::make_cpu_backend(threads));
    g->set_precision(cohort::backend::parse_precision(precision));
    g->set_pointwise_backward(cohort::backend::parse_pointwise_backward(pointwise));
    const cohort::Shape& in = g->shape(0);
    const int classes = static_cast<int>(g->shape(g->output_layer())[0]);
    std::vector<float> x(static_cast<size_t>(batch * in[0] * in[1] * in[2]));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) y[static_cast<size_t>(i)] = i % classes;
    auto cpu_now = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    std::vector<double> rates, cpu_rates;
    for (int s = 0; s < warmup + steps; ++s) {
      if (profile && s == warmup) g->set_profiling(true);
      auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_now();
      const float loss = g->forward_train(cohort::test::batch_view(x, *g, batch, cohort::Layout::kNCHW),
                                          cohort::Layout::kNCHW, cohort::test::labels_view(y, batch));
      g->backward();
      for (auto& p : g->params()) {
        float* w = p.value.data_as<float>();
        const float* d = p.grad.data_as<float>();
        for (int64_t i = 0; i < p.value.numel(); ++i) w[i] -= 1e-4f * d[i];
      }
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      g->record_step(dt, 0);
      const double dc = cpu_now() - c0;
      std::printf("step %d loss %.4f images/sec %.2f cpu %.2f%s\n", s, loss, batch / dt, batch / dc,
                  s < warmup ? " (warm-up)" : "");
      if (s >= warmup) {
        rates.push_back(batch / dt);
        cpu_rates.push_back(batch / dc);
      }
    }
    if (profile) std::printf("%s", cohort::format_profile(g->profile()).c_str());
    std::sort(rates.begin(), rates.end());
    std::sort(cpu_rates.begin(), cpu_rates.end());
    std::printf("images/sec: %.3f %.3f\n", rates[rates.size() / 2], cpu_rates[cpu_rates.size() / 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
