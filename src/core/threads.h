// The thread budget (a rank's cores divided among the ranks that share them), a small
// fixed thread pool, and the CPU time of threads. Nothing in cohort spins: idle workers
// sleep on a condition variable.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort {

// Cores this process may run on (its CPU affinity mask), at least 1.
int available_cores();

// Threads one rank may use: `requested` when > 0, else available_cores() divided among
// the ranks that share those cores (this one included), at least 1.
int thread_budget(int ranks_sharing, int requested);

// How many of `masks` (the CPU affinity masks of a node's ranks) share a CPU with
// masks[me], that one included: every local rank when the ranks may run anywhere, 1 when
// the launcher bound each rank to cores of its own.
int ranks_sharing_cpus(const std::vector<cpu_set_t>& masks, size_t me);

// CPU seconds used so far: by every thread of this process, by the calling thread, and
// by `thread`, a thread of this process that has not exited (0 when its clock cannot be
// read).
double process_cpu_seconds();
double thread_cpu_seconds();
double thread_cpu_seconds(pthread_t thread);

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  void submit(std::function<void()> task);
  // Runs fn(i) for i in [0, n) on the pool and the calling thread; rethrows the first
  // exception after every index has run.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace cohort
