// Tests for the flash-attention core's packing helpers (layouts and bf16 rounding).
#include "ops/common/flash_attention/pack.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/dot_product_attention/api.h"

using namespace tokamax;

TEST_CASE("pack_p_pairs: bf16 pair layout, rounding to nearest even, zero padding", "[attention]") {
  // P [3, 5] (row stride 6), mr = 2: two micro-panels, the second with one real row; odd n
  // pads each last pair's high half with +0.
  std::vector<float> s(18);
  for (int i = 0; i < 18; ++i) s[i] = 0.01f * static_cast<float>(i + 1);
  s[0] = 1.0f + 0x1.0p-8f;  // a tie between two bf16 values: rounds to the even one, 1.0
  std::vector<uint32_t> out(2 * 3 * 2, 0xFFFFFFFFu);
  pack_p_pairs(s.data(), 6, 3, 5, 2, out.data());
  auto bits = [](float x) { return static_cast<uint32_t>(float_to_bf16(x).bits); };
  CHECK((out[0] & 0xFFFFu) == bits(1.0f));
  CHECK(out[0] >> 16 == bits(s[1]));
  CHECK(out[1] == (bits(s[6]) | (bits(s[7]) << 16)));            // row 1, pair 0
  CHECK(out[2 * 2 + 0] == bits(s[4]));                           // row 0, last (odd) pair
  CHECK(out[2 * 3 + 0] == (bits(s[12]) | (bits(s[13]) << 16)));  // panel 1, row 2
  CHECK(out[2 * 3 + 1] == 0u);                                   // panel 1, padding row
  CHECK(out[2 * 3 + 5] == 0u);

  // The vectorized variant (avx512_bf16 CPUs) gives the same bits, here with an even n and
  // rows long enough for whole 32-lane conversions.
  std::vector<float> wide(3 * 64);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = 1.0f / static_cast<float>(i + 3);
  wide[5] = 1.0f + 0x1.0p-8f;
  std::vector<uint32_t> scalar(2 * 32 * 2), fast(2 * 32 * 2);
  std::vector<bf16> rounded(3 * 64);
  pack_p_pairs(wide.data(), 64, 3, 64, 2, scalar.data());
  pack_p_pairs_rounded(wide.data(), 64, 3, 64, 2, rounded.data(), fast.data());
  CHECK(scalar == fast);
}

// pack_k and pack_k_panels lay K out alike ([t / width][D][width], zero past t): packs kv head 1
// of k [1, 5, 2, 3] in strips of 4 keys with `pack` and checks every element.
namespace {
template <typename Pack>
void check_k_strips(Pack&& pack) {
  const BoundArgs args = dot_product_attention_op().bind(
      {{"q", "f32[1,2,2,3]"}, {"k", "f32[1,5,2,3]"}, {"v", "f32[1,5,2,3]"}});
  const AttentionProblem p = AttentionProblem::from(args);
  const TensorMap inputs = dot_product_attention_op().make_inputs(args, 1);
  const Tensor& k = inputs.at("k");
  const int64_t width = 4;
  std::vector<float> out(2 * 3 * width, -1.0f);
  pack(p, k.raw(), 0, 1, width, /*native=*/false, out.data());  // kv head 1
  for (int64_t j = 0; j < 8; ++j) {
    for (int64_t x = 0; x < 3; ++x) {
      const float expected = j < 5 ? static_cast<float>(k.get((j * 2 + 1) * 3 + x)) : 0.0f;
      CHECK(out[(j / width) * 3 * width + x * width + j % width] == expected);
    }
  }
}
}  // namespace

TEST_CASE("pack_k: K^T strips of nr keys, zero past t", "[attention]") {
  check_k_strips([](auto&&... a) { pack_k(a...); });
}

TEST_CASE("pack_pt_pairs_rounded: P^T rows paired into rhs strips, odd n padded with +0",
          "[attention]") {
  // P^T [5, 64] (row stride 64), nr = 32: two strips of three pairs, the last pair (row 4, +0).
  const int64_t n = 5, cols = 64, nr = 32, pairs = 3;
  std::vector<float> s(static_cast<size_t>(n * cols));
  for (size_t i = 0; i < s.size(); ++i) s[i] = 1.0f / static_cast<float>(i + 3);
  s[7] = 1.0f + 0x1.0p-8f;  // a tie: rounds to the even bf16, 1.0
  std::vector<bf16> rounded(s.size());
  std::vector<uint32_t> out(static_cast<size_t>(2 * pairs * nr), 0xFFFFFFFFu);
  pack_pt_pairs_rounded(s.data(), cols, n, cols, nr, rounded.data(), out.data());
  auto bits = [](float x) { return static_cast<uint32_t>(float_to_bf16(x).bits); };
  CHECK((out[7] & 0xFFFFu) == bits(1.0f));
  for (int64_t i = 0; i < pairs; ++i) {
    for (int64_t m = 0; m < cols; ++m) {
      const uint32_t lo = bits(s[2 * i * cols + m]);
      const uint32_t hi = 2 * i + 1 < n ? bits(s[(2 * i + 1) * cols + m]) : 0u;
      CAPTURE(i, m);
      REQUIRE(out[(m / nr) * pairs * nr + i * nr + m % nr] == (lo | (hi << 16)));
    }
  }
}

TEST_CASE("pack_k_panels: K as lhs micro-panels of mr keys, zero past t", "[attention]") {
  check_k_strips([](auto&&... a) { pack_k_panels(a...); });
}

// Paged K and V (ragged_paged_attention's cache: K and V of each kv head interleaved in rows of
// 2 h Dp) pack exactly as the same keys stored contiguously: page sizes that are whole panels
// (read in place), that are not (staged), keys across several 256-key pieces, f32 and bf16 pairs.
TEST_CASE("paged K and V pack as the same keys stored contiguously", "[attention]") {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int64_t ps : {16, 7}) {
      const bool native = dtype == DType::kBF16;
      FlashAttentionProblem p;
      p.batch = {1};
      p.T = 1;
      p.t = 301;
      p.H = p.h = 2;
      p.D = p.d = 6;
      p.dtype = dtype;
      const int64_t Dp = 8, pages_per = (p.t + ps - 1) / ps, pages = pages_per + 3;
      // The contiguous [1, t, h, D] K and V, and the cache [pages, ps, 2 h, Dp] holding them in
      // pages of the table (reversed, with a gap), the padding lanes and free pages garbage.
      Tensor k(TensorSpec{dtype, {1, p.t, p.h, p.D}}), v(TensorSpec{dtype, {1, p.t, p.h, p.D}});
      Tensor cache(TensorSpec{dtype, {pages, ps, 2 * p.h, Dp}});
      for (int64_t e = 0; e < cache.num_elements(); ++e) cache.set(e, 1000.0 + e % 97);
      FlashKvPages table;
      for (int64_t q = 0; q < pages_per; ++q) table.pages.push_back(pages - 1 - q - (q > 2));
      table.pages_per_batch = pages_per;
      table.page_size = ps;
      table.row_stride = 2 * p.h * Dp;
      table.page_stride = ps * table.row_stride;
      table.head_stride = 2 * Dp;
      table.value_offset = Dp;
      for (int64_t j = 0; j < p.t; ++j) {
        for (int64_t i = 0; i < p.h; ++i) {
          for (int64_t x = 0; x < p.D; ++x) {
            const double kx = 0.25 * static_cast<double>((j * 7 + i * 3 + x) % 29) - 3.0;
            const double vx = 0.5 * static_cast<double>((j * 5 + i + x * 11) % 31) - 7.0;
            k.set((j * p.h + i) * p.D + x, kx);
            v.set((j * p.h + i) * p.D + x, vx);
            cache.set(table.at(0, j, i) + x, kx);
            cache.set(table.at(0, j, i) + table.value_offset + x, vx);
          }
        }
      }
      FlashAttentionProblem paged = p;
      paged.kv_pages = table;
      CAPTURE(dtype_name(dtype), ps);
      const int64_t words = native ? (p.D + 1) / 2 : p.D, width = 8, bkv = 64;
      const int64_t floats = round_up(p.t, 48) * words;
      for (int64_t i = 0; i < p.h; ++i) {
        std::vector<float> a(static_cast<size_t>(floats), -1.0f), b = a;
        pack_k_panels(p, k.raw(), 0, i, width, native, a.data());
        pack_k_panels(paged, cache.raw(), 0, i, width, native, b.data());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        pack_k(p, k.raw(), 0, i, 48, native, a.data());
        pack_k(paged, cache.raw(), 0, i, 48, native, b.data());
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        const int64_t v_floats = (p.t + bkv - 1) / bkv * (native ? bkv / 2 : bkv) * width;
        std::vector<float> va(static_cast<size_t>(v_floats), -1.0f), vb = va;
        pack_v(p, v.raw(), 0, i, width, bkv, native, va.data());
        pack_v(paged, cache.raw(), 0, i, width, bkv, native, vb.data());
        CHECK(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0);
        // A block inside one page is read in place; one across pages is staged, row by row.
        std::vector<char> staging;
        const KvRows inside = kv_rows(paged, cache.raw(), true, 0, i, ps, ps - 1, staging);
        CHECK(inside.data == static_cast<const char*>(cache.raw()) +
                                 (table.at(0, ps, i) + Dp) * dtype_size(dtype));
        CHECK(inside.ld == table.row_stride);
        const KvRows across = kv_rows(paged, cache.raw(), false, 0, i, ps - 2, 5, staging);
        CHECK(across.data == staging.data());
        CHECK(across.ld == p.D);
        for (int64_t r = 0; r < 5; ++r) {
          CHECK(attention_load(dtype, across.data, r * p.D + 1) ==
                attention_load(dtype, k.raw(), ((ps - 2 + r) * p.h + i) * p.D + 1));
        }
      }
    }
  }
}
