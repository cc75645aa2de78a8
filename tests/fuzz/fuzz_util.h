// What every fuzz target shares: the input as text, and the rule that a loader may only refuse
// bad input with the errors the CLI turns into exit 2 (InputError, InvalidArgument). Any other
// exception escapes LLVMFuzzerTestOneInput and libFuzzer reports it as a crash, as it does an
// abort, a sanitizer finding, a hang (-timeout) or a huge allocation (-malloc_limit_mb).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ops/framework/errors.h"

namespace tokamax::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `load`; swallows the exit-2 errors, lets everything else through.
template <typename Fn>
void expect_clean_refusal(Fn&& load) {
  try {
    load();
  } catch (const InputError&) {
  } catch (const InvalidArgument&) {
  }
}

}  // namespace tokamax::fuzz
