// Fuzz target: the `bench --json` reader of `bench --compare`.
#include "cli/report/bench_compare.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tokamax::fuzz::expect_clean_refusal([&] {
    const tokamax::BenchSamples run =
        tokamax::parse_bench_samples(tokamax::fuzz::as_text(data, size), "fuzz.json");
    // A run that loads compares with itself.
    (void)tokamax::compare_runs(run, run, tokamax::CompareOptions{});
  });
  return 0;
}
