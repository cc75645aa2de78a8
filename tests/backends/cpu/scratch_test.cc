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
