// Fuzz target: the tensor-spec parser (`f32[4096,4096]`, what catalogs and records hold).
#include "ops/framework/tensor.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tokamax::fuzz::expect_clean_refusal([&] {
    const tokamax::TensorSpec spec = tokamax::parse_tensor_spec(tokamax::fuzz::as_text(data, size));
    // What a parsed spec promises: its element and byte counts are representable.
    (void)spec.checked_size_bytes();
  });
  return 0;
}
