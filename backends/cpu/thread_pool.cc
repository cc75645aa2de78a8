// A persistent CPU thread pool with dynamically scheduled parallel_for.
#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "backends/cpu/cpu_info.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tokamax::cpu {
namespace {

// True while this thread runs a task of some parallel_for: a nested parallel_for then runs
// serially instead of waiting for workers that are busy running the outer loop.
thread_local bool t_in_task = false;

// How long a worker keeps polling for the next loop before it sleeps, and how long a caller
// polls for the last worker before it sleeps. Back-to-back kernel calls (a benchmark, the
// layers of a model) arrive within microseconds; a futex wake-up of a sleeping thread costs
// 5-50 us (more in VMs), which would dominate calls of ~100 us. Short enough that an idle pool
// gives its cores back almost at once.
constexpr auto kSpin = std::chrono::microseconds(200);

constexpr int kThreadBits = 16;
constexpr uint64_t kThreadMask = (uint64_t{1} << kThreadBits) - 1;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done()` for up to kSpin; true if it became true.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

// One parallel_for call, shared by the caller and the participating workers. It lives on the
// caller's stack, which outlives every participant's use of it (the caller waits for them).
struct ThreadPool::Job {
  const TaskFn* fn = nullptr;
  int64_t num_tasks = 0;
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
    stop_.store(true);
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
    // before the job was published (release/acquire on state_), and its results are read after
    // the caller observes remaining_ == 0 (acq_rel).
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

uint64_t ThreadPool::wait_for_job(uint64_t seen) {
  auto posted = [&] { return stop_.load() || state_.load() != seen; };
  if (!spin_until(posted)) {
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1);
    // seq_cst on sleepers_ and state_: a poster either sees this sleeper and notifies (under
    // the mutex, so after this wait began) or posted before the predicate below reads state_.
    wake_.wait(lock, posted);
    sleepers_.fetch_sub(1);
  }
  return state_.load();
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  while (true) {
    const uint64_t state = wait_for_job(seen);
    if (stop_.load()) return;
    seen = state;
    // A worker beyond the loop's thread count goes back to waiting without touching the job:
    // the caller does not wait for non-participants, so the job may already be gone. A
    // participant cannot miss its job: the next one is posted only after all participants of
    // this one checked out, so job_ still holds it.
    if (static_cast<int>(state & kThreadMask) <= id) continue;
    Job* job = job_.load(std::memory_order_acquire);
    run_tasks(*job, id);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may have stopped spinning: wake it under the mutex (no lost wake-up).
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_all();
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
  remaining_.store(threads - 1);
  job_.store(&job, std::memory_order_release);
  const uint64_t generation = (state_.load() >> kThreadBits) + 1;
  state_.store((generation << kThreadBits) | static_cast<uint64_t>(threads));
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  run_tasks(job, 0);
  auto finished = [&] { return remaining_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  if (job.error) std::rethrow_exception(job.error);
}

ThreadPool& thread_pool() {
  static ThreadPool pool(host_cpu().cores);
  return pool;
}

void parallel_for(int64_t num_tasks, int num_threads, const TaskFn& fn) {
  thread_pool().parallel_for(num_tasks, num_threads, fn);
}

}  // namespace tokamax::cpu
