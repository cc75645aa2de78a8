// Tests for the layer_norm kernels' per-target SIMD helpers (ops/layer_norm/cpu_simd-inl.h): the
// bf16 pair widening and the exact rounding back, against the library's scalar conversions, on
// every SIMD target of this CPU that the kernels dispatch to.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/ops/layer_norm/cpu_simd_test.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

// Lanes of the target's f32 vector, and whether it has the pair path.
int64_t PairLanes() { return kHasPairPath ? static_cast<int64_t>(hn::Lanes(DF())) : 0; }

// n (a multiple of 2L) values through the pair path: LoadWidenPair from `in`, pair order written
// out in memory order to `widened`; StorePairBf16 (exact rounding) of `values` to `rounded`.
void PairRoundTrip(const bf16* in, const float* values, int64_t n, float* widened, bf16* rounded) {
  if constexpr (kHasPairPath) {
    const DF d;
    const int64_t L = static_cast<int64_t>(hn::Lanes(d));
    alignas(64) float e[kMaxLanes], o[kMaxLanes];
    for (int64_t j = 0; j < n; j += 2 * L) {
      VF ve, vo;
      LoadWidenPair(in + j, ve, vo);
      hn::Store(ve, d, e);
      hn::Store(vo, d, o);
      for (int64_t k = 0; k < L; ++k) {
        widened[j + 2 * k] = e[k];
        widened[j + 2 * k + 1] = o[k];
        e[k] = values[j + 2 * k];
        o[k] = values[j + 2 * k + 1];
      }
      StorePairBf16<false>(hn::Load(d, e), hn::Load(d, o), rounded + j, /*native=*/false);
    }
  }
}

// n (a multiple of L) values rounded by StoreNarrow (DemoteBf16) to `rounded`.
void NarrowBf16(const float* values, int64_t n, bf16* rounded) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t j = 0; j < n; j += L) {
    StoreNarrow<bf16, false>(d, hn::LoadU(d, values + j), rounded + j, /*native_bf16=*/false);
  }
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <catch2/catch.hpp>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/simd_targets.h"

namespace tokamax {
namespace {
HWY_EXPORT(PairLanes);
HWY_EXPORT(PairRoundTrip);
HWY_EXPORT(NarrowBf16);
}  // namespace
}  // namespace tokamax

using namespace tokamax;

TEST_CASE("layer_norm SIMD bf16 pairs widen exactly and round to nearest even as float_to_bf16",
          "[layer_norm][layer_norm_vjp]") {
  // Ties both ways, values just off a tie, the largest finite that rounds to infinity and the one
  // that does not, subnormals, zeros, infinities, and NaNs whose payload would carry into the
  // exponent (0x7FFFFFFF) or vanish under truncation (0x7F800001); then random bit patterns.
  std::vector<uint32_t> bits = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu,
                                0x7F7FFFFFu, 0x7F7F7FFFu, 0x00000001u, 0x00008000u,
                                0x00018000u, 0x80000000u, 0x00000000u, 0x7F800000u,
                                0xFF800000u, 0x7FFFFFFFu, 0x7F800001u, 0xFFC00000u,
                                0xFF808000u, 0x80018000u};
  std::mt19937 rng(7);
  while (bits.size() < 4096) bits.push_back(static_cast<uint32_t>(rng()));
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<float> values(bits.size());
  std::vector<bf16> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    values[i] = std::bit_cast<float>(bits[i]);
    in[i].bits = static_cast<uint16_t>(bits[i] >> 16);
  }
  auto same = [](bf16 got, float value) {
    const bf16 want = float_to_bf16(value);
    if (std::isnan(value)) return std::isnan(bf16_to_float(got));
    return got.bits == want.bits;
  };
  // This CPU's best target, then the narrower ones.
  auto check = [&] {
    std::vector<bf16> narrowed(bits.size());
    HWY_DYNAMIC_DISPATCH(NarrowBf16)(values.data(), n, narrowed.data());
    for (size_t i = 0; i < bits.size(); ++i) {
      CAPTURE(i, bits[i], narrowed[i].bits);
      REQUIRE(same(narrowed[i], values[i]));
    }
    if (HWY_DYNAMIC_DISPATCH(PairLanes)() == 0) return;  // SCALAR: no pair path
    std::vector<float> widened(bits.size());
    std::vector<bf16> rounded(bits.size());
    HWY_DYNAMIC_DISPATCH(PairRoundTrip)(in.data(), values.data(), n, widened.data(),
                                        rounded.data());
    for (size_t i = 0; i < bits.size(); ++i) {
      CAPTURE(i, bits[i], rounded[i].bits);
      REQUIRE(std::bit_cast<uint32_t>(widened[i]) == static_cast<uint32_t>(in[i].bits) << 16);
      REQUIRE(same(rounded[i], values[i]));
      // A NaN stays NaN with its sign (the quiet bit forced), never infinity or zero.
      if (std::isnan(values[i])) REQUIRE((rounded[i].bits >> 15) == (bits[i] >> 31));
    }
  };
  check();
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [&](int64_t) { check(); });
}
#endif  // HWY_ONCE
