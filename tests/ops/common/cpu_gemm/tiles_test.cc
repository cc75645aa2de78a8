// Tests for cpu_gemm_tiles: every tile of every product against a double-precision product, with
// the shared operands packed in waves of every size, summed and separate products, and the
// epilogue run once per tile after its products.
#include "ops/common/cpu_gemm/tiles.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "ops/framework/random.h"

using namespace tokamax;

namespace {

struct Case {
  int64_t M, N, K;
  int64_t tm, tn;
  int products;
  bool sum_products, same_a, a_transposed;
};

void check_case(const Case& t, int64_t wave_bytes) {
  CAPTURE(t.M, t.N, t.K, t.tm, t.tn, t.products, t.sum_products, t.same_a, t.a_transposed,
          wave_bytes);
  // A_p [M, K] (stored transposed [K, M] when a_transposed), B_p [K, N], f32, random in [-1, 1].
  const int P = t.products;
  std::vector<std::vector<float>> a(P), b(P);
  uint64_t counter = 0;
  // (At least one row of K: with K = 0 the operands still point into storage.)
  const int64_t depth = std::max<int64_t>(t.K, 1);
  for (int p = 0; p < P; ++p) {
    a[p].resize(static_cast<size_t>(t.M * depth));
    b[p].resize(static_cast<size_t>(depth * t.N));
    for (float& x : a[p]) x = static_cast<float>(uniform01(3, p, counter++) * 2 - 1);
    for (float& x : b[p]) x = static_cast<float>(uniform01(4, p, counter++) * 2 - 1);
  }
  const int outputs = t.sum_products ? 1 : P;
  std::vector<std::vector<float>> c(outputs, std::vector<float>(t.M * t.N, std::nanf("")));
  GemmTileGrid grid;
  grid.rows = gemm_spans(t.M, t.tm);
  grid.cols = gemm_spans(t.N, t.tn);
  grid.K = t.K;
  grid.products = P;
  grid.sum_products = t.sum_products;
  grid.same_a = t.same_a;
  grid.num_threads = 2;
  const int64_t nm = static_cast<int64_t>(grid.rows.size());
  const int64_t nn = static_cast<int64_t>(grid.cols.size());
  // Counted on the pool's threads (Catch's assertions are not thread-safe): epilogue calls per
  // tile, and epilogues that found their tile unwritten.
  std::vector<std::atomic<int>> epilogues(static_cast<size_t>(nm * nn));
  std::atomic<int> early{0};
  cpu_gemm_tiles(
      grid,
      [&](int64_t i, int p) {
        const float* base = a[t.same_a ? 0 : p].data();
        const int64_t m0 = grid.rows[i].begin;
        return t.a_transposed ? GemmOperand{DType::kF32, base + m0, t.M, true}
                              : GemmOperand{DType::kF32, base + m0 * t.K, t.K, false};
      },
      [&](int64_t j, int p) {
        return GemmOperand{DType::kF32, b[p].data() + grid.cols[j].begin, t.N, false};
      },
      [&](int64_t i, int64_t j, int p) {
        return GemmOut{c[p].data() + grid.rows[i].begin * t.N + grid.cols[j].begin, t.N};
      },
      [&](int64_t i, int64_t j) {
        // The tile's products are done: its last element is written (the outputs start NaN).
        for (int o = 0; o < outputs; ++o) {
          const GemmSpan r = grid.rows[i], col = grid.cols[j];
          const float last = c[o][(r.begin + r.extent - 1) * t.N + col.begin + col.extent - 1];
          if (!std::isfinite(last)) ++early;
        }
        ++epilogues[static_cast<size_t>(i * nn + j)];
      },
      wave_bytes);
  for (const std::atomic<int>& e : epilogues) REQUIRE(e == 1);
  REQUIRE(early == 0);
  for (int o = 0; o < outputs; ++o) {
    for (int64_t m = 0; m < t.M; ++m) {
      for (int64_t n = 0; n < t.N; ++n) {
        double want = 0.0, scale = 0.0;
        for (int p = 0; p < P; ++p) {
          if (!t.sum_products && p != o) continue;
          const std::vector<float>& ap = a[t.same_a ? 0 : p];
          for (int64_t k = 0; k < t.K; ++k) {
            const double x = t.a_transposed ? ap[k * t.M + m] : ap[m * t.K + k];
            want += x * b[p][k * t.N + n];
            scale += std::fabs(x * b[p][k * t.N + n]);
          }
        }
        CAPTURE(o, m, n);
        REQUIRE(std::fabs(c[o][m * t.N + n] - want) <= 1e-5 * scale + 1e-30);
      }
    }
  }
}

}  // namespace

TEST_CASE("cpu_gemm_tiles computes every tile of every product, shared operands in waves",
          "[cpu_gemm]") {
  // Several row and column tiles (both sides shared), one row tile (B unshared) and one column
  // tile (A unshared); uneven last tiles; summed products with distinct A (the GLU backward's dx),
  // separate products with one A (the GLU forward's gate and projection); A read transposed (its
  // dW); K = 0 (zeros). wave_bytes 1: one tile per wave on each side; the default: all at once.
  const std::vector<Case> cases = {
      {37, 50, 29, 8, 16, 1, false, false, false},
      {37, 50, 29, 8, 16, 2, true, false, false},
      {37, 50, 29, 8, 16, 2, false, true, false},
      {40, 21, 33, 40, 8, 2, false, true, true},
      {13, 70, 300, 5, 70, 2, true, false, true},
      {9, 11, 0, 4, 4, 2, true, false, false},
  };
  for (const Case& t : cases) {
    for (const int64_t wave_bytes : {int64_t{1}, kGemmTilesWaveBytes}) check_case(t, wave_bytes);
  }
}

TEST_CASE("gemm_spans cuts an extent into tiles", "[cpu_gemm]") {
  const std::vector<GemmSpan> spans = gemm_spans(10, 4);
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].begin == 0);
  CHECK(spans[1].begin == 4);
  CHECK(spans[2].begin == 8);
  CHECK(spans[2].extent == 2);
  CHECK(gemm_spans(0, 4).empty());
}

TEST_CASE("pack_gemm_operands packs operands of different sizes as pack_gemm_* does, skips empty",
          "[cpu_gemm]") {
  // Three B operands [K, N] of different depths and widths (several pieces each, one with a
  // short K block and a partial panel), an empty slot between them and one A operand [N, K],
  // on the pool, into storage that starts empty.
  CpuGemmOptions options;
  options.tk = 16;
  options.tn = 64;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {37, 100}, {0, 0}, {5, 7}, {64, 130}, {41, 29}};
  const int64_t count = static_cast<int64_t>(shapes.size());
  std::vector<std::vector<float>> sources(static_cast<size_t>(count));
  std::vector<GemmPackStorage> storage, want(sources.size());
  std::vector<GemmPackRequest> requests(sources.size());
  uint64_t counter = 0;
  for (int64_t k = 0; k < count; ++k) {
    const auto [K, N] = shapes[static_cast<size_t>(k)];
    auto& source = sources[static_cast<size_t>(k)];
    source.resize(static_cast<size_t>(K * N));
    for (float& x : source) x = static_cast<float>(uniform01(3, 4, counter++));
    if (K == 0) continue;  // the slot stays empty: nothing to pack
    const bool is_lhs = k == count - 1;  // the last one is A [N, K], row stride K
    const GemmOperand operand{DType::kF32, source.data(), is_lhs ? K : N, false};
    if (is_lhs) {
      pack_gemm_lhs(operand, N, K, options, want[static_cast<size_t>(k)]);
    } else {
      pack_gemm_rhs(operand, K, N, options, want[static_cast<size_t>(k)]);
    }
    requests[static_cast<size_t>(k)] = {operand, is_lhs, N, K};
  }
  const std::vector<PackedGemmOperand> packed = pack_gemm_operands(requests, options, 0, storage);
  REQUIRE(packed.size() == requests.size());
  REQUIRE(storage.size() == requests.size());
  CHECK(packed[1].data == nullptr);
  for (int64_t k = 0; k < count; ++k) {
    CAPTURE(k);
    CHECK(storage[static_cast<size_t>(k)] == want[static_cast<size_t>(k)]);
  }
}
