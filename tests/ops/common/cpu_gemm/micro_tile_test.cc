// Tests for the engine's tiling arithmetic (micro_tile.h): even_tile cuts an extent into tiles of
// about one size under the cap, rounded to the micro-tile.
#include <catch2/catch.hpp>
#include <cstdint>
#include <utility>

#include "ops/common/cpu_gemm/micro_tile.h"

using namespace tokamax;

namespace {

// The tiles even_tile's answer makes of `extent`, as (count, last tile's extent).
std::pair<int64_t, int64_t> cut(int64_t extent, int64_t tile) {
  const int64_t count = ceil_div(extent, tile);
  return {count, extent - (count - 1) * tile};
}

}  // namespace

TEST_CASE("even_tile leaves no sliver and never exceeds its cap", "[micro_tile]") {
  CHECK(even_tile(512, 504, 6) == 258);   // 258 + 254, not 504 + 8
  CHECK(even_tile(1024, 504, 6) == 342);  // 342 + 342 + 340
  CHECK(even_tile(2048, 504, 6) == 414);  // five tiles, the last 392
  CHECK(even_tile(300, 504, 6) == 300);   // one tile: the extent itself
  CHECK(even_tile(301, 504, 6) == 306);   // one tile, rounded up to the micro-tile
  CHECK(even_tile(504, 504, 6) == 504);
  CHECK(even_tile(0, 504, 6) == 504);
  for (int64_t extent = 1; extent <= 3000; extent += 7) {
    for (int64_t cap : {6, 12, 96, 504}) {
      const int64_t tile = even_tile(extent, cap, 6);
      CAPTURE(extent, cap, tile);
      CHECK(tile <= cap);
      CHECK(tile % 6 == 0);
      const auto [count, last] = cut(extent, tile);
      CHECK(count == ceil_div(extent, cap));  // as few tiles as the cap allows
      CHECK(last > tile - 6 * count);         // the last tile is short by under mr per tile
    }
  }
}
