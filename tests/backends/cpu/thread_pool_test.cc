// Tests for the CPU thread pool: every task once, thread indices, exceptions, nesting.
#include "backends/cpu/thread_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace tokamax::cpu;

namespace {

// Runs num_tasks tasks and checks each ran exactly once on a valid thread index.
void check_runs_each_task_once(ThreadPool& pool, int64_t num_tasks, int num_threads) {
  CAPTURE(num_tasks, num_threads, pool.size());
  std::vector<std::atomic<int>> runs(static_cast<size_t>(num_tasks));
  const int threads = pool.threads_for(num_tasks, num_threads);
  std::atomic<int> bad_thread{0};
  pool.parallel_for(num_tasks, num_threads, [&](int64_t task, int thread) {
    runs[static_cast<size_t>(task)].fetch_add(1);
    if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
  });
  CHECK(bad_thread.load() == 0);
  for (int64_t t = 0; t < num_tasks; ++t) REQUIRE(runs[static_cast<size_t>(t)].load() == 1);
}

}  // namespace

TEST_CASE("thread pool runs every task exactly once", "[thread_pool]") {
  ThreadPool pool(4);
  CHECK(pool.size() == 4);
  for (int64_t num_tasks : {0, 1, 3, 4, 17, 1000}) {
    for (int num_threads : {0, 1, 2, 4, 9}) check_runs_each_task_once(pool, num_tasks, num_threads);
  }
  CHECK(pool.threads_for(1000, 0) == 4);
  CHECK(pool.threads_for(1000, 9) == 4);
  CHECK(pool.threads_for(2, 0) == 2);
  CHECK(pool.threads_for(1000, 1) == 1);
  // The process-wide pool, sized to the host.
  check_runs_each_task_once(thread_pool(), 257, 0);
  ThreadPool single(1);
  check_runs_each_task_once(single, 10, 0);
}

TEST_CASE("thread pool rethrows a task's exception in the caller", "[thread_pool]") {
  ThreadPool pool(3);
  for (int num_threads : {1, 3}) {
    CHECK_THROWS_WITH(pool.parallel_for(100, num_threads,
                                        [](int64_t task, int) {
                                          if (task == 42) throw std::runtime_error("task 42");
                                        }),
                      "task 42");
  }
  // The pool stays usable afterwards.
  check_runs_each_task_once(pool, 50, 0);
}

TEST_CASE("thread pool runs nested loops and concurrent callers without deadlock",
          "[thread_pool]") {
  ThreadPool pool(4);
  // Catch assertions are not thread-safe: tasks only count, the caller checks.
  std::atomic<int64_t> sum{0};
  std::atomic<int> nested_off_thread_0{0};
  pool.parallel_for(8, 0, [&](int64_t outer, int) {
    pool.parallel_for(8, 0, [&](int64_t inner, int thread) {
      if (thread != 0) nested_off_thread_0.fetch_add(1);  // nested loops run serially
      sum.fetch_add(outer * 8 + inner);
    });
  });
  CHECK(sum.load() == 64 * 63 / 2);
  CHECK(nested_off_thread_0.load() == 0);

  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  callers.reserve(3);
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        pool.parallel_for(100, 0, [&](int64_t, int) { total.fetch_add(1); });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  CHECK(total.load() == 6000);  // 3 callers x 20 loops x 100 tasks
}
