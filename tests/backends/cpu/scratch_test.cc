// Tests for the per-thread growing scratch buffer.
#include "backends/cpu/scratch.h"

#include <catch2/catch.hpp>
#include <cstdint>

using tokamax::cpu::ScratchBuffer;

TEST_CASE("ScratchBuffer is aligned, grows on demand and is reused when big enough", "[scratch]") {
  ScratchBuffer buffer;
  void* small = buffer.get(100);
  REQUIRE(small != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(small) % ScratchBuffer::kAlignment == 0);
  static_cast<char*>(small)[99] = 7;
  CHECK(buffer.get(64) == small);  // fits: the same memory, nothing reallocated
  CHECK(static_cast<char*>(buffer.get(100))[99] == 7);
  float* grown = buffer.floats(1 << 20);  // 4 MiB
  REQUIRE(grown != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(grown) % ScratchBuffer::kAlignment == 0);
  grown[(1 << 20) - 1] = 1.0f;  // the whole range is writable
  CHECK(buffer.floats(16) == grown);
  CHECK(buffer.get(0) != nullptr);
}

TEST_CASE("PerThreadSums gives each thread zeroed sums on cache lines of its own", "[scratch]") {
  using tokamax::cpu::PerThreadSums;
  for (const int threads : {1, 2, 3}) {
    for (const size_t floats : {size_t{1}, size_t{5}, size_t{16}, size_t{17}, size_t{128}}) {
      PerThreadSums sums(threads, floats);
      CHECK(sums.threads() == threads);
      CHECK(sums.stride() >= floats);
      for (int t = 0; t < threads; ++t) {
        const uintptr_t begin = reinterpret_cast<uintptr_t>(sums.of(t));
        const uintptr_t end = reinterpret_cast<uintptr_t>(sums.of(t) + floats);  // one past
        CHECK(begin % 64 == 0);  // its first line is its own ...
        if (t + 1 < threads) {   // ... and so is its last: the next block starts on a new line
          CHECK(reinterpret_cast<uintptr_t>(sums.of(t + 1)) >= (end + 63) / 64 * 64);
        }
        for (size_t i = 0; i < floats; ++i) CHECK(sums.of(t)[i] == 0.0f);
      }
      sums.of(threads - 1)[floats - 1] = 1.0f;  // the last float is in the allocation
    }
  }
  CHECK(PerThreadSums(0, 4).threads() == 1);
}
