// AMX tile operations in two builds with one interface: HardwareTiles (the instructions) and
// EmulatedTiles (portable C++ with the same semantics), so every tile kernel (the GEMM engine's,
// the peak measurement's) runs and is tested on any CPU.
//
// Dimensions.
//   rows    rows of a tile (<= 16)
//   colsb   bytes of a tile row (<= 64): 16 f32 / s32, 32 bf16 (16 pairs), 64 int8 (16 quads)
//   M, N    rows and f32/s32 columns of an accumulator tile C
//   Kp      pairs (bf16) or quads (int8) of the contraction one product covers: A is [M][Kp]
//           groups row-major, B is [Kp][N] groups (the "VNNI" layout: a B row holds, for each
//           of its N columns, the pair / quad of consecutive k of that column)
//
// The tile numbers are template parameters: an instruction names its registers, so a kernel
// fixes them at compile time.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tokamax::amx {

inline constexpr int kTiles = 8;
inline constexpr int kMaxRows = 16;
inline constexpr int kMaxColsb = 64;

// Palette 1 (the only one): per tile its rows and bytes per row; a tile not used stays 0 x 0.
struct TileConfig {
  uint8_t rows[kTiles] = {};
  uint16_t colsb[kTiles] = {};

  TileConfig& set(int tile, int tile_rows, int tile_colsb) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    colsb[tile] = static_cast<uint16_t>(tile_colsb);
    return *this;
  }
};

// --- The instructions. ----------------------------------------------------------------------
// Written as inline assembly rather than the <immintrin.h> macros: those paste the tile number
// into the instruction text with the preprocessor, which a template parameter cannot feed. The
// assembler needs no -mamx flags, so this header compiles for any x86 target; only a CPU with
// AMX and Linux's permission (backends/cpu/amx.h) may run it.
#if defined(__x86_64__)
struct HardwareTiles {
  static void configure(const TileConfig& config) {
    // The 64-byte LDTILECFG operand: palette, start row, 14 reserved bytes, 16 colsb words,
    // 16 rows bytes (tiles 8-15 do not exist in palette 1 and stay 0).
    alignas(64) uint8_t operand[64] = {};
    operand[0] = 1;
    for (int t = 0; t < kTiles; ++t) {
      std::memcpy(operand + 16 + 2 * t, &config.colsb[t], 2);
      operand[48 + t] = config.rows[t];
    }
    asm volatile("ldtilecfg %0" ::"m"(operand));
  }
  static void release() { asm volatile("tilerelease" ::); }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* base, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* base, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  // C += A B with bf16 pairs into f32 (TDPBF16PS).
  template <int C, int A, int B>
  static void dpbf16ps() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  // C += A B with u8 A x s8 B quads into s32 (TDPBUSD).
  template <int C, int A, int B>
  static void dpbusd() {
    asm volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  // C += A B with s8 A x s8 B quads into s32 (TDPBSSD).
  template <int C, int A, int B>
  static void dpbssd() {
    asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};
#endif

// --- The emulation. -------------------------------------------------------------------------
// The tile registers as per-thread bytes (each thread has its own tiles, as each core does), and
// every instruction as the Intel SDM's pseudo-code states it: loads zero what lies past the
// configured rows and bytes, TDPBF16PS adds the even and then the odd product of each pair into
// the f32 accumulator, each addition rounded to nearest even, with bf16 inputs and f32 results
// below the normal range flushed to zero (the instruction's fixed DAZ / FTZ); the int8 products
// add four products into s32 with wrap-around. Shape mismatches the hardware would fault on
// (#UD) throw std::logic_error, so a kernel with a wrong configuration fails its tests here too.
struct EmulatedTiles {
  struct State {
    TileConfig config;
    bool configured = false;
    alignas(64) uint8_t data[kTiles][kMaxRows][kMaxColsb] = {};
  };
  static State& state() {
    thread_local State s;
    return s;
  }

  static void configure(const TileConfig& config) {
    for (int t = 0; t < kTiles; ++t) {
      if (config.rows[t] > kMaxRows || config.colsb[t] > kMaxColsb) {
        throw std::logic_error("amx emulation: tile " + std::to_string(t) + " configured " +
                               std::to_string(config.rows[t]) + " x " +
                               std::to_string(config.colsb[t]) + " bytes, beyond 16 x 64");
      }
    }
    State& s = state();
    s.config = config;
    s.configured = true;
    std::memset(s.data, 0, sizeof(s.data));
  }
  static void release() {
    state().configured = false;
    std::memset(state().data, 0, sizeof(state().data));
  }
  template <int T>
  static void zero() {
    std::memset(tile(T), 0, kMaxRows * kMaxColsb);
  }
  template <int T>
  static void load(const void* base, int64_t stride) {
    uint8_t(*t)[kMaxColsb] = tile(T);
    const State& s = state();
    std::memset(t, 0, kMaxRows * kMaxColsb);
    for (int r = 0; r < s.config.rows[T]; ++r) {
      std::memcpy(t[r], static_cast<const uint8_t*>(base) + r * stride, s.config.colsb[T]);
    }
  }
  template <int T>
  static void store(void* base, int64_t stride) {
    uint8_t(*t)[kMaxColsb] = tile(T);
    const State& s = state();
    for (int r = 0; r < s.config.rows[T]; ++r) {
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, t[r], s.config.colsb[T]);
    }
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    const auto [M, N, Kp] = product_shape(C, A, B, "tdpbf16ps");
    // The operands widened once (subnormals flushed) in the logical [M, 2 Kp] and [2 Kp, N]
    // order; k runs 0, 1, 2, ...: each pair's even product first, as the SDM adds them.
    float a[kMaxRows][2 * kMaxRows], b[2 * kMaxRows][kMaxRows];
    for (int m = 0; m < M; ++m) {
      for (int k = 0; k < 2 * Kp; ++k) a[m][k] = bf16_daz(read<uint16_t>(A, m, k));
    }
    for (int k = 0; k < Kp; ++k) {
      for (int n = 0; n < N; ++n) {
        b[2 * k][n] = bf16_daz(read<uint16_t>(B, k, 2 * n));
        b[2 * k + 1][n] = bf16_daz(read<uint16_t>(B, k, 2 * n + 1));
      }
    }
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        float acc = read<float>(C, m, n);
        // The product of two bf16 values is exact in f32; each sum is rounded once.
        for (int k = 0; k < 2 * Kp; ++k) acc = ftz(acc + a[m][k] * b[k][n]);
        write<float>(C, m, n, acc);
      }
    }
  }
  template <int C, int A, int B>
  static void dpbusd() {
    int8_product<uint8_t, int8_t>(C, A, B, "tdpbusd");
  }
  template <int C, int A, int B>
  static void dpbssd() {
    int8_product<int8_t, int8_t>(C, A, B, "tdpbssd");
  }

 private:
  struct Shape {
    int M, N, Kp;
  };
  static uint8_t (*tile(int t))[kMaxColsb] {
    if (!state().configured) throw std::logic_error("amx emulation: tile used before ldtilecfg");
    return state().data[t];
  }
  // Element access inside an instruction (product_shape has checked the configuration).
  template <typename T>
  static T read(int t, int row, int index) {
    T value;
    std::memcpy(&value, &state().data[t][row][index * sizeof(T)], sizeof(T));
    return value;
  }
  template <typename T>
  static void write(int t, int row, int index, T value) {
    std::memcpy(&state().data[t][row][index * sizeof(T)], &value, sizeof(T));
  }
  // The SDM's checks of a tile product: A is M x (4 Kp) bytes, B Kp x (4 N), C M x (4 N).
  static Shape product_shape(int c, int a, int b, const char* name) {
    tile(c);  // configured
    const TileConfig& config = state().config;
    const Shape shape{config.rows[c], config.colsb[c] / 4, config.colsb[a] / 4};
    if (config.rows[a] != shape.M || config.rows[b] != shape.Kp ||
        config.colsb[b] != config.colsb[c] || config.colsb[c] % 4 != 0 ||
        config.colsb[a] % 4 != 0) {
      throw std::logic_error(
          std::string("amx emulation: ") + name + " with tiles C " +
          std::to_string(config.rows[c]) + "x" + std::to_string(config.colsb[c]) + ", A " +
          std::to_string(config.rows[a]) + "x" + std::to_string(config.colsb[a]) + ", B " +
          std::to_string(config.rows[b]) + "x" + std::to_string(config.colsb[b]) + " bytes");
    }
    return shape;
  }
  static float bf16_daz(uint16_t bits) {
    if ((bits & 0x7F80) == 0) bits &= 0x8000;  // a subnormal reads as a zero of its sign
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof(value));
    return value;
  }
  static float ftz(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7F800000u) == 0) bits &= 0x80000000u;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  template <typename TA, typename TB>
  static void int8_product(int c, int a, int b, const char* name) {
    const auto [M, N, Kp] = product_shape(c, a, b, name);
    int32_t av[kMaxRows][4 * kMaxRows], bv[4 * kMaxRows][kMaxRows];
    for (int m = 0; m < M; ++m) {
      for (int k = 0; k < 4 * Kp; ++k) av[m][k] = read<TA>(a, m, k);
    }
    for (int k = 0; k < 4 * Kp; ++k) {
      for (int n = 0; n < N; ++n) bv[k][n] = read<TB>(b, k / 4, 4 * n + k % 4);
    }
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        // s32 with wrap-around, as the hardware adds (unsigned arithmetic wraps portably).
        uint32_t acc = static_cast<uint32_t>(read<int32_t>(c, m, n));
        for (int k = 0; k < 4 * Kp; ++k) acc += static_cast<uint32_t>(av[m][k] * bv[k][n]);
        write<int32_t>(c, m, n, static_cast<int32_t>(acc));
      }
    }
  }
};

}  // namespace tokamax::amx
