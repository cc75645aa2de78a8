// Tests for the cpu ragged_dot work list: exact coverage, group boundaries, tile counts.
#include "ops/ragged_dot/cpu_tiling.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/errors.h"

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
    int64_t M, K, N, tm, tn, tk;
  };
  const std::vector<Case> cases = {
      {{0, 7, 13, 33}, 64, 32, 48, 16, 16, 8},  // empty group, odd sizes, rows past the sum
      {{37}, 37, 19, 23, 8, 8, 4},              // one group, partial tiles in M and N
      {{7, 0, 13}, 20, 1, 16, 64, 256, 256},    // tiles larger than everything
      {{0, 0}, 9, 8, 8, 4, 8, 8},               // no rows at all: only zeroing
      {{1, 1, 1}, 3, 5, 9, 1, 8, 1},            // one-row groups, tm = 1
      {{5, 6}, 11, 4, 0, 4, 8, 2},              // N = 0: nothing to write
  };
  for (const Case& c : cases) {
    const std::vector<int64_t> starts = starts_of(c.sizes);
    const RaggedDotWorkList work =
        make_ragged_dot_work_list(starts, c.M, c.K, c.N, c.tm, c.tn, c.tk);
    CAPTURE(c.M, c.N, c.tm, c.tn);
    CHECK(work.nm == count_m_tiles(c.sizes, c.tm));
    CHECK(work.nn == (c.N + c.tn - 1) / c.tn);
    CHECK(work.nk == (c.K + c.tk - 1) / c.tk);
    CHECK(static_cast<int64_t>(work.tasks.size()) == work.nm * work.nn + work.num_zero_tasks);

    std::vector<int> covered(static_cast<size_t>(c.M * c.N), 0);
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
        // Never an empty group, never straddling a group boundary.
        REQUIRE(task.group >= 0);
        REQUIRE(task.group < static_cast<int64_t>(c.sizes.size()));
        CHECK(c.sizes[task.group] > 0);
        CHECK(task.m_start >= starts[task.group]);
        CHECK(task.m_end <= starts[task.group + 1]);
        CHECK(task.n_end - task.n_start <= c.tn);
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

TEST_CASE("cpu ragged_dot work list orders tasks by group, then N tile", "[ragged_dot]") {
  const std::vector<int64_t> starts = starts_of({5, 0, 3});
  const RaggedDotWorkList work = make_ragged_dot_work_list(starts, 10, 4, 16, 4, 8, 4);
  const std::vector<RaggedDotTask> expected = {
      {0, 0, 4, 0, 8},
      {0, 4, 5, 0, 8},
      {0, 0, 4, 8, 16},
      {0, 4, 5, 8, 16},
      {2, 5, 8, 0, 8},
      {2, 5, 8, 8, 16},
      {kZeroRowsTask, 8, 10, 0, 16},
  };
  CHECK(work.tasks == expected);
  CHECK(work.nm == 3);
  CHECK(work.num_zero_tasks == 1);
}

TEST_CASE("cpu ragged_dot work list rejects bad tiles", "[ragged_dot]") {
  const std::vector<int64_t> starts = starts_of({4});
  CHECK_THROWS_AS(make_ragged_dot_work_list(starts, 4, 4, 4, 0, 8, 4), InvalidArgument);
  CHECK_THROWS_AS(make_ragged_dot_work_list(starts, 3, 4, 4, 4, 8, 4), InvalidArgument);
  CHECK(count_m_tiles(std::vector<int64_t>{0, 1, 16, 17}, 16) == 0 + 1 + 1 + 2);
}
