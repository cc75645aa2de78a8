// Tests for the cpu ragged_dot tiling math: work list coverage and order, shapes, scratch sizes.
#include "ops/ragged_dot/cpu_tiling.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/errors.h"

using namespace tokamax;

namespace {

std::vector<int64_t> starts_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> starts = {0};
  for (int64_t size : sizes) starts.push_back(starts.back() + size);
  return starts;
}

}  // namespace

TEST_CASE("cpu ragged_dot work list covers every output element exactly once", "[ragged_dot]") {
  struct Case {
    std::vector<int64_t> sizes;
    int64_t M, K, N, tm, tn, tk, task_n;
  };
  const std::vector<Case> cases = {
      {{0, 7, 13, 33}, 64, 32, 48, 16, 16, 8, 0},   // empty group, odd sizes, rows past the sum
      {{0, 7, 13, 33}, 64, 32, 48, 16, 16, 8, 16},  // ... with one panel per task
      {{37}, 37, 19, 23, 8, 8, 4, 0},               // one group, partial tiles in M and N
      {{37}, 37, 19, 23, 8, 8, 4, 9},               // task_n rounded up to whole panels
      {{7, 0, 13}, 20, 1, 16, 64, 256, 256, 0},     // tiles larger than everything
      {{0, 0}, 9, 8, 8, 4, 8, 8, 0},                // no rows at all: only zeroing
      {{1, 1, 1}, 3, 5, 9, 1, 8, 1, 8},             // one-row groups, tm = 1
      {{5, 6}, 11, 4, 0, 4, 8, 2, 0},               // N = 0: nothing to write
      {{100, 3, 40}, 150, 9, 100, 32, 32, 4, 64},   // skewed groups, several column ranges
  };
  for (const Case& c : cases) {
    const std::vector<int64_t> starts = starts_of(c.sizes);
    const RaggedDotWorkList work =
        make_ragged_dot_work_list(starts, c.M, c.K, c.N, c.tm, c.tn, c.tk, c.task_n);
    CAPTURE(c.M, c.N, c.tm, c.tn, c.task_n);
    CHECK(work.task_n % c.tn == 0);
    CHECK(work.nm == count_m_tiles(c.sizes, c.tm));
    CHECK(work.nn == (c.N + work.task_n - 1) / work.task_n);
    CHECK(work.nk == (c.K + c.tk - 1) / c.tk);
    CHECK(static_cast<int64_t>(work.tasks.size()) == work.nm * work.nn + work.num_zero_tasks);

    std::vector<int> covered(static_cast<size_t>(c.M * c.N), 0);
    int64_t previous_area = INT64_MAX;
    for (size_t t = 0; t < work.tasks.size(); ++t) {
      const RaggedDotTask& task = work.tasks[t];
      CAPTURE(t, task.group, task.m_start, task.m_end, task.n_start, task.n_end);
      REQUIRE(task.m_start < task.m_end);
      REQUIRE(task.n_start < task.n_end);
      REQUIRE(task.m_end - task.m_start <= c.tm);
      REQUIRE(task.n_end <= c.N);
      if (task.group == kZeroRowsTask) {
        CHECK(task.m_start >= starts.back());
        CHECK(t >= work.tasks.size() - static_cast<size_t>(work.num_zero_tasks));
      } else {
        // Never an empty group, never straddling a group boundary; columns start on a panel.
        REQUIRE(task.group >= 0);
        REQUIRE(task.group < static_cast<int64_t>(c.sizes.size()));
        CHECK(c.sizes[task.group] > 0);
        CHECK(task.m_start >= starts[task.group]);
        CHECK(task.m_end <= starts[task.group + 1]);
        CHECK(task.n_end - task.n_start <= work.task_n);
        CHECK(task.n_start % work.task_n == 0);
        // Largest first, so skewed groups balance under dynamic scheduling.
        const int64_t area = (task.m_end - task.m_start) * (task.n_end - task.n_start);
        CHECK(area <= previous_area);
        previous_area = area;
      }
      for (int64_t m = task.m_start; m < task.m_end; ++m) {
        for (int64_t n = task.n_start; n < task.n_end; ++n) ++covered[m * c.N + n];
      }
    }
    for (size_t i = 0; i < covered.size(); ++i) {
      CAPTURE(i);
      REQUIRE(covered[i] == 1);
    }
  }
}

TEST_CASE("cpu ragged_dot work list orders tasks largest first, then by group", "[ragged_dot]") {
  const std::vector<int64_t> starts = starts_of({5, 0, 3});
  const RaggedDotWorkList all_n = make_ragged_dot_work_list(starts, 10, 4, 16, 4, 8, 4);
  CHECK(all_n.task_n == 16);
  CHECK(all_n.tasks ==
        std::vector<RaggedDotTask>{
            {0, 0, 4, 0, 16}, {2, 5, 8, 0, 16}, {0, 4, 5, 0, 16}, {kZeroRowsTask, 8, 10, 0, 16}});
  const RaggedDotWorkList split = make_ragged_dot_work_list(starts, 10, 4, 16, 4, 8, 4, 8);
  CHECK(split.tasks == std::vector<RaggedDotTask>{{0, 0, 4, 0, 8},
                                                  {0, 0, 4, 8, 16},
                                                  {2, 5, 8, 0, 8},
                                                  {2, 5, 8, 8, 16},
                                                  {0, 4, 5, 0, 8},
                                                  {0, 4, 5, 8, 16},
                                                  {kZeroRowsTask, 8, 10, 0, 16}});
  CHECK(split.nm == 3);
  CHECK(split.nn == 2);
  CHECK(split.num_zero_tasks == 1);
}

TEST_CASE("cpu ragged_dot work list rejects bad tiles", "[ragged_dot]") {
  const std::vector<int64_t> starts = starts_of({4});
  CHECK_THROWS_AS(make_ragged_dot_work_list(starts, 4, 4, 4, 0, 8, 4), InvalidArgument);
  CHECK_THROWS_AS(make_ragged_dot_work_list(starts, 3, 4, 4, 4, 8, 4), InvalidArgument);
  CHECK(count_m_tiles(std::vector<int64_t>{0, 1, 16, 17}, 16) == 0 + 1 + 1 + 2);
}

TEST_CASE("cpu ragged_dot micro-kernel shapes fit the register file", "[ragged_dot]") {
  // lanes -> vector registers of the ISA that has that width.
  for (const auto& [lanes, registers] :
       std::vector<std::pair<int, int>>{{16, 32}, {8, 16}, {4, 16}, {1, 16}}) {
    const auto shapes = micro_kernel_shapes(lanes);
    REQUIRE_FALSE(shapes.empty());
    for (const MicroKernelShape& s : shapes) {
      CAPTURE(lanes, s.mr, s.nr_vectors);
      // Accumulators + rhs vectors + one broadcast.
      CHECK(s.mr * s.nr_vectors + s.nr_vectors + 1 <= registers);
      // At least 8 independent FMA chains (2 pipes x 4 cycles latency) where vectors exist.
      if (lanes > 1) CHECK(s.mr * s.nr_vectors >= 8);
      CHECK(has_micro_kernel_shape(lanes, s.mr, s.nr_vectors));
    }
  }
  CHECK_FALSE(has_micro_kernel_shape(16, 13, 2));
  CHECK(micro_kernel_shapes(16)[0] == MicroKernelShape{14, 2});
}

TEST_CASE("cpu ragged_dot padding and scratch arithmetic", "[ragged_dot]") {
  CHECK(ceil_div(7, 3) == 3);
  CHECK(round_up(7, 3) == 9);
  CHECK(round_up(0, 3) == 0);
  // Groups 0, 7, 13, 33 padded to 14-row micro-panels: 0 + 14 + 14 + 42.
  CHECK(padded_rows(std::vector<int64_t>{0, 7, 13, 33}, 14) == 70);
  CHECK(padded_rows(std::vector<int64_t>{0, 7, 13, 33}, 1) == 53);

  const std::vector<int64_t> starts = starts_of({33});
  const RaggedDotWorkList work = make_ragged_dot_work_list(starts, 33, 100, 70, 33, 64, 40, 0);
  const TaskScratch with_acc = task_scratch(work, 14, 32, true);
  CHECK(with_acc.lhs_block == 1680);  // 33 rows padded to 3 micro-panels of 14, x tk = 40
  CHECK(with_acc.rhs_panel == 2560);  // tn = 64 (two strips of 32) x tk = 40
  CHECK(with_acc.acc == 4224);        // 33 rows x all of N in one task (70 -> two panels of 64)
  CHECK(task_scratch(work, 14, 32, false).acc == 0);
}

TEST_CASE("cpu ragged_dot schedule efficiency models largest-first dynamic scheduling",
          "[ragged_dot]") {
  const std::vector<int64_t> one_group = {2048};
  // One task for two threads: half the machine idles; split rows or columns: balanced.
  CHECK(schedule_efficiency(one_group, 2048, 2048, 0, 2) == Approx(0.5));
  CHECK(schedule_efficiency(one_group, 2048, 1024, 0, 2) == Approx(1.0));
  CHECK(schedule_efficiency(one_group, 2048, 2048, 1024, 2) == Approx(1.0));
  // Three equal tasks on two threads: 3 units of work, the busiest thread does 2.
  CHECK(schedule_efficiency(std::vector<int64_t>{10, 10, 10}, 64, 10, 0, 2) == Approx(0.75));
  // Costs 5, 3, 3, 1 (x N): largest first puts 5 | 3, then 3 on the second thread (6), then 1
  // on the first (6): perfectly balanced.
  CHECK(schedule_efficiency(std::vector<int64_t>{3, 1, 5, 3}, 8, 8, 0, 2) == Approx(1.0));
  // One thread, no rows, or no columns: nothing to balance.
  CHECK(schedule_efficiency(one_group, 2048, 16, 0, 1) == Approx(1.0));
  CHECK(schedule_efficiency(std::vector<int64_t>{0, 0}, 64, 16, 0, 4) == Approx(1.0));
}
