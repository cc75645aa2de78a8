// numpy's random Generator (numpy.random.default_rng(seed): a SeedSequence seeding PCG64),
// reproduced bit for bit for the draws upstream Tokamax's catalogs make, so that a catalog copied
// from upstream expands to the same values (ragged_dot's group_sizes {num_groups, total_size}).
#pragma once

#include <cstdint>
#include <vector>

namespace tokamax {

class NumpyGenerator {
 public:
  // default_rng(seed) for a non-negative integer seed.
  explicit NumpyGenerator(uint64_t seed);

  // Generator.random(): a double in [0, 1) from the top 53 bits of one 64-bit draw.
  double random();
  // Generator.integers(0, n) for 1 <= n <= 2^32 - 1, int64 results: Lemire's bounded draw on
  // 32-bit halves of the 64-bit draws (the low half first, the high half kept for the next).
  int64_t integers(int64_t n);

 private:
  uint64_t next64();
  uint32_t next32();

  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

// upstream's generate_group_sizes: numpy.random.default_rng(seed).choice(num_groups, (m,), p=p,
// replace=True), counted per group (np.bincount with minlength num_groups). `p` (null: uniform)
// holds num_groups non-negative probabilities summing to 1 (the caller checks them as numpy
// does). Needs 1 <= num_groups < 2^32.
std::vector<int64_t> numpy_choice_counts(int64_t num_groups, int64_t m,
                                         const std::vector<double>* p, uint64_t seed);

}  // namespace tokamax
