// Fuzz target: the TOKAMAX_RECORD reader of `tune --from` (JSON lines or one JSON document).
#include "cli/tune_sources.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tokamax::fuzz::expect_clean_refusal([&] {
    (void)tokamax::dedup_cases(
        tokamax::parse_tune_source(tokamax::fuzz::as_text(data, size), "fuzz.jsonl"));
  });
  return 0;
}
