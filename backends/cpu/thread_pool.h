// A persistent CPU thread pool with dynamically scheduled parallel_for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tokamax::cpu {

// The body of a parallel loop: `task` in [0, num_tasks), `thread` in [0, threads used) so that a
// body can index per-thread scratch.
using TaskFn = std::function<void(int64_t task, int thread)>;

// `size` threads in all: the caller of parallel_for is thread 0 and `size - 1` workers wait
// between loops: they spin for a short while after each loop (kernels are often called back to
// back, and waking a sleeping thread costs tens of microseconds, more than a small kernel), then
// sleep on a condition variable (no busy spinning while idle).
class ThreadPool {
 public:
  explicit ThreadPool(int size);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // The number of threads parallel_for(num_tasks, num_threads, ...) will use.
  int threads_for(int64_t num_tasks, int num_threads) const;

  // Runs fn(task, thread) for every task in [0, num_tasks) on up to `num_threads` threads
  // (<= 0: all). Tasks are handed out one at a time from an atomic counter, so threads that drew
  // cheap tasks take more of them and skewed work balances. Returns when every task has
  // finished; the first exception a task throws is rethrown here (remaining tasks are skipped).
  // Runs serially on the caller for one thread, one task, or when called from inside a task
  // (nested loops cannot deadlock on the workers they occupy).
  void parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn);

 private:
  struct Job;
  void worker_loop(int id);
  static void run_tasks(Job& job, int thread);
  // Spins until `state_` differs from `seen` or the spin budget runs out; then sleeps on wake_.
  uint64_t wait_for_job(uint64_t seen);

  const int size_;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // one loop at a time; concurrent callers queue here
  // The posted loop: (generation << 16) | participating threads, published after job_ (release)
  // so that a worker reads both consistently; stop_ ends the workers.
  std::atomic<uint64_t> state_{0};
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> remaining_{0};  // participating workers still running the current loop
  std::atomic<int> sleepers_{0};   // workers blocked on wake_ (the poster notifies only then)
  std::atomic<bool> stop_{false};
  std::mutex mutex_;              // pairs with the condition variables
  std::condition_variable wake_;  // sleeping workers: a new job or stop
  std::condition_variable done_;  // a caller that stopped spinning: the last worker finished
};

// The process-wide pool, sized to host_cpu().cores and created on first use.
ThreadPool& thread_pool();

// parallel_for on the process-wide pool.
void parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn);

}  // namespace tokamax::cpu
