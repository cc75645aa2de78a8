// The next-panel prefetch plan (ops/common/cpu_gemm/micro_kernel.h): the shares a cursor hands
// out cover every cache line of the plan once, in order, whatever the row width and step count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/micro_kernel.h"

namespace tokamax {
namespace {

TEST_CASE("PrefetchCursor shares cover each line of the next panel once, in order",
          "[cpu_gemm]") {
  alignas(64) static const char buffer[128] = {0};
  for (int64_t misalign : {0, 1, 32, 63}) {
    for (int64_t stride : {4096, 4096 + 32, 2880}) {
      for (int64_t bytes : {1, 63, 64, 65, 100, 192, 200}) {
        for (int64_t rows : {0, 1, 7, 40}) {
          for (int64_t steps : {1, 3, 16, 1000}) {
            CAPTURE(misalign, stride, bytes, rows, steps);
            const char* base = buffer + misalign;
            const bool aligned = misalign == 0 && stride % 64 == 0;
            const int64_t per_row = (bytes + 63) / 64 + (aligned ? 0 : 1);
            // Every row's lines from the one holding its first byte: the lines its bytes touch,
            // then (misaligned) up to one past its end.
            std::vector<int64_t> want, touched;  // byte offsets from buffer of lines
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t start = misalign + r * stride, first = start / 64 * 64;
              for (int64_t i = 0; i < per_row; ++i) want.push_back(first + 64 * i);
              for (int64_t o = first; o < start + bytes; o += 64) touched.push_back(o);
            }
            PrefetchCursor cursor(PrefetchPlan{base, rows, stride, bytes}, steps);
            std::vector<int64_t> got;
            for (int64_t s = 0; s < steps + 2; ++s) {  // past the last step: empty shares
              PrefetchShare share = cursor.take();
              while (share.lines > 0) {
                got.push_back(share.line() - buffer);
                share.advance();
              }
            }
            CHECK(got == want);
            CHECK(std::includes(got.begin(), got.end(), touched.begin(), touched.end()));
            if (aligned) CHECK(got == touched);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tokamax
