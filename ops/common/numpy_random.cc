// numpy's SeedSequence, PCG64 and the two draws upstream's catalogs use (numpy/random:
// bit_generator.pyx, _pcg64.pyx, pcg64.h, distributions.c, _generator.pyx choice).
#include "ops/common/numpy_random.h"

#include <algorithm>
#include <array>

namespace tokamax {
namespace {

using u128 = unsigned __int128;

// SeedSequence's hash constants (bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> 16);
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> 16);
}

// SeedSequence(seed).generate_state(4, np.uint64): the pool mixed from the seed's 32-bit words
// (least significant first; 0 is one word), then 8 words drawn from it and paired little-endian.
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0u, hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      pool[dst] = mix(pool[dst], hashmix(entropy[src], hash_const));
    }
  }
  std::array<uint32_t, 8> words{};
  uint32_t out_const = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t value = pool[i % kPoolSize];
    value ^= out_const;
    out_const *= kMultB;
    value *= out_const;
    words[i] = value ^ (value >> 16);
  }
  std::array<uint64_t, 4> state{};
  for (int i = 0; i < 4; ++i) {
    state[i] =
        static_cast<uint64_t>(words[2 * i]) | (static_cast<uint64_t>(words[2 * i + 1]) << 32);
  }
  return state;
}

constexpr u128 kPcgMultiplier =
    (static_cast<u128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

}  // namespace

NumpyGenerator::NumpyGenerator(uint64_t seed) {
  // pcg64_set_seed: state and increment as 128-bit numbers, the first word the high half;
  // pcg_setseq_128_srandom_r then steps twice around adding the state.
  const std::array<uint64_t, 4> s = seed_sequence_state(seed);
  const u128 initstate = (static_cast<u128>(s[0]) << 64) | s[1];
  const u128 initseq = (static_cast<u128>(s[2]) << 64) | s[3];
  inc_ = (initseq << 1) | 1;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t NumpyGenerator::next64() {
  // One LCG step, then the XSL RR output of the new state.
  state_ = state_ * kPcgMultiplier + inc_;
  const uint64_t folded = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rotation = static_cast<unsigned>(state_ >> 122);
  return (folded >> rotation) | (folded << ((64 - rotation) & 63));
}

uint32_t NumpyGenerator::next32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

double NumpyGenerator::random() {
  return static_cast<double>(next64() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t NumpyGenerator::integers(int64_t n) {
  // buffered_bounded_lemire_uint32 with rng = n - 1.
  const auto excl = static_cast<uint32_t>(n);
  uint64_t m = static_cast<uint64_t>(next32()) * excl;
  auto leftover = static_cast<uint32_t>(m);
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - (excl - 1)) % excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(next32()) * excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<int64_t>(m >> 32);
}

std::vector<int64_t> numpy_choice_counts(int64_t num_groups, int64_t m,
                                         const std::vector<double>* p, uint64_t seed) {
  NumpyGenerator rng(seed);
  std::vector<int64_t> counts(static_cast<size_t>(num_groups), 0);
  if (p == nullptr) {
    for (int64_t i = 0; i < m; ++i) ++counts[static_cast<size_t>(rng.integers(num_groups))];
    return counts;
  }
  // cdf = cumsum(p) / its last entry; each draw's group is searchsorted(cdf, u, 'right').
  std::vector<double> cdf(p->size());
  double sum = 0.0;
  for (size_t g = 0; g < p->size(); ++g) cdf[g] = sum += (*p)[g];
  const double last = cdf.back();
  for (double& c : cdf) c /= last;
  for (int64_t i = 0; i < m; ++i) {
    const double u = rng.random();
    const auto group = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    // searchsorted can return num_groups only if u >= cdf[-1] = 1, which random() never gives.
    ++counts[static_cast<size_t>(std::min<int64_t>(group, num_groups - 1))];
  }
  return counts;
}

}  // namespace tokamax
