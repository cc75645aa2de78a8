// Tests for the index math of ragged_dot's CUDA setup kernel (ops/ragged_dot/cuda_setup.h), on
// the CPU, against a brute-force model: which group each output row belongs to, and where.
#include "ops/ragged_dot/cuda_setup.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

using namespace tokamax::ragged_cuda;

namespace {

// The setup kernel's loop, as it runs on the device.
std::vector<GroupProblem> tables(const std::vector<int32_t>& sizes, int64_t M, int K, int N,
                                 int64_t* rows) {
  std::vector<GroupProblem> out;
  int64_t start = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    out.push_back(group_problem(static_cast<int>(g), start, sizes[g], M, K, N));
    start = next_start(start, out.back());
  }
  *rows = start;
  return out;
}

// Brute force: row r of out belongs to the group whose [begin, end) holds it, clipped to M.
void check_against_model(const std::vector<int32_t>& sizes, int64_t M, int K, int N) {
  int64_t rows = 0;
  const std::vector<GroupProblem> t = tables(sizes, M, K, N, &rows);
  std::vector<int> owner(static_cast<size_t>(M), -1);
  int64_t begin = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    const int64_t end = begin + std::max<int32_t>(sizes[g], 0);
    for (int64_t r = begin; r < end && r < M; ++r) owner[r] = static_cast<int>(g);
    begin = std::min(end, M);
  }
  int64_t covered = 0;
  for (size_t g = 0; g < t.size(); ++g) {
    CAPTURE(g, t[g].m, sizes[g]);
    CHECK(t[g].n == N);
    CHECK(t[g].k == K);
    CHECK(t[g].m >= 0);
    CHECK(t[g].rhs_offset == static_cast<int64_t>(g) * K * N);
    CHECK(t[g].lhs_offset % K == 0);
    CHECK(t[g].out_offset / N == t[g].lhs_offset / K);  // the same first row in lhs and out
    const int64_t first = t[g].out_offset / N;
    for (int64_t r = first; r < first + t[g].m; ++r) {
      REQUIRE(r < M);
      CHECK(owner[r] == static_cast<int>(g));
    }
    covered += t[g].m;
  }
  // Every row owned by a group is in exactly one problem; the rest is the zeroed tail.
  int64_t owned = 0;
  for (int o : owner) owned += o >= 0;
  CHECK(covered == owned);
  CHECK(rows == owned);
  CHECK(tail_begin(rows, N) == rows * N);
  CHECK(tail_end(M, N) == M * N);
}

}  // namespace

TEST_CASE("cuda setup tables match the brute-force model", "[ragged_dot][cuda]") {
  SECTION("plain, empty groups, all empty, rows past the sum") {
    check_against_model({10, 0, 9}, 24, 16, 8);
    check_against_model({0, 0, 0, 0}, 12, 8, 16);
    check_against_model({5, 5, 5}, 15, 8, 8);
    check_against_model({}, 4, 8, 8);
  }
  SECTION("sizes that run past M or are negative are cut, never written past out") {
    check_against_model({8, 8, 8}, 20, 8, 8);  // the last group keeps 4 rows
    check_against_model({-3, 5, 30}, 16, 8, 8);
    check_against_model({40}, 16, 8, 8);
  }
  SECTION("random routings") {
    std::mt19937 random(7);
    for (int trial = 0; trial < 200; ++trial) {
      const int G = 1 + static_cast<int>(random() % 64);
      const int64_t M = random() % 300;
      std::vector<int32_t> sizes(static_cast<size_t>(G));
      for (int32_t& s : sizes) s = random() % 4 == 0 ? 0 : static_cast<int32_t>(random() % 16);
      CAPTURE(trial, G, M);
      check_against_model(sizes, M, 8 * (1 + static_cast<int>(random() % 4)), 8);
    }
  }
}
