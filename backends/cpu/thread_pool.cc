// A persistent CPU thread pool with dynamically scheduled parallel_for.
#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "backends/cpu/cpu_info.h"

namespace tokamax::cpu {
namespace {

// True while this thread runs a task of some parallel_for: a nested parallel_for then runs
// serially instead of waiting for workers that are busy running the outer loop.
thread_local bool t_in_task = false;

}  // namespace

// One parallel_for call, shared by the caller and the participating workers. It lives on the
// caller's stack, which outlives every participant's use of it (the caller waits for them).
struct ThreadPool::Job {
  const TaskFn* fn = nullptr;
  int64_t num_tasks = 0;
  int threads = 1;               // participants: the caller (thread 0) and workers 1..threads-1
  std::atomic<int64_t> next{0};  // the next task to hand out
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception a task threw
};

ThreadPool::ThreadPool(int size) : size_(std::max(1, size)) {
  workers_.reserve(static_cast<size_t>(size_ - 1));
  for (int id = 1; id < size_; ++id) workers_.emplace_back([this, id] { worker_loop(id); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

int ThreadPool::threads_for(int64_t num_tasks, int num_threads) const {
  const int64_t wanted = num_threads <= 0 ? size_ : std::min(num_threads, size_);
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, num_tasks)));
}

void ThreadPool::run_tasks(Job& job, int thread) {
  const bool was_in_task = t_in_task;
  t_in_task = true;
  while (true) {
    // Relaxed is enough: the counter only hands out indices; the data a task reads was written
    // before the job was published (under mutex_), and its results are read after the join.
    const int64_t task = job.next.fetch_add(1, std::memory_order_relaxed);
    if (task >= job.num_tasks) break;
    try {
      (*job.fn)(task, thread);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
      // Skip the tasks nobody has started: the loop has failed anyway.
      job.next.store(job.num_tasks, std::memory_order_relaxed);
    }
  }
  t_in_task = was_in_task;
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      // A worker beyond the loop's thread count sleeps again. Decide that under the lock: the
      // caller does not wait for non-participants, so once unlocked the job may be gone. A
      // participant cannot miss its job: the next one is posted only after all participants
      // checked out of this one.
      if (job_ == nullptr || id >= job_->threads) continue;
      job = job_;
    }
    run_tasks(*job, id);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_workers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn) {
  if (num_tasks <= 0) return;
  const int threads = threads_for(num_tasks, num_threads);
  if (threads == 1 || t_in_task) {
    for (int64_t task = 0; task < num_tasks; ++task) fn(task, 0);
    return;
  }
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  Job job;
  job.fn = &fn;
  job.num_tasks = num_tasks;
  job.threads = threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    ++generation_;
    active_workers_ = threads - 1;
  }
  wake_.notify_all();
  run_tasks(job, 0);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_workers_ == 0; });
    job_ = nullptr;
  }
  if (job.error) std::rethrow_exception(job.error);
}

ThreadPool& thread_pool() {
  static ThreadPool pool(host_device().cores);
  return pool;
}

void parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn) {
  thread_pool().parallel_for(num_tasks, num_threads, fn);
}

}  // namespace tokamax::cpu
