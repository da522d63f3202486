// compute_threads bounds every oneDNN primitive, not only those created after the
// first step: oneDNN fixes a primitive's team size when it creates it, so a backend
// asked for one thread must start no OpenMP workers even where the default is more.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "graph/graph.h"
#include "models/zoo.h"
#include "support/host_views.h"

namespace {

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(CpuThreads, OneComputeThreadStartsNoOpenMpWorkers) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (std::thread::hardware_concurrency() < 2 || (env && std::string(env) == "1"))
    GTEST_SKIP() << "OpenMP would use one thread anyway: nothing to check";
  auto g = cohort::build_model("mnist_cnn", {});
  g->materialize(1);
  g->set_backend(cohort::backend::make_cpu_backend(1));
  const size_t before = thread_count();
  const int batch = 32;
  std::vector<float> x(static_cast<size_t>(batch) * 28 * 28, 0.5f);
  std::vector<int32_t> y(static_cast<size_t>(batch), 3);
  for (int step = 0; step < 2; ++step) {
    g->forward_train(cohort::test::batch_view(x, *g, batch, cohort::Layout::kNCHW), cohort::Layout::kNCHW,
                     cohort::test::labels_view(y, batch));
    g->backward();
  }
  EXPECT_EQ(thread_count(), before) << "a one-thread backend started OpenMP worker threads";
}

}  // namespace
