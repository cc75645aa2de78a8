// Tests for the GEMM engine's packing layouts and the f32 -> bf16/f16 output rounding.
#include "ops/common/cpu_gemm/pack.h"

#include <hwy/targets.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/simd_target.h"
#include "ops/framework/dtype.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using tokamax::testing::for_each_forced_target;

namespace {

// Distinct, exactly representable test values (bf16 and f16 hold small integers / 8 exactly).
float value_at(int64_t r, int64_t c) { return static_cast<float>(r * 16 + c + 1) / 8.0f; }

template <typename T>
T from_float(float x);
template <>
float from_float<float>(float x) {
  return x;
}
template <>
bf16 from_float<bf16>(float x) {
  return float_to_bf16(x);
}
template <>
f16 from_float<f16>(float x) {
  return float_to_f16(x);
}

template <typename T>
std::vector<T> matrix(int64_t rows, int64_t ld) {
  std::vector<T> out(static_cast<size_t>(rows * ld));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c) out[r * ld + c] = from_float<T>(value_at(r, c));
  }
  return out;
}

template <typename T>
void check_lhs_block(DType dtype) {
  // 9 rows of depth 5 (row stride 7) into micro-panels of 4: panels 0, 1 full, panel 2 one row.
  const int64_t rows = 9, depth = 5, ld = 7, mr = 4;
  const std::vector<T> lhs = matrix<T>(rows, ld);
  std::vector<float> packed(3 * depth * mr, -1.0f);
  pack_lhs_block(dtype, lhs.data(), ld, rows, depth, mr, packed.data());
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t k = 0; k < depth; ++k) {
      for (int64_t r = 0; r < mr; ++r) {
        const int64_t row = p * mr + r;
        CAPTURE(p, k, r);
        CHECK(packed[(p * depth + k) * mr + r] == (row < rows ? value_at(row, k) : 0.0f));
      }
    }
  }
}

template <typename T>
void check_rhs_panel(DType dtype) {
  // depth 3 x 37 columns (row stride 40) into strips of 16: two full strips and one of 5.
  const int64_t depth = 3, cols = 37, ld = 40, nr = 16;
  const std::vector<T> rhs = matrix<T>(depth, ld);
  std::vector<float> packed(3 * depth * nr, -1.0f);
  pack_rhs_panel(dtype, rhs.data(), ld, depth, cols, nr, packed.data());
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t k = 0; k < depth; ++k) {
      for (int64_t n = 0; n < nr; ++n) {
        const int64_t col = s * nr + n;
        CAPTURE(s, k, n);
        CHECK(packed[(s * depth + k) * nr + n] == (col < cols ? value_at(k, col) : 0.0f));
      }
    }
  }
}

// Runs `body` once per SIMD target this CPU supports among the ones the packing code compiles
// (AVX-512, AVX2, scalar), so every transposition and conversion path is checked bit for bit.
template <typename Body>
void for_each_target(Body&& body) {
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t target) {
    INFO("packing dispatched to " << cpu::simd_target_name());
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    body();
  });
}

}  // namespace

TEST_CASE("cpu ragged_dot packs lhs into zero-padded k-major micro-panels", "[ragged_dot]") {
  for_each_target([&] {
    check_lhs_block<float>(DType::kF32);
    check_lhs_block<bf16>(DType::kBF16);
    check_lhs_block<f16>(DType::kF16);
    // f64 accumulation packs any input into doubles.
    const std::vector<double> lhs = {1, 2, 3, 4, 5, 6};  // [2, 3]
    std::vector<double> packed(12, -1.0);
    pack_lhs_block(DType::kF64, lhs.data(), 3, 2, 3, 4, packed.data());
    CHECK(packed == std::vector<double>{1, 4, 0, 0, 2, 5, 0, 0, 3, 6, 0, 0});
  });
}

TEST_CASE("cpu ragged_dot packs rhs into zero-padded nr-wide strips", "[ragged_dot]") {
  for_each_target([&] {
    check_rhs_panel<float>(DType::kF32);
    check_rhs_panel<bf16>(DType::kBF16);
    check_rhs_panel<f16>(DType::kF16);
    const std::vector<float> rhs = {1, 2, 3, 4, 5, 6};  // [2, 3] as f32 into f64 strips of 2
    std::vector<double> packed(8, -1.0);
    pack_rhs_panel(DType::kF32, rhs.data(), 3, 2, 3, 2, packed.data());
    CHECK(packed == std::vector<double>{1, 2, 4, 5, 3, 0, 6, 0});
  });
}

TEST_CASE("cpu gemm packs f32 strips narrower than a vector (a transposed lhs)", "[cpu_gemm]") {
  // nr = mr of every micro-tile shape and more (3 .. 16), so that some strips take the whole
  // vector store whose extra lanes the next k overwrites and others the masked path; columns
  // that end in a partial strip and ones that do not; the buffer is exactly strips * depth * nr
  // floats with a guard after it that must stay untouched.
  for_each_target([&] {
    for (const int64_t nr : {3, 4, 5, 6, 8, 14, 16}) {
      for (const int64_t cols : {nr * 3, nr * 3 + 1, int64_t{37}}) {
        const int64_t depth = 5, ld = cols + 3;
        const int64_t strips = (cols + nr - 1) / nr;
        const std::vector<float> rhs = matrix<float>(depth, ld);
        const float guard = -7.0f;
        std::vector<float> packed(static_cast<size_t>(strips * depth * nr + 16), guard);
        pack_rhs_panel(DType::kF32, rhs.data(), ld, depth, cols, nr, packed.data());
        CAPTURE(nr, cols);
        for (int64_t s = 0; s < strips; ++s) {
          for (int64_t k = 0; k < depth; ++k) {
            for (int64_t n = 0; n < nr; ++n) {
              const int64_t col = s * nr + n;
              CAPTURE(s, k, n);
              REQUIRE(packed[(s * depth + k) * nr + n] == (col < cols ? value_at(k, col) : 0.0f));
            }
          }
        }
        for (size_t e = static_cast<size_t>(strips * depth * nr); e < packed.size(); ++e) {
          REQUIRE(packed[e] == guard);
        }
      }
    }
  });
}

TEST_CASE("cpu ragged_dot packs bf16 pairs for the native dot", "[ragged_dot]") {
  for_each_target([&] {
    auto pair = [](float even, float odd) {
      return uint32_t{float_to_bf16(even).bits} | (uint32_t{float_to_bf16(odd).bits} << 16);
    };
    // lhs: 3 rows, mr = 2. Odd depth 5 (stride 6): pairs (k0,k1), (k2,k3), (k4,0) on the
    // scalar path; even depths (stride 8 / 40) take the register transposition of 32-bit pairs,
    // 34 with a full and a partial chunk of 16 pairs.
    for (const auto& [depth, ld] :
         std::vector<std::pair<int64_t, int64_t>>{{5, 6}, {6, 8}, {34, 40}}) {
      CAPTURE(depth, ld);
      const int64_t pairs = (depth + 1) / 2;
      const std::vector<bf16> lhs = matrix<bf16>(3, ld);
      std::vector<uint32_t> lhs_packed(2 * pairs * 2, 0xDEADBEEF);
      pack_lhs_block_pairs(lhs.data(), ld, 3, depth, 2, lhs_packed.data());
      for (int64_t p = 0; p < 2; ++p) {
        for (int64_t i = 0; i < pairs; ++i) {
          for (int64_t r = 0; r < 2; ++r) {
            const int64_t row = p * 2 + r;
            const uint32_t expected =
                row >= 3 ? 0u
                         : pair(value_at(row, 2 * i),
                                2 * i + 1 < depth ? value_at(row, 2 * i + 1) : 0.0f);
            CAPTURE(p, i, r);
            CHECK(lhs_packed[(p * pairs + i) * 2 + r] == expected);
          }
        }
      }
    }
    // rhs: depth 3 x 20 columns (stride 24), nr = 16: rows (0,1) and (2,pad) interleaved.
    const std::vector<bf16> rhs = matrix<bf16>(3, 24);
    std::vector<uint32_t> rhs_packed(64, 0xDEADBEEF);
    pack_rhs_panel_pairs(rhs.data(), 24, 3, 20, 16, rhs_packed.data());
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t n = 0; n < 16; ++n) {
          const int64_t col = s * 16 + n;
          const uint32_t expected =
              col >= 20
                  ? 0u
                  : pair(value_at(2 * i, col), 2 * i + 1 < 3 ? value_at(2 * i + 1, col) : 0.0f);
          CAPTURE(s, i, n);
          CHECK(rhs_packed[(s * 2 + i) * 16 + n] == expected);
        }
      }
    }
  });
}

TEST_CASE("cpu ragged_dot output rounding matches the scalar conversions", "[ragged_dot]") {
  for_each_target([&] {
    // Ties in both directions, values just off ties, the overflow edges, subnormals, NaN, inf.
    std::vector<float> values = {0.0f,
                                 -0.0f,
                                 1.0f,
                                 -1.5f,
                                 3.14159f,
                                 1e-8f,
                                 -6e-8f,
                                 1e-40f,
                                 65504.0f,
                                 65519.0f,
                                 65520.0f,
                                 -65536.0f,
                                 3.0e38f,
                                 std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(),
                                 -std::numeric_limits<float>::quiet_NaN()};
    for (uint32_t bits :
         {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F817FFFu, 0x7F7FFFFFu, 0x7F7F8000u, 0x33000000u,
          0x33000001u, 0x387FE000u, 0x38801000u, 0x7F800001u, 0xFFC00001u}) {
      values.push_back(std::bit_cast<float>(bits));
    }
    while (values.size() < 45) values.push_back(static_cast<float>(values.size()) * 0.3333f);
    const int64_t cols = static_cast<int64_t>(values.size());
    // Two rows with strides, so both the vector body and the scalar tail see every value.
    std::vector<float> acc(2 * (cols + 3));
    for (int64_t c = 0; c < cols; ++c) acc[c] = acc[cols + 3 + c] = values[c];

    std::vector<bf16> out_bf16(2 * (cols + 1));
    store_rows(acc.data(), cols + 3, 2, cols, DType::kBF16, out_bf16.data(), cols + 1);
    std::vector<f16> out_f16(2 * (cols + 1));
    store_rows(acc.data(), cols + 3, 2, cols, DType::kF16, out_f16.data(), cols + 1);
    std::vector<float> out_f32(2 * cols);
    store_rows(acc.data(), cols + 3, 2, cols, DType::kF32, out_f32.data(), cols);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float x = values[c];
        CAPTURE(r, c, x, std::bit_cast<uint32_t>(x));
        if (std::isnan(x)) {
          CHECK(std::isnan(bf16_to_float(out_bf16[r * (cols + 1) + c])));
          CHECK(std::isnan(f16_to_float(out_f16[r * (cols + 1) + c])));
          CHECK(std::isnan(out_f32[r * cols + c]));
        } else {
          CHECK(out_bf16[r * (cols + 1) + c].bits == float_to_bf16(x).bits);
          CHECK(out_f16[r * (cols + 1) + c].bits == float_to_f16(x).bits);
          CHECK(std::bit_cast<uint32_t>(out_f32[r * cols + c]) == std::bit_cast<uint32_t>(x));
        }
      }
    }
  });
}

TEST_CASE("streamed packing writes what plain packing writes, on every target", "[cpu_gemm]") {
  // Aligned host buffers (the engine's packed storage), so the non-temporal paths run: rhs strips
  // a multiple of the vector wide; lhs micro-panels narrower than a register (mr 6 on AVX2, 14
  // on AVX-512: staged through L1) or a multiple of it (32: a transposed B); depth 40 leaves a
  // partial chunk of k after whole ones, 30 / 70 rows and columns a partial panel or strip.
  // Each buffer is checked bit for bit against the same packing with plain stores.
  using Words = std::vector<uint32_t, cpu::HostAllocator<uint32_t>>;
  const int64_t depth = 40, ld = 72;
  const std::vector<float> f32 = matrix<float>(72, ld);
  const std::vector<bf16> b16 = matrix<bf16>(72, ld);
  auto both = [](int64_t size, auto&& pack) {
    Words plain(static_cast<size_t>(size), 0xDEADBEEF), streamed(plain);
    REQUIRE(reinterpret_cast<uintptr_t>(streamed.data()) % 64 == 0);
    pack(plain.data(), false);
    pack(streamed.data(), true);
    CHECK(plain == streamed);
  };
  auto as_f32 = [](uint32_t* p) { return reinterpret_cast<float*>(p); };
  for_each_target([&] {
    for (int64_t mr : {6, 14, 32}) {
      for (int64_t rows : {30, 70}) {
        CAPTURE(mr, rows);
        const int64_t panels = (rows + mr - 1) / mr;
        both(panels * depth * mr, [&](uint32_t* out, bool stream) {
          pack_lhs_block(DType::kF32, f32.data(), ld, rows, depth, mr, as_f32(out), stream);
        });
        both(panels * depth / 2 * mr, [&](uint32_t* out, bool stream) {
          pack_lhs_block_pairs(b16.data(), ld, rows, depth, mr, out, stream);
        });
      }
    }
    for (int64_t cols : {32, 70}) {
      CAPTURE(cols);
      const int64_t strips = (cols + 31) / 32;
      both(strips * depth * 32, [&](uint32_t* out, bool stream) {
        pack_rhs_panel(DType::kF32, f32.data(), ld, depth, cols, 32, as_f32(out), stream);
      });
      both(strips * depth * 32, [&](uint32_t* out, bool stream) {
        pack_rhs_panel(DType::kBF16, b16.data(), ld, depth, cols, 32, as_f32(out), stream);
      });
      both(strips * depth / 2 * 32, [&](uint32_t* out, bool stream) {
        pack_rhs_panel_pairs(b16.data(), ld, depth, cols, 32, out, stream);
      });
    }
  });
}

TEST_CASE("the dequantizing pack decodes every i8 and e4m3 code exactly, on every target",
          "[cpu_gemm]") {
  // Every code in each row (256 columns, then 45: a partial vector), strips of 48 (padded) and
  // of the whole width; scales of both signs, two K blocks. Each packed value must be the
  // scalar decoding times its scale, bit for bit (NaN for e4m3's NaN codes).
  const int64_t depth = 4, block = 2;
  std::vector<uint8_t> codes(static_cast<size_t>(depth * 256));
  for (int64_t k = 0; k < depth; ++k) {
    for (int64_t c = 0; c < 256; ++c) codes[k * 256 + c] = static_cast<uint8_t>((c + 37 * k) % 256);
  }
  std::vector<float> scale(static_cast<size_t>(2 * 256));
  for (size_t i = 0; i < scale.size(); ++i)
    scale[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (0.5f + i / 512.0f);
  for_each_target([&] {
    for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
      for (int64_t cols : {int64_t{256}, int64_t{45}}) {
        for (int64_t nr : {int64_t{48}, cols}) {
          CAPTURE(dtype_name(dtype), cols, nr);
          const int64_t strips = (cols + nr - 1) / nr;
          std::vector<float> packed(static_cast<size_t>(strips * depth * nr), -7.0f);
          pack_rhs_panel_dequant(dtype, codes.data(), 256, depth, cols, nr, scale.data(), 256, 0,
                                 block, packed.data());
          int64_t wrong = 0;
          for (int64_t k = 0; k < depth; ++k) {
            for (int64_t c = 0; c < strips * nr; ++c) {
              const float got = packed[(c / nr) * depth * nr + k * nr + c % nr];
              if (c >= cols) {
                wrong += got != 0.0f;
                continue;
              }
              const uint8_t code = codes[k * 256 + c];
              const float decoded = dtype == DType::kI8
                                        ? static_cast<float>(static_cast<int8_t>(code))
                                        : f8e4m3_to_float(f8e4m3{code});
              const float want = decoded * scale[(k / block) * 256 + c];
              wrong += std::isnan(want)
                           ? !std::isnan(got)
                           : std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want);
            }
          }
          CHECK(wrong == 0);
        }
      }
    }
  });
}
