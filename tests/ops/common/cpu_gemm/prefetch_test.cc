// The next-panel prefetch plan (ops/common/cpu_gemm/micro_kernel.h): the shares a cursor hands
// out cover every cache line of the plan once, in order, whatever the row width and step count.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/micro_kernel.h"

namespace tokamax {
namespace {

TEST_CASE("PrefetchCursor shares cover each line of the next panel once, in order",
          "[cpu_gemm]") {
  static const char base[1] = {0};
  for (int64_t bytes : {1, 63, 64, 65, 100, 192, 200}) {
    for (int64_t rows : {0, 1, 7, 40}) {
      for (int64_t steps : {1, 3, 16, 1000}) {
        CAPTURE(bytes, rows, steps);
        const int64_t stride = 4096;
        PrefetchPlan plan{base, rows, stride, bytes};
        std::vector<int64_t> want;  // the byte offsets from base of every line, row by row
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < bytes; o += 64) want.push_back(r * stride + o);
        }
        PrefetchCursor cursor(plan, steps);
        std::vector<int64_t> got;
        for (int64_t s = 0; s < steps + 2; ++s) {  // past the last step: empty shares
          PrefetchShare share = cursor.take();
          while (share.lines > 0) {
            got.push_back(share.row + share.offset - base);
            share.advance();
          }
        }
        CHECK(got == want);
      }
    }
  }
}

}  // namespace
}  // namespace tokamax
