// Tests for the oneDNN helpers: the primitive cache every oneDNN baseline keeps its primitives in.
#include "backends/cpu/onednn_engine.h"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace tokamax;

TEST_CASE("the primitive cache creates each key once and starts over when full", "[onednn]") {
  cpu::OneDnnPrimitiveCache<int, int> cache(3);
  int creations = 0;
  auto make = [&](int value) {
    return [&, value] {
      ++creations;
      return value * 10;
    };
  };
  CHECK(cache.get(1, make(1)) == 10);
  CHECK(cache.get(2, make(2)) == 20);
  CHECK(cache.get(1, make(99)) == 10);  // cached: create() not called
  CHECK(creations == 2);
  CHECK(cache.created() == 2);
  CHECK(cache.get(3, make(3)) == 30);
  CHECK(cache.get(4, make(4)) == 40);  // full: starts over, keeps the new entry
  CHECK(cache.get(4, make(99)) == 40);
  CHECK(cache.get(1, make(5)) == 50);  // dropped with the others, created again
  CHECK(cache.created() == 5);
  // A failing create() caches nothing.
  CHECK_THROWS_AS(cache.get(7, [&]() -> int { throw std::runtime_error("no kernel"); }),
                  std::runtime_error);
  CHECK(cache.get(7, make(7)) == 70);
}

TEST_CASE("concurrent first uses of one key create it once", "[onednn]") {
  cpu::OneDnnPrimitiveCache<int, int> cache(16);
  std::atomic<int> creations{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        cache.get(i % 4, [&] {
          ++creations;
          return 1;
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(creations.load() == 4);
  CHECK(cache.created() == 4);
}
