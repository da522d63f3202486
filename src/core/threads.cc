#include "core/threads.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <latch>

namespace cohort {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int thread_budget(int ranks_sharing, int requested) {
  if (requested > 0) return requested;
  return std::max(1, available_cores() / std::max(1, ranks_sharing));
}

int ranks_sharing_cpus(const std::vector<cpu_set_t>& masks, size_t me) {
  int sharing = 0;
  for (const cpu_set_t& m : masks) {
    cpu_set_t both;
    CPU_AND(&both, &m, &masks.at(me));
    sharing += CPU_COUNT(&both) > 0 ? 1 : 0;
  }
  return std::max(1, sharing);
}

namespace {

double clock_seconds(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

double process_cpu_seconds() { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

double thread_cpu_seconds() { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }

double thread_cpu_seconds(pthread_t thread) {
  clockid_t clock;
  if (pthread_getcpuclockid(thread, &clock) != 0) return 0;
  return clock_seconds(clock);
}

ThreadPool::ThreadPool(int threads) {
  workers_.reserve(static_cast<size_t>(std::max(0, threads)));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::work() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  size_t helpers = std::min(n - 1, workers_.size());
  std::latch done(static_cast<std::ptrdiff_t>(helpers));
  for (size_t h = 0; h < helpers; ++h)
    submit([&] {
      run();
      done.count_down();
    });
  run();
  done.wait();
  if (error) std::rethrow_exception(error);
}

}  // namespace cohort
