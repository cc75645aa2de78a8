// Tests for the AMX tile layer and layouts: the emulation (and the hardware tiles where the CPU
// has them) against scalar products written from the logical matrices, and the packers against
// the layouts of amx_layout.h written out element by element.
#include "backends/cpu/amx_tiles.h"

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/random.h"
#include "tests/tile_modes.h"

using namespace tokamax;

namespace {

bf16 random_bf16(uint64_t& counter) {
  return float_to_bf16(static_cast<float>(uniform01(3, 4, counter++) * 4 - 2));
}

// Runs C = C0 + A B on tiles 0 (C), 4 (A), 6 (B) with the given shapes, through the tile build
// `mode` selects; returns C's 16 rows of 64 bytes (what was stored, sentinel bytes elsewhere).
template <typename Op>
std::vector<uint8_t> run_product(cpu::TileMode mode, const amx::TileConfig& config, const void* c0,
                                 const void* a, const void* b, Op op) {
  std::vector<uint8_t> c(16 * 64, 0xA5);
  auto body = [&](auto tiles) {
    using Tiles = decltype(tiles);
    Tiles::configure(config);
    Tiles::template load<0>(c0, 64);
    Tiles::template load<4>(a, 64);
    Tiles::template load<6>(b, 64);
    op(tiles);
    Tiles::template store<0>(c.data(), 64);
    Tiles::release();
  };
#if defined(__x86_64__)
  if (mode == cpu::TileMode::kHardware) {
    body(amx::HardwareTiles{});
    return c;
  }
#endif
  body(amx::EmulatedTiles{});
  return c;
}

}  // namespace

TEST_CASE("TDPBF16PS reads A row-major and B as pairs of consecutive k per column", "[amx]") {
  // Logical A [M, K] and B [K, N] with M = 16, K = 32, N = 16 (whole tiles), and a second shape
  // of partial tiles: M = 5, K = 12 (6 pairs), N = 10.
  for (const std::array<int, 3>& shape : {std::array{16, 32, 16}, std::array{5, 12, 10}}) {
    const int M = shape[0], K = shape[1], N = shape[2];
    CAPTURE(M, K, N);
    uint64_t counter = 0;
    std::vector<bf16> A(M * K), B(K * N);
    for (bf16& x : A) x = random_bf16(counter);
    for (bf16& x : B) x = random_bf16(counter);
    std::vector<float> C0(16 * 16);
    for (float& x : C0) x = static_cast<float>(uniform01(5, 6, counter++));
    // The tiles' memory images: A rows of K bf16 (64-byte stride), B rows of N pairs.
    std::vector<uint16_t> a_image(16 * 32, 0xFFFF), b_image(16 * 32, 0xFFFF);
    for (int m = 0; m < M; ++m) {
      for (int k = 0; k < K; ++k) a_image[m * 32 + k] = A[m * K + k].bits;
    }
    for (int k = 0; k < K; ++k) {
      for (int n = 0; n < N; ++n) b_image[(k / 2) * 32 + 2 * n + k % 2] = B[k * N + n].bits;
    }
    amx::TileConfig config;
    config.set(0, M, 4 * N).set(4, M, 2 * K).set(6, K / 2, 4 * N);
    testing::for_each_tile_mode([&](cpu::TileMode mode) {
      const std::vector<uint8_t> c =
          run_product(mode, config, C0.data(), a_image.data(), b_image.data(),
                      [](auto tiles) { decltype(tiles)::template dpbf16ps<0, 4, 6>(); });
      for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
          if (m >= M || n >= N) {  // outside the configured rows and bytes: not stored
            uint32_t bits;
            std::memcpy(&bits, &c[m * 64 + 4 * n], 4);
            REQUIRE(bits == 0xA5A5A5A5u);
            continue;
          }
          // The SDM's order: k = 0, 1, 2, ... each product added and rounded in f32.
          float want = C0[m * 16 + n];
          double exact = want, magnitude = std::abs(want);
          for (int k = 0; k < K; ++k) {
            const float p = bf16_to_float(A[m * K + k]) * bf16_to_float(B[k * N + n]);
            want += p;
            exact += p;
            magnitude += std::abs(p);
          }
          float got;
          std::memcpy(&got, &c[m * 64 + 4 * n], 4);
          if (mode == cpu::TileMode::kEmulated) {
            REQUIRE(got == want);
          } else {  // the units may round in another order: within the f32 sum's bound
            REQUIRE(std::abs(got - exact) <= K * 0x1p-24 * magnitude);
          }
        }
      }
    });
  }
}

TEST_CASE("TDPBF16PS flushes bf16 subnormal inputs to zero", "[amx]") {
  std::vector<uint16_t> a(16 * 32, 0), b(16 * 32, 0);
  a[0] = 0x0001;  // the smallest bf16 subnormal, about 9.2e-41
  b[0] = float_to_bf16(0x1p100f).bits;
  a[1] = float_to_bf16(1.0f).bits;  // a normal pair member still counts
  b[1] = float_to_bf16(3.0f).bits;
  std::vector<float> c0(16 * 16, 0.0f);
  amx::TileConfig config;
  config.set(0, 16, 64).set(4, 16, 64).set(6, 16, 64);
  testing::for_each_tile_mode([&](cpu::TileMode mode) {
    const std::vector<uint8_t> c =
        run_product(mode, config, c0.data(), a.data(), b.data(),
                    [](auto t) { decltype(t)::template dpbf16ps<0, 4, 6>(); });
    float got;
    std::memcpy(&got, c.data(), 4);
    CHECK(got == 3.0f);  // not 3 + 2^-133 * 2^100
  });
}

TEST_CASE("TDPBUSD and TDPBSSD add four int8 products per s32 lane, wrapping", "[amx]") {
  constexpr int M = 16, K = 64, N = 16;  // quads: K / 4 = 16 rows of B
  uint64_t counter = 0;
  std::vector<uint8_t> a(M * K), b_image(16 * 64);
  std::vector<int8_t> B(K * N);
  for (uint8_t& x : a) x = static_cast<uint8_t>(uniform01(9, 1, counter++) * 256);
  for (int8_t& x : B)
    x = static_cast<int8_t>(static_cast<int>(uniform01(9, 2, counter++) * 256) - 128);
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < N; ++n)
      b_image[(k / 4) * 64 + 4 * n + k % 4] = static_cast<uint8_t>(B[k * N + n]);
  }
  std::vector<int32_t> c0(16 * 16);
  for (int i = 0; i < 256; ++i) c0[i] = i % 2 ? INT32_MAX - i : INT32_MIN + i;  // sums wrap
  amx::TileConfig config;
  config.set(0, 16, 64).set(4, 16, 64).set(6, 16, 64);
  for (bool signed_a : {false, true}) {
    CAPTURE(signed_a);
    testing::for_each_tile_mode([&](cpu::TileMode mode) {
      const std::vector<uint8_t> c =
          run_product(mode, config, c0.data(), a.data(), b_image.data(), [&](auto t) {
            if (signed_a) {
              decltype(t)::template dpbssd<0, 4, 6>();
            } else {
              decltype(t)::template dpbusd<0, 4, 6>();
            }
          });
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < N; ++n) {
          uint32_t want = static_cast<uint32_t>(c0[m * 16 + n]);
          for (int k = 0; k < K; ++k) {
            const int32_t av = signed_a ? static_cast<int8_t>(a[m * K + k]) : a[m * K + k];
            want += static_cast<uint32_t>(av * B[k * N + n]);
          }
          int32_t got;
          std::memcpy(&got, &c[m * 64 + 4 * n], 4);
          REQUIRE(got == static_cast<int32_t>(want));
        }
      }
    });
  }
}

TEST_CASE("the emulation faults where the hardware would: shapes that do not chain, no config",
          "[amx]") {
  std::vector<uint8_t> zeros(16 * 64);
  amx::TileConfig config;
  config.set(0, 16, 64).set(4, 16, 64).set(6, 8, 64);  // B has 8 rows for A's 16 pairs
  CHECK_THROWS_AS(
      run_product(cpu::TileMode::kEmulated, config, zeros.data(), zeros.data(), zeros.data(),
                  [](auto t) { decltype(t)::template dpbf16ps<0, 4, 6>(); }),
      std::logic_error);
  amx::TileConfig too_wide;
  too_wide.set(0, 16, 128);
  CHECK_THROWS_AS(amx::EmulatedTiles::configure(too_wide), std::logic_error);
  amx::EmulatedTiles::release();
  CHECK_THROWS_AS(amx::EmulatedTiles::zero<0>(), std::logic_error);
}
