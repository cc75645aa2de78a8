// Checked integer arithmetic for extents, element and byte counts: the one place where sizes
// that come from files (catalogs, records, caches) are multiplied and summed. An overflow is the
// caller's error (InvalidArgument naming what was counted), found at binding, before anything is
// allocated.
#pragma once

#include <cstdint>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {

// The largest byte count of one tensor: 2^62 (4 EiB) leaves headroom for any offset arithmetic
// on it, and is far beyond any memory.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 62;

// a * b for non-negative a, b; InvalidArgument "<what> overflows 64 bits" (its field() =
// `field`) otherwise.
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what,
                           const std::string& field = "") {
  int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product)) {
    throw InvalidArgument(what + " overflows 64 bits (" + std::to_string(a) + " * " +
                          std::to_string(b) + ")",
                          field);
  }
  return product;
}

// a + b for non-negative a, b; as checked_mul.
inline int64_t checked_add(int64_t a, int64_t b, const std::string& what,
                           const std::string& field = "") {
  int64_t sum = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &sum)) {
    throw InvalidArgument(what + " overflows 64 bits (" + std::to_string(a) + " + " +
                          std::to_string(b) + ")",
                          field);
  }
  return sum;
}

}  // namespace tokamax
