// The int8 path's rhs pack (ops/ragged_dot/cpu_int8_kernel.h) against its layout written out
// element by element: every edge of depth (a partial quad), of the columns (partial 16-column
// chunks, partial 64-column packs, packs of three 64-column groups, zero strips of padding) and
// nothing written past the panel.
#include "ops/ragged_dot/cpu_int8_kernel.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/ragged_dot/quantize.h"

namespace tokamax {
namespace {

TEST_CASE("pack_rhs_int8_quads writes the vpdpbusd layout and column sums, nothing past them",
          "[ragged_dot]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(-128, 127);
  constexpr int8_t kGuard = 0x5A;
  constexpr int64_t kGuardBytes = 256;
  for (int nr : {48, 64}) {
    for (int64_t depth : {1, 4, 7, 36, 41}) {
      for (int64_t cols : {1, 15, 16, 17, 48, 63, 64, 65, 100, 130, 192, 200, 385}) {
        CAPTURE(nr, depth, cols);
        const int64_t ld = cols + 5, quads = (depth + 3) / 4, strips = (cols + nr - 1) / nr;
        std::vector<int8_t> rhs(static_cast<size_t>(depth * ld));
        for (int8_t& x : rhs) x = static_cast<int8_t>(code(rng));
        const int64_t packed_bytes = strips * quads * nr * 4;
        std::vector<int8_t> packed(static_cast<size_t>(packed_bytes + kGuardBytes), kGuard);
        std::vector<int32_t> colsum(static_cast<size_t>(strips * nr + 16), 0);
        colsum[static_cast<size_t>(strips * nr)] = 12345;  // a guard after the sums
        pack_rhs_int8_quads(rhs.data(), ld, depth, cols, nr, packed.data(), colsum.data());
        int mismatches = 0;
        for (int64_t s = 0; s < strips; ++s) {
          for (int64_t q = 0; q < quads; ++q) {
            for (int64_t c = 0; c < nr; ++c) {
              for (int64_t j = 0; j < 4; ++j) {
                const int64_t k = 4 * q + j, col = s * nr + c;
                const int8_t want = k < depth && col < cols ? rhs[k * ld + col] : int8_t{0};
                mismatches += packed[((s * quads + q) * nr + c) * 4 + j] != want;
              }
            }
          }
        }
        CHECK(mismatches == 0);
        for (int64_t col = 0; col < strips * nr; ++col) {
          int32_t want = 0;
          for (int64_t k = 0; k < depth && col < cols; ++k) want += 128 * rhs[k * ld + col];
          if (colsum[col] != want) {
            FAIL_CHECK("colsum[" << col << "] = " << colsum[col] << ", want " << want);
            break;
          }
        }
        CHECK(colsum[static_cast<size_t>(strips * nr)] == 12345);
        int guard_hits = 0;
        for (int64_t i = packed_bytes; i < packed_bytes + kGuardBytes; ++i) {
          guard_hits += packed[i] != kGuard;
        }
        CHECK(guard_hits == 0);
      }
    }
  }
}

TEST_CASE("quantize_row_u8 gives quantize_row_int8's codes + 128 and scales, bit for bit",
          "[ragged_dot]") {
  if (!int8_vnni_available()) {
    WARN("skipped: this CPU has no avx512_vnni, so the vectorized quantization cannot run here");
    return;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t K : {1, 15, 16, 17, 100, 1440}) {
    for (int64_t blocks : {1, 2, 5}) {
      if (K % blocks != 0) continue;
      const int64_t b = K / blocks;
      for (bool bf16_row : {false, true}) {
        CAPTURE(K, b, bf16_row);
        std::vector<float> x(static_cast<size_t>(K));
        for (float& v : x) v = normal(rng);
        // Ties: with max |x| = 127 the scale is 1 and these codes round half to even.
        if (b >= 5) {
          const float ties[5] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f};
          for (int i = 0; i < 5; ++i) x[static_cast<size_t>(i)] = ties[i];
        }
        if (blocks > 1) std::fill(x.begin() + b, x.begin() + 2 * b, 0.0f);  // an all-zero block
        std::vector<uint16_t> bits(static_cast<size_t>(K));
        for (int64_t k = 0; k < K && bf16_row; ++k) {
          bits[k] = float_to_bf16(x[k]).bits;
          x[k] = bf16_to_float(bf16{bits[k]});  // the values the bf16 row holds
        }
        std::vector<int8_t> want(static_cast<size_t>(K));
        std::vector<float> want_scales(static_cast<size_t>(blocks));
        quantize_row_int8(x.data(), K, b, want.data(), want_scales.data());
        std::vector<uint8_t> codes(static_cast<size_t>(K));
        std::vector<float> scales(static_cast<size_t>(blocks));
        const void* row = bf16_row ? static_cast<const void*>(bits.data()) : x.data();
        REQUIRE(quantize_row_u8(row, bf16_row, K, b, codes.data(), scales.data()));
        CHECK(scales == want_scales);
        int mismatches = 0;
        for (int64_t k = 0; k < K; ++k) mismatches += codes[k] != uint8_t(want[k] + 128);
        CHECK(mismatches == 0);
      }
    }
  }
}

}  // namespace
}  // namespace tokamax
