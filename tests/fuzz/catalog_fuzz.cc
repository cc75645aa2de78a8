// Fuzz target: the YAML catalog loader, whole files (`--spec`), through every op's binding.
#include "cli/toolkit/catalog/arg_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tokamax::fuzz::expect_clean_refusal(
      [&] { (void)tokamax::parse_catalog(tokamax::fuzz::as_text(data, size), "fuzz.yaml"); });
  return 0;
}
