// Tests for the shared single-threaded GEMM tile against a double-precision product.
#include "ops/common/cpu_gemm/gemm.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/cpu/amx.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/dtype.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "tests/simd_targets.h"
#include "tests/tile_modes.h"

using namespace tokamax;

namespace {

struct Case {
  int64_t M, N, K;
  bool transposed;  // B stored as B^T [N, K]
  DType dtype;
  GemmEngine engine;
  bool accumulate;
  bool a_transposed = false;  // A stored as A^T [K, M]
  int packed = 0;             // 0: both strided; 1: A packed beforehand; 2: B packed beforehand
  bool rhs_in_place = false;  // CpuGemmOptions::rhs_in_place
};

// Stores `values` as `dtype` and returns them rounded to what was stored.
std::vector<char> store(DType dtype, std::vector<double>& values) {
  std::vector<char> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(values[i]);
      values[i] = static_cast<float>(values[i]);
    } else if (dtype == DType::kBF16) {
      const bf16 v = double_to_bf16(values[i]);
      reinterpret_cast<bf16*>(bytes.data())[i] = v;
      values[i] = bf16_to_float(v);
    } else {
      const f16 v = double_to_f16(values[i]);
      reinterpret_cast<f16*>(bytes.data())[i] = v;
      values[i] = f16_to_float(v);
    }
  }
  return bytes;
}

void check_case(const Case& t) {
  CAPTURE(t.M, t.N, t.K, t.transposed, t.a_transposed, dtype_name(t.dtype),
          static_cast<int>(t.engine), t.accumulate, t.packed, t.rhs_in_place,
          cpu::tile_mode_name(cpu::tile_mode()));
  const int64_t lda = t.a_transposed ? t.M + 3 : t.K + 3;  // A^T [K, M] or A [M, K], strided
  const int64_t ldb = t.transposed ? t.K + 5 : t.N + 7;    // B^T [N, K] or B [K, N]
  std::vector<double> a(static_cast<size_t>((t.a_transposed ? t.K : t.M) * lda)),
      b(static_cast<size_t>((t.transposed ? t.N : t.K) * ldb));
  uint64_t counter = 0;
  for (double& x : a) x = uniform01(7, 1, counter++) * 2 - 1;
  for (double& x : b) x = uniform01(8, 2, counter++) * 2 - 1;
  const std::vector<char> a_bytes = store(t.dtype, a), b_bytes = store(t.dtype, b);
  const int64_t ldc = t.N + 2;
  // 16 guard rows below C: a micro-tile must not write the padding rows of its panel.
  std::vector<float> c(static_cast<size_t>((t.M + 16) * ldc), 0.5f);
  CpuGemmOptions options;
  options.engine = t.engine;
  options.tk = 40;  // several K blocks
  options.tn = 48;  // several panels
  options.rhs_in_place = t.rhs_in_place;
  const GemmOperand a_op{t.dtype, a_bytes.data(), lda, t.a_transposed};
  const GemmOperand b_op{t.dtype, b_bytes.data(), ldb, t.transposed};
  GemmPackStorage storage(3, 1e30f);  // grown by the packer; stale contents must not matter
  if (t.packed == 1) {
    const PackedGemmOperand packed = pack_gemm_lhs(a_op, t.M, t.K, options, storage);
    cpu_gemm_f32(packed, b_op, t.N, c.data(), ldc, t.accumulate, options);
  } else if (t.packed == 2) {
    const PackedGemmOperand packed = pack_gemm_rhs(b_op, t.K, t.N, options, storage);
    cpu_gemm_f32(a_op, packed, t.M, c.data(), ldc, t.accumulate, options);
  } else {
    cpu_gemm_f32(a_op, b_op, t.M, t.N, t.K, c.data(), ldc, t.accumulate, options);
  }
  for (int64_t i = 0; i < t.M; ++i) {
    for (int64_t j = 0; j < t.N; ++j) {
      double want = t.accumulate ? 0.5 : 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < t.K; ++k) {
        const double bv = t.transposed ? b[j * ldb + k] : b[k * ldb + j];
        const double av = t.a_transposed ? a[k * lda + i] : a[i * lda + k];
        want += av * bv;
        magnitude += std::abs(av * bv);
      }
      REQUIRE(std::abs(c[i * ldc + j] - want) <= (t.K + 2) * 0x1p-24 * (magnitude + 1.0));
    }
    // Padding columns of C are untouched.
    REQUIRE(c[i * ldc + t.N] == 0.5f);
  }
  for (int64_t i = t.M * ldc; i < (t.M + 16) * ldc; ++i) REQUIRE(c[static_cast<size_t>(i)] == 0.5f);
}

}  // namespace

TEST_CASE("cpu_gemm_f32 matches a double product for every operand layout and dtype",
          "[cpu_gemm]") {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool transposed : {false, true}) {
      for (bool accumulate : {false, true}) {
        for (bool a_transposed : {false, true}) {
          check_case(
              {37, 53, 101, transposed, dtype, GemmEngine::kF32Fma, accumulate, a_transposed});
          check_case({1, 5, 3, transposed, dtype, GemmEngine::kF32Fma, accumulate, a_transposed});
        }
      }
    }
  }
}

TEST_CASE("cpu_gemm_f32 with one side packed beforehand matches, for every layout and K block",
          "[cpu_gemm]") {
  for (int packed : {1, 2}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool transposed : {false, true}) {
        for (bool a_transposed : {false, true}) {
          // K = 101: three K blocks of 40 and a short one; N = 53: two panels of 48 and a part.
          check_case(
              {37, 53, 101, transposed, dtype, GemmEngine::kF32Fma, true, a_transposed, packed});
          check_case(
              {1, 5, 3, transposed, dtype, GemmEngine::kF32Fma, false, a_transposed, packed});
          if (gemm_has_native_bf16() && dtype == DType::kBF16) {
            check_case(
                {29, 70, 67, transposed, dtype, GemmEngine::kBf16Dot, false, a_transposed, packed});
          }
        }
      }
    }
  }
}

TEST_CASE("packing in pieces, in any order, gives the packed layout", "[cpu_gemm]") {
  // K = 101 in blocks of 40 (two whole, one short); 53 rows or columns, in panels of 32 for B
  // (one whole, one part; whole micro-tile strips): A has 3 pieces, B 6. The storage starts
  // with a sentinel; the pieces run last to first, so a piece that wrote past its part into
  // one already packed, or a part no piece wrote, shows against the layout written out element
  // by element (gemm.h: A per K block [ceil(M / mr)][depth][mr], B per K block and panel
  // [ceil(cols / nr)][depth][nr], zeros past M or N).
  constexpr float kSentinel = -1234.5f;
  CpuGemmOptions options;
  options.tk = 40;
  options.tn = 32;
  const int64_t K = 101, extent = 53;
  std::vector<float> values(static_cast<size_t>(K * extent));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97) - 48.0f;
  for (bool is_lhs : {true, false}) {
    for (bool transposed : {false, true}) {
      // In pieces, with plain or non-temporal stores (pack.h: `stream`), or all at once.
      for (const auto& [in_pieces, stream] :
           {std::pair{false, false}, {true, false}, {true, true}}) {
        CAPTURE(is_lhs, transposed, in_pieces, stream);
        // A [extent, K] or A^T [K, extent]; B [K, extent] or B^T [extent, K].
        const bool rows_are_k = is_lhs == transposed;
        const int64_t ld = rows_are_k ? extent : K;
        const GemmOperand source{DType::kF32, values.data(), ld, transposed};
        GemmPackStorage storage;
        PackedGemmOperand packed = is_lhs ? reserve_gemm_lhs(extent, K, options, storage)
                                          : reserve_gemm_rhs(K, extent, options, storage);
        storage.assign(storage.size(), kSentinel);
        // Host storage is 64-byte aligned, so `stream` takes its streaming stores here.
        REQUIRE(reinterpret_cast<uintptr_t>(storage.data()) % 64 == 0);
        const int64_t pieces = gemm_pack_pieces(packed);
        REQUIRE(pieces == 3 * (is_lhs ? 1 : (extent + packed.tn - 1) / packed.tn));
        if (in_pieces) {
          for (int64_t piece = pieces - 1; piece >= 0; --piece) {
            pack_gemm_piece(source, packed, piece, stream);
          }
        } else {
          packed = is_lhs ? pack_gemm_lhs(source, extent, K, options, storage)
                          : pack_gemm_rhs(source, K, extent, options, storage);
        }
        GemmPackStorage want(storage.size(), kSentinel);
        const int64_t tile =
            is_lhs ? packed.mr : int64_t{packed.nr_vectors} * cpu::simd_f32_lanes();
        const int64_t padded = (extent + tile - 1) / tile * tile;
        for (int64_t k0 = 0; k0 < K; k0 += packed.tk) {
          const int64_t depth = std::min(packed.tk, K - k0), base = padded * k0;
          for (int64_t e = 0; e < padded; ++e) {
            for (int64_t k = k0; k < k0 + depth; ++k) {
              const float v = e >= extent  ? 0.0f
                              : rows_are_k ? values[static_cast<size_t>(k * ld + e)]
                                           : values[static_cast<size_t>(e * ld + k)];
              want[static_cast<size_t>(base + e / tile * depth * tile + (k - k0) * tile +
                                       e % tile)] = v;
            }
          }
        }
        CHECK(storage == want);
      }
    }
  }
  GemmPackStorage storage;
  CHECK(gemm_pack_pieces(reserve_gemm_rhs(0, 8, options, storage)) == 0);
  CHECK(gemm_pack_pieces(reserve_gemm_lhs(0, 8, options, storage)) == 0);
}

TEST_CASE("a packed operand is reused across products and refused with other options",
          "[cpu_gemm]") {
  // B = identity [4, 4]: A B = A for every A, from one packing.
  std::vector<float> identity(16, 0.0f), a(8), c(8);
  for (int i = 0; i < 4; ++i) identity[i * 5] = 1.0f;
  CpuGemmOptions options;
  GemmPackStorage storage;
  const PackedGemmOperand b =
      pack_gemm_rhs({DType::kF32, identity.data(), 4, false}, 4, 4, options, storage);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 8; ++i) a[i] = static_cast<float>(i * (round + 1));
    cpu_gemm_f32({DType::kF32, a.data(), 4, false}, b, 2, c.data(), 4, false, options);
    CHECK(c == a);
  }
  CpuGemmOptions other = options;
  other.tk = 2;  // other K blocks than it was packed with
  CHECK_THROWS_AS(cpu_gemm_f32({DType::kF32, a.data(), 4, false}, b, 2, c.data(), 4, false, other),
                  InvalidArgument);
  // A B with a packed B offered as A.
  CHECK_THROWS_AS(
      cpu_gemm_f32(b, {DType::kF32, a.data(), 4, false}, 4, c.data(), 4, false, options),
      InvalidArgument);
}

TEST_CASE("cpu_gemm_f32 native bf16 path matches, odd depth included", "[cpu_gemm]") {
  if (!gemm_has_native_bf16()) {
    CHECK_THROWS_AS(check_case({4, 4, 4, false, DType::kBF16, GemmEngine::kBf16Dot, false}),
                    NotImplemented);
    return;
  }
  for (bool transposed : {false, true}) {
    for (bool a_transposed : {false, true}) {
      check_case({29, 70, 67, transposed, DType::kBF16, GemmEngine::kBf16Dot, false, a_transposed});
      check_case({3, 17, 1, transposed, DType::kBF16, GemmEngine::kBf16Dot, true, a_transposed});
    }
  }
}

TEST_CASE("cpu_gemm_f32 on the AMX engine matches, for every layout, packing and edge",
          "[cpu_gemm][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) {
    REQUIRE(gemm_has_amx_bf16());
    for (bool transposed : {false, true}) {
      for (bool a_transposed : {false, true}) {
        for (int packed : {0, 1, 2}) {
          // K = 101 (odd: the last pair's high half and 15 pad pairs per tile row are zero),
          // blocks of 40; N = 53 (strips of 16 with a 5-column edge); M = 37 (a 5-row edge
          // panel after a pair of whole ones).
          check_case({37, 53, 101, transposed, DType::kBF16, GemmEngine::kAmxBf16, packed == 1,
                      a_transposed, packed});
          check_case({3, 17, 1, transposed, DType::kBF16, GemmEngine::kAmxBf16, true, a_transposed,
                      packed});
          // Whole tiles only: 2 x 2 blocks whose accumulators start from and store to C.
          check_case({64, 64, 96, transposed, DType::kBF16, GemmEngine::kAmxBf16, packed != 2,
                      a_transposed, packed});
        }
      }
    }
    for (int64_t M = 1; M <= 33; M += 4) {
      check_case({M, 37, 23, false, DType::kBF16, GemmEngine::kAmxBf16, M % 3 == 0});
    }
  });
}

TEST_CASE("the AMX engine refuses other dtypes, and runs nowhere without tiles or emulation",
          "[cpu_gemm][amx]") {
  {
    testing::ScopedTileMode scoped(cpu::TileMode::kEmulated);
    CHECK_THROWS_AS(check_case({4, 4, 4, false, DType::kF32, GemmEngine::kAmxBf16, false}),
                    NotImplemented);
  }
  testing::ScopedTileMode scoped(cpu::TileMode::kNone);
  CHECK_FALSE(gemm_has_amx_bf16());
  CHECK_THROWS_AS(check_case({4, 4, 4, false, DType::kBF16, GemmEngine::kAmxBf16, false}),
                  NotImplemented);
}

TEST_CASE("cpu_gemm_f32 reading B in place matches, on every target, and packs what it cannot",
          "[cpu_gemm]") {
  // N = 96: whole strips on every target (nr 32, 16 or 3), in two panels of 64 on AVX-512 (tn 48
  // rounded up to whole strips); N = 53 and a transposed B: packed as without the option.
  tokamax::testing::for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (bool a_transposed : {false, true}) {
        for (int64_t N : {96, 53}) {
          check_case(
              {37, N, 101, false, dtype, GemmEngine::kF32Fma, a_transposed, a_transposed, 0, true});
          check_case({3, N, 7, false, dtype, GemmEngine::kF32Fma, true, a_transposed, 1, true});
        }
        check_case({37, 96, 101, true, dtype, GemmEngine::kF32Fma, false, a_transposed, 0, true});
      }
    }
  });
}

TEST_CASE("cpu_gemm_f32 matches for every row count of a last partial micro-panel", "[cpu_gemm]") {
  // M from 1 to 2 mr + 1 (mr = 14 on AVX-512, 6 on AVX2): the last panel of 1 to mr rows runs a
  // tail tile of 4 or 8 accumulator rows, or the whole mr (micro_tile.h: dispatch_tile_rows);
  // rows past M must be neither read nor written, for f32 and the native bf16 kernel alike.
  for (int64_t M = 1; M <= 29; ++M) {
    CAPTURE(M);
    check_case({M, 37, 23, false, DType::kF32, GemmEngine::kF32Fma, M % 2 == 0, false});
    if (gemm_has_native_bf16())
      check_case({M, 37, 23, false, DType::kBF16, GemmEngine::kBf16Dot, M % 3 == 0});
  }
}

TEST_CASE("cpu_gemm_f32 with K = 0 writes zeros or leaves C alone", "[cpu_gemm]") {
  std::vector<float> c(6, 2.0f);
  const float x = 1.0f;
  cpu_gemm_f32({DType::kF32, &x, 0, false}, {DType::kF32, &x, 3, false}, 2, 3, 0, c.data(), 3,
               true);
  CHECK(c[5] == 2.0f);
  cpu_gemm_f32({DType::kF32, &x, 0, false}, {DType::kF32, &x, 3, false}, 2, 3, 0, c.data(), 3,
               false);
  CHECK(c[5] == 0.0f);
}

TEST_CASE("cpu_gemm_f32 rejects a micro-tile shape the CPU lacks", "[cpu_gemm]") {
  std::vector<float> a(4, 1.0f), c(4);
  CpuGemmOptions options;
  options.mr = 13;
  options.nr_vectors = 5;
  CHECK_THROWS_AS(cpu_gemm_f32({DType::kF32, a.data(), 2, false}, {DType::kF32, a.data(), 2, false},
                               2, 2, 2, c.data(), 2, false, options),
                  NotImplemented);
}

TEST_CASE("cpu_gemm_f32 matches on the AVX2 and scalar targets too, every operand layout",
          "[cpu_gemm]") {
  // Their transposes are 8 lanes wide (none on scalar), so the default micro-tile's strips are
  // wider than a register there: the chunked register transposes and the scalar packers run.
  tokamax::testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool transposed : {false, true}) {
        for (bool a_transposed : {false, true}) {
          check_case({37, 53, 101, transposed, dtype, GemmEngine::kF32Fma, false, a_transposed});
          check_case({5, 29, 3, transposed, dtype, GemmEngine::kF32Fma, true, a_transposed});
        }
      }
    }
  });
}

TEST_CASE("the streaming kernel reads quantized rhs as the dequantized values, on every target",
          "[cpu_gemm]") {
  // Codes decoded and scaled as they are read must give the bits the same kernel gives on the
  // weights pack_rhs_panel_dequant wrote as f32 (the same values, summed in the same order):
  // K = 11 (a tail after whole groups of 4 rows, scale blocks of 3 rows that straddle them),
  // 37 columns (a partial vector), every row count.
  const int64_t K = 11, cols = 37, block = 3, blocks = (K + block - 1) / block;
  std::vector<uint8_t> codes(static_cast<size_t>(K * cols));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 97 + 13) % 256);
  for (size_t i = 0; i < codes.size(); i += 41) codes[i] = 0x7E;  // e4m3's largest finite
  std::vector<float> scale(static_cast<size_t>(blocks * cols));
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.25f + static_cast<float>(i % 7) / 16.0f;
  std::vector<float> lhs(static_cast<size_t>(kCpuStreamRows * K));
  for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = static_cast<float>(i % 5) - 1.75f;
  tokamax::testing::for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
      std::vector<float> dequantized(static_cast<size_t>(K * cols));
      pack_rhs_panel_dequant(dtype, codes.data(), cols, K, cols, cols, scale.data(), cols, 0, block,
                             dequantized.data());
      for (int64_t rows = 1; rows <= kCpuStreamRows; ++rows) {
        CAPTURE(dtype_name(dtype), rows);
        std::vector<float> want(static_cast<size_t>(rows * cols)), got(want.size());
        StreamArgs args{};
        args.lhs = lhs.data();
        args.lhs_dtype = DType::kF32;
        args.rows = rows;
        args.K = K;
        args.cols = cols;
        args.ldc = cols;
        args.rhs = dequantized.data();
        args.rhs_dtype = DType::kF32;
        args.ldb = cols;
        args.out = want.data();
        REQUIRE(stream_rows_f32(args));
        args.rhs = codes.data();
        args.rhs_dtype = dtype;
        args.out = got.data();
        CHECK_FALSE(stream_rows_f32(args));  // no scales: declined
        args.scale = scale.data();
        args.scale_ld = cols;
        args.scale_block = block;
        REQUIRE(stream_rows_f32(args));
        int64_t differing = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          differing += std::isnan(want[i]) ? !std::isnan(got[i]) : want[i] != got[i];
        }
        CHECK(differing == 0);
      }
    }
  });
}

TEST_CASE("cpu_gemm_f32 takes quantized B as its dequantized values", "[cpu_gemm]") {
  // i8 and e4m3 codes with per-block scales (block 5 across K blocks of 16: tk 16): the same bits
  // as the product with the dequantized f32 weights, directly and packed beforehand; A or a
  // transposed B as codes, or B without scales, are refused.
  const int64_t M = 9, K = 37, N = 45, block = 5, blocks = (K + block - 1) / block;
  std::vector<uint8_t> codes(static_cast<size_t>(K * N));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 89 + 7) % 256);
  for (size_t i = 0; i < codes.size(); ++i) {
    if ((codes[i] & 0x7F) == 0x7F) codes[i] = 0x33;  // no NaN codes: products stay comparable
  }
  std::vector<float> scale(static_cast<size_t>(blocks * N)), lhs(static_cast<size_t>(M * K));
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.5f + static_cast<float>(i % 9) / 32.0f;
  for (size_t i = 0; i < lhs.size(); ++i) lhs[i] = static_cast<float>(i % 11) / 4.0f - 1.0f;
  const CpuGemmOptions options{.tk = 16, .tn = 32};
  for (DType dtype : {DType::kI8, DType::kF8E4M3}) {
    CAPTURE(dtype_name(dtype));
    std::vector<float> dequantized(static_cast<size_t>(K * N));
    pack_rhs_panel_dequant(dtype, codes.data(), N, K, N, N, scale.data(), N, 0, block,
                           dequantized.data());
    std::vector<float> want(static_cast<size_t>(M * N)), got(want.size()), packed(want.size());
    cpu_gemm_f32({DType::kF32, lhs.data(), K}, {DType::kF32, dequantized.data(), N}, M, N, K,
                 want.data(), N, false, options);
    GemmOperand b{dtype, codes.data(), N};
    b.scale = scale.data();
    b.scale_ld = N;
    b.scale_block = block;
    cpu_gemm_f32({DType::kF32, lhs.data(), K}, b, M, N, K, got.data(), N, false, options);
    CHECK(got == want);
    GemmPackStorage storage;
    const PackedGemmOperand pb = pack_gemm_rhs(b, K, N, options, storage);
    cpu_gemm_f32({DType::kF32, lhs.data(), K}, pb, M, packed.data(), N, false, options);
    CHECK(packed == want);
    GemmOperand unscaled{dtype, codes.data(), N};
    CHECK_THROWS_AS(cpu_gemm_f32({DType::kF32, lhs.data(), K}, unscaled, M, N, K, got.data(), N,
                                 false, options),
                    NotImplemented);
    GemmOperand transposed = b;
    transposed.transposed = true;
    transposed.ld = K;
    CHECK_THROWS_AS(cpu_gemm_f32({DType::kF32, lhs.data(), K}, transposed, M, N, K, got.data(), N,
                                 false, options),
                    NotImplemented);
    CHECK_THROWS_AS(cpu_gemm_f32(b, {DType::kF32, dequantized.data(), N}, K, N, K, got.data(), N,
                                 false, options),
                    NotImplemented);
  }
}

TEST_CASE("row_dots_f32 gives each query's dot product with rows read in place, on every target",
          "[cpu_gemm]") {
  // bf16 and f32 rows 50 apart, K = 37 (a tail past whole vectors), every M; within f32
  // rounding of the double products; M = 5 and i8 rows declined.
  const int64_t K = 37, n = 9, ld = 50;
  std::vector<float> q(static_cast<size_t>(4 * K)), rows32(static_cast<size_t>(n * ld));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) / 4.0f - 0.5f;
  for (size_t i = 0; i < rows32.size(); ++i) rows32[i] = static_cast<float>(i % 11) / 8.0f - 0.6f;
  std::vector<bf16> rows16(rows32.size());
  for (size_t i = 0; i < rows32.size(); ++i) rows16[i] = float_to_bf16(rows32[i]);
  tokamax::testing::for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t M = 1; M <= 4; ++M) {
        CAPTURE(dtype_name(dtype), M);
        std::vector<float> out(static_cast<size_t>(M * n), -1.0f);
        const void* rows = dtype == DType::kF32 ? static_cast<const void*>(rows32.data())
                                                : static_cast<const void*>(rows16.data());
        REQUIRE(row_dots_f32({q.data(), M, rows, dtype, ld, n, K, out.data(), n}));
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.0, mag = 0.0;
            for (int64_t x = 0; x < K; ++x) {
              const double r = dtype == DType::kF32
                                   ? rows32[j * ld + x]
                                   : static_cast<double>(to_float(rows16[j * ld + x]));
              want += q[m * K + x] * r;
              mag += std::fabs(q[m * K + x] * r);
            }
            CHECK(std::fabs(out[m * n + j] - want) <= 4e-7 * K * mag + 1e-30);
          }
        }
      }
    }
    std::vector<float> out(static_cast<size_t>(5 * n));
    CHECK_FALSE(row_dots_f32({q.data(), 5, rows32.data(), DType::kF32, ld, n, K, out.data(), n}));
    CHECK_FALSE(row_dots_f32({q.data(), 1, rows32.data(), DType::kI8, ld, n, K, out.data(), n}));
  });
}
