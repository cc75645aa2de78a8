// Fuzz target: the autotuning cache loader (user caches, shipped caches, export-cache inputs),
// and its writer: whatever it accepts must round-trip to the same cache.
#include <stdexcept>

#include "ops/framework/autotune_cache.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tokamax::fuzz::expect_clean_refusal([&] {
    const tokamax::AutotuneCache cache =
        tokamax::AutotuneCache::parse(tokamax::fuzz::as_text(data, size), "fuzz.json");
    const std::string text = cache.dump();
    if (tokamax::AutotuneCache::parse(text, "dump").dump() != text) {
      throw std::logic_error("the cache does not round-trip through dump()");
    }
  });
  return 0;
}
