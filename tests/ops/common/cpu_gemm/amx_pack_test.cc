// Tests for the AMX engine's packers against the layouts of amx_layout.h written out element by
// element.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/framework/dtype.h"
#include "ops/framework/random.h"

using namespace tokamax;

namespace {

bf16 random_bf16(uint64_t& counter) {
  return float_to_bf16(static_cast<float>(uniform01(3, 4, counter++) * 4 - 2));
}

}  // namespace

TEST_CASE("the AMX packers write the tile layouts, zero-padded, for both storage orders", "[amx]") {
  // rows / cols = 21 (a whole panel or strip of 16 and 5), depth 37 (odd: the last pair's high
  // half is zero; 19 pairs padded to 32).
  constexpr int64_t R = 21, D = 37, Kp = 32;
  REQUIRE(amx_pairs(D) == Kp);
  uint64_t counter = 0;
  std::vector<bf16> x(R * D);  // logical [R, D]: lhs rows, or rhs columns
  for (bf16& v : x) v = random_bf16(counter);
  auto logical = [&](int64_t r, int64_t k) {
    return k < D && r < R ? x[r * D + k].bits : uint16_t{0};
  };
  auto pair = [&](int64_t r, int64_t i) {
    return static_cast<uint32_t>(logical(r, 2 * i)) |
           (static_cast<uint32_t>(logical(r, 2 * i + 1)) << 16);
  };
  for (bool transposed : {false, true}) {
    CAPTURE(transposed);
    // Storage with a stride larger than the extent: lhs [R, D] (transposed: [D, R]); rhs
    // [D, R] (transposed: [R, D]).
    const int64_t ld_rows = D + 3, ld_cols = R + 3;
    std::vector<bf16> rows_major(R * ld_rows), cols_major(D * ld_cols);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t k = 0; k < D; ++k) {
        rows_major[r * ld_rows + k] = x[r * D + k];
        cols_major[k * ld_cols + r] = x[r * D + k];
      }
    }
    std::vector<uint32_t> lhs(32 * Kp, 0xDEADBEEF), rhs(2 * Kp * 16, 0xDEADBEEF);
    if (transposed) {
      pack_lhs_block_amx(cols_major.data(), ld_cols, true, R, D, lhs.data());
      pack_rhs_panel_amx(rows_major.data(), ld_rows, true, D, R, rhs.data());
    } else {
      pack_lhs_block_amx(rows_major.data(), ld_rows, false, R, D, lhs.data());
      pack_rhs_panel_amx(cols_major.data(), ld_cols, false, D, R, rhs.data());
    }
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t i = 0; i < Kp; ++i) {
        REQUIRE(lhs[r * Kp + i] == pair(r, i));                         // [panel][16][Kp]
        REQUIRE(rhs[((r / 16) * Kp + i) * 16 + r % 16] == pair(r, i));  // [strip][Kp][16]
      }
    }
  }
}
