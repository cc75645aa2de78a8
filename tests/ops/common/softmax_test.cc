// Tests for the online softmax bookkeeping and the vectorized softmax row pieces.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/common/cpu_softmax.h"
#include "ops/common/online_softmax.h"

using namespace tokamax;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

TEST_CASE("OnlineSoftmax gives the log-sum-exp of a row streamed element by element or in blocks",
          "[softmax]") {
  const std::vector<double> row = {0.5, -3.0, 12.0, -kInf, 11.5, 700.0, 699.0};
  double max = -kInf;
  for (double x : row) max = std::max(max, x);
  double sum = 0;
  for (double x : row) sum += std::exp(x - max);
  const double want = max + std::log(sum);

  OnlineSoftmax<double> by_element;
  for (double x : row) by_element.add(x);
  CHECK(by_element.log_sum_exp() == Approx(want).epsilon(1e-15));

  // Blocks of 3, 2, 2, merged; the rescale factor is what an accumulated row needs.
  OnlineSoftmax<double> by_block;
  double weighted = 0;  // sum exp(x - running max) * x, rescaled as blocks arrive
  for (size_t start : {0u, 3u, 5u}) {
    const size_t end = start == 0 ? 3 : start + 2;
    double block_max = -kInf, block_sum = 0, block_weighted = 0;
    for (size_t i = start; i < end; ++i) block_max = std::max(block_max, row[i]);
    for (size_t i = start; i < end; ++i) {
      if (row[i] == -kInf) continue;
      block_sum += std::exp(row[i] - block_max);
      block_weighted += std::exp(row[i] - block_max) * row[i];
    }
    const double old_max = by_block.max;
    const double rescale = by_block.merge(block_max, block_sum);
    weighted =
        weighted * rescale + block_weighted * std::exp(block_max - std::max(old_max, block_max));
  }
  CHECK(by_block.log_sum_exp() == Approx(want).epsilon(1e-15));
  double want_weighted = 0;
  for (double x : row) {
    if (x != -kInf) want_weighted += std::exp(x - max) * x;
  }
  CHECK(weighted / by_block.sum == Approx(want_weighted / sum).epsilon(1e-13));
}

TEST_CASE("OnlineSoftmax of a fully masked row stays empty", "[softmax]") {
  OnlineSoftmax<float> s;
  s.add(-std::numeric_limits<float>::infinity());
  CHECK(s.merge(-std::numeric_limits<float>::infinity(), 0.0f) == 1.0f);
  CHECK(s.empty());
  CHECK(s.sum == 0.0f);
  CHECK(s.log_sum_exp() == -std::numeric_limits<float>::infinity());
}

TEST_CASE("cpu softmax rows: max, exp with shift and sum, masked entries, scale, soft cap",
          "[softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {0, 1, 7, 16, 37}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.7f * i) * 5.0f;
    if (n > 3) x[3] = -inf;
    float want_max = -inf;
    for (float v : x) want_max = std::max(want_max, v);
    CHECK(cpu_row_max(x.data(), n) == want_max);

    std::vector<float> e = x;
    const float sum = cpu_exp_shift_sum(e.data(), n, want_max);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = x[i] == -inf ? 0.0 : std::exp(double{x[i]} - want_max);
      REQUIRE(e[i] == Approx(want).epsilon(2e-6).margin(1e-30));
      want_sum += want;
    }
    CHECK(sum == Approx(want_sum).epsilon(1e-6));
    if (n > 3) CHECK(e[3] == 0.0f);

    std::vector<float> masked = x;
    CHECK(cpu_exp_shift_sum(masked.data(), n, -inf) == 0.0f);
    for (float v : masked) REQUIRE(v == 0.0f);

    std::vector<float> s = x;
    cpu_scale_row(s.data(), n, 0.5f);
    for (int64_t i = 0; i < n; ++i) REQUIRE(s[i] == x[i] * 0.5f);

    std::vector<float> capped = x;
    cpu_soft_cap_row(capped.data(), n, 3.0f);
    for (int64_t i = 0; i < n; ++i) {
      const double want = 3.0 * std::tanh(double{x[i]} / 3.0);
      REQUIRE(capped[i] == Approx(want).epsilon(1e-6).margin(1e-6));
    }
  }
}

TEST_CASE("cpu softmax backward rows: the row dot product and dp = p (dp - delta) (gate)",
          "[softmax]") {
  // Lengths below one vector, with whole vectors, pairs of vectors and a remainder.
  for (int64_t n : {0, 1, 7, 16, 37, 256}) {
    CAPTURE(n);
    std::vector<float> p(static_cast<size_t>(n)), dp(p.size()), gate(p.size());
    double dot = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      p[i] = 0.5f + 0.4f * std::sin(0.3f * i);
      dp[i] = 3.0f * std::cos(1.1f * i) - 0.5f;
      gate[i] = 1.0f - 0.1f * (i % 5);
      dot += double{p[i]} * dp[i];
      magnitude += std::abs(double{p[i]} * dp[i]);
    }
    CHECK(cpu_dot_row(p.data(), dp.data(), n) ==
          Approx(dot).margin(static_cast<double>(n + 1) * 6e-8 * magnitude + 1e-30));
    const float delta = 0.25f;
    for (const bool gated : {false, true}) {
      std::vector<float> ds = dp;
      cpu_softmax_grad_row(p.data(), ds.data(), n, delta, gated ? gate.data() : nullptr);
      for (int64_t i = 0; i < n; ++i) {
        const float want = gated ? p[i] * (dp[i] - delta) * gate[i] : p[i] * (dp[i] - delta);
        REQUIRE(ds[i] == want);
      }
    }
  }
}

TEST_CASE("cpu_exp_shift_sum with a scale is exp(scale x - shift), flushing below shift - 86",
          "[softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 15, 32, 33, 70}) {
    // Scaled values from 0 (the maximum) down to about -100, so the tail crosses the flush.
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = -2.9f * static_cast<float>(i) * (i % 2 ? 1.0f : 0.5f);
    if (n > 5) x[5] = -inf;
    const float scale = 0.75f, shift = scale * x[0];
    std::vector<float> e = x;
    const float sum = cpu_exp_shift_sum(e.data(), n, shift, scale);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      // The argument as the kernel forms it (one fused multiply-add in f32): its rounding is
      // the caller's, so the check isolates the exponential's own error.
      const float t = std::fma(x[i], scale, -shift);
      const double want = t < -86.0f ? 0.0 : std::exp(double{t});
      INFO("i " << i << " x " << x[i] << " t " << t << " e " << e[i] << " want " << want);
      REQUIRE(e[i] == Approx(want).epsilon(2e-6));
      want_sum += want;
    }
    CHECK(sum == Approx(want_sum).epsilon(1e-6));
  }
}

// The column pieces against a double-precision softmax of each column, streamed in blocks: the
// widths cover groups of 4 vectors, 1..3 leftover vectors and columns past the last vector.
TEST_CASE("cpu softmax columns: online steps down columns match each column's softmax",
          "[softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t cols : {1, 16, 37, 70, 144}) {
    const int64_t ld = cols + 3, blocks = 3, n = 11;
    // Key c of column m: a smooth pattern; column 2 sees nothing, column 5 only keys 9..24.
    std::vector<int32_t> lo(static_cast<size_t>(cols), 0), hi(static_cast<size_t>(cols), 33);
    if (cols > 2) hi[2] = 0;
    if (cols > 5) lo[5] = 9, hi[5] = 25;
    // Every 7th column (from 3) grows by 0.9 per key after scaling: its shift must move (the
    // rescale path); the others stay within 8 of their first block's maximum.
    auto logit = [](int64_t c, int64_t m) {
      return m % 7 == 3 ? 1.5f * static_cast<float>(c) : 3.0f * std::sin(0.37f * c + 1.3f * m);
    };
    const float scale = 0.6f;
    std::vector<float> run_max(static_cast<size_t>(cols), -inf), run_sum(static_cast<size_t>(cols));
    std::vector<float> factor(static_cast<size_t>(cols));
    std::vector<double> acc(static_cast<size_t>(cols));  // sum of p * c, rescaled like O^T
    for (int64_t blk = 0; blk < blocks; ++blk) {
      std::vector<float> s(static_cast<size_t>(n * ld), 123.0f);  // padding past cols untouched
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t m = 0; m < cols; ++m) s[c * ld + m] = logit(blk * n + c, m);
      }
      cpu_mask_columns(s.data(), n, cols, ld, blk * n, lo.data(), hi.data());
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t m = 0; m < cols; ++m) {
          const int64_t key = blk * n + c;
          const bool visible = lo[m] <= key && key < hi[m];
          REQUIRE(s[c * ld + m] == (visible ? logit(key, m) : -inf));
        }
        REQUIRE(s[c * ld + cols] == 123.0f);
      }
      cpu_softmax_columns_step(s.data(), n, cols, ld, scale, run_max.data(), run_sum.data(),
                               factor.data());
      for (int64_t m = 0; m < cols; ++m) {
        acc[m] *= factor[m];
        for (int64_t c = 0; c < n; ++c) acc[m] += double{s[c * ld + m]} * (blk * n + c);
      }
    }
    // cpu_scale_columns doubles run_sum (checked below).
    cpu_scale_columns(run_sum.data(), 1, cols, cols, std::vector<float>(cols, 2.0f).data());
    for (int64_t m = 0; m < cols; ++m) {
      double mx = -kInf, sum = 0, weighted = 0;
      for (int64_t key = lo[m]; key < std::min<int64_t>(hi[m], blocks * n); ++key) {
        mx = std::max(mx, double{scale} * logit(key, m));
      }
      for (int64_t key = lo[m]; key < std::min<int64_t>(hi[m], blocks * n); ++key) {
        const double p = std::exp(double{scale} * logit(key, m) - mx);
        sum += p;
        weighted += p * key;
      }
      CAPTURE(cols, m);
      if (sum == 0) {
        CHECK(run_max[m] == -inf);
        CHECK(run_sum[m] == 0.0f);
        CHECK(acc[m] == 0.0);
        continue;
      }
      // The shift trails the maximum by at most 8; the sums are relative to the shift.
      CHECK(run_max[m] <= mx * (1 + 1e-6) + 1e-6);
      CHECK(run_max[m] >= mx - 8.0 - 1e-5);
      const double to_shift = std::exp(mx - double{run_max[m]});
      CHECK(run_sum[m] == Approx(2.0 * sum * to_shift).epsilon(1e-5));  // doubled below
      CHECK(acc[m] / run_sum[m] * 2.0 == Approx(weighted / sum).epsilon(1e-5));
    }
  }
}
