// Counter-based random numbers: element i of a tensor depends only on (seed, stream, i), so
// inputs are reproducible across machines and can be generated in parallel.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/framework/tensor.h"

namespace tokamax {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stream id from a name (FNV-1a), so "lhs" and "rhs" of the same seed differ.
inline uint64_t stream_id(std::string_view name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return hash;
}

// Uniform in [0, 1).
inline double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t bits = splitmix64(splitmix64(seed ^ stream) + index);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// Approximately standard normal (Irwin-Hall with 4 uniforms, rescaled to unit variance):
// bell-shaped, bounded by +-3.46, cheap.
inline double normalish(uint64_t seed, uint64_t stream, uint64_t index) {
  double sum = 0.0;
  for (uint64_t j = 0; j < 4; ++j) sum += uniform01(seed, stream, index * 4 + j);
  return (sum - 2.0) * 1.7320508075688772;  // sqrt(12 / 4)
}

// A host tensor of `spec` whose element i is mean + stddev * normalish(seed, stream_id(name), i):
// the same values for the same (seed, name) on every machine, rounded to the spec's dtype.
Tensor normal_tensor(const TensorSpec& spec, uint64_t seed, std::string_view name,
                     double stddev = 1.0, double mean = 0.0);

}  // namespace tokamax
