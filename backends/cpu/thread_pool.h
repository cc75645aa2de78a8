// A persistent CPU thread pool with dynamically scheduled parallel_for.
#pragma once

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

// `size` threads in all: the caller of parallel_for is thread 0 and `size - 1` workers sleep on a
// condition variable between loops (no busy spinning while idle).
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

  const int size_;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;          // one loop at a time; concurrent callers queue here
  std::mutex mutex_;              // guards the fields below
  std::condition_variable wake_;  // workers: a new job or stop
  std::condition_variable done_;  // caller: the last participating worker finished
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_workers_ = 0;
  bool stop_ = false;
};

// The process-wide pool, sized to host_device().cores and created on first use.
ThreadPool& thread_pool();

// parallel_for on the process-wide pool.
void parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn);

}  // namespace tokamax::cpu
