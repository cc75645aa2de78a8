// A single-threaded GEMM tile over the engine's packing and micro-kernels.
//
// Dimensions: see gemm.h. depth = the K extent of the current block (<= tk).
#include "ops/common/cpu_gemm/gemm.h"

#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Per-thread scratch that only grows (backends/cpu/scratch.h says why).
float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

// The blocking of one product: what packing and the loops below agree on. On AMX, mr and nr
// are the tiles' 16 rows and 16 columns (the packed layouts' units; amx_layout.h).
struct Plan {
  MicroKernelShape shape;
  int64_t mr = 0, nr = 0, tk = 0, tn = 0;
  GemmEngine engine = GemmEngine::kF32Fma;
  // 32-bit words of one packed k row segment of `depth` (bf16 pairs halve it; AMX pads them to
  // whole tiles).
  int64_t words(int64_t depth) const {
    switch (engine) {
      case GemmEngine::kBf16Dot:
        return (depth + 1) / 2;
      case GemmEngine::kAmxBf16:
        return amx_pairs(depth);
      case GemmEngine::kF32Fma:
        break;
    }
    return depth;
  }
  bool bf16_only() const { return engine != GemmEngine::kF32Fma; }
};

Plan make_plan(int64_t N, int64_t K, const CpuGemmOptions& options) {
  const int lanes = cpu::simd_f32_lanes();
  Plan plan;
  plan.engine = options.engine;
  plan.tk = std::max<int64_t>(2, std::min(options.tk, K));
  if (plan.engine == GemmEngine::kAmxBf16) {
    if (!gemm_has_amx_bf16()) {
      throw NotImplemented(
          "cpu gemm: the AMX engine needs a CPU with amx_bf16 that Linux lets "
          "use its tiles (or TOKAMAX_AMX=emulate)");
    }
    plan.mr = kAmxTileRows;
    plan.nr = kAmxTileCols;
    plan.tn = round_up(std::max<int64_t>(1, std::min(options.tn, N)), plan.nr);
    return plan;
  }
  plan.shape = MicroKernelShape{options.mr, options.nr_vectors};
  if (plan.shape.mr == 0 && plan.shape.nr_vectors == 0) plan.shape = micro_kernel_shapes(lanes)[0];
  if (!has_micro_kernel_shape(lanes, plan.shape.mr, plan.shape.nr_vectors)) {
    throw NotImplemented("cpu gemm: no " + std::to_string(plan.shape.mr) + "x" +
                         std::to_string(plan.shape.nr_vectors) + " micro-kernel for the " +
                         cpu::simd_target_name() + " target");
  }
  if (plan.engine == GemmEngine::kBf16Dot && !gemm_has_native_bf16()) {
    throw NotImplemented("cpu gemm: native bf16 needs bf16 operands and a CPU with avx512_bf16");
  }
  plan.mr = plan.shape.mr;
  plan.nr = int64_t{plan.shape.nr_vectors} * lanes;
  plan.tn = round_up(std::max<int64_t>(1, std::min(options.tn, N)), plan.nr);
  return plan;
}

void check_native_dtype(const Plan& plan, DType dtype) {
  if (plan.bf16_only() && dtype != DType::kBF16) {
    throw NotImplemented(std::string("cpu gemm: the ") +
                         (plan.engine == GemmEngine::kAmxBf16 ? "AMX" : "native bf16") +
                         " engine needs bf16 operands, not " + std::string(dtype_name(dtype)));
  }
}

// A's K block [k0, k0 + depth) of all M rows -> [ceil(M / mr)][depth][mr] (or pairs).
void pack_a_block(const GemmOperand& a, int64_t M, int64_t k0, int64_t depth, const Plan& plan,
                  float* out, bool stream = false) {
  const char* data = static_cast<const char*>(a.data);
  const int64_t size = static_cast<int64_t>(dtype_size(a.dtype));
  const bool native = plan.engine == GemmEngine::kBf16Dot;
  if (plan.engine == GemmEngine::kAmxBf16) {
    const bf16* block = reinterpret_cast<const bf16*>(data) + (a.transposed ? k0 * a.ld : k0);
    pack_lhs_block_amx(block, a.ld, a.transposed, M, depth, reinterpret_cast<uint32_t*>(out));
    return;
  }
  // A transposed is stored [K, M]: its micro-panel layout [panels][depth][mr] is the rhs
  // panel layout of the stored rows with mr columns per strip, so the rhs packer builds it.
  if (a.transposed && native) {
    pack_rhs_panel_pairs(reinterpret_cast<const bf16*>(data) + k0 * a.ld, a.ld, depth, M, plan.mr,
                         reinterpret_cast<uint32_t*>(out), stream);
  } else if (a.transposed) {
    pack_rhs_panel(a.dtype, data + k0 * a.ld * size, a.ld, depth, M, plan.mr, out, stream);
  } else if (native) {
    pack_lhs_block_pairs(reinterpret_cast<const bf16*>(data) + k0, a.ld, M, depth, plan.mr,
                         reinterpret_cast<uint32_t*>(out), stream);
  } else {
    pack_lhs_block(a.dtype, data + k0 * size, a.ld, M, depth, plan.mr, out, stream);
  }
}

// B's K block [k0, k0 + depth) of columns [n0, n0 + cols) -> [ceil(cols / nr)][depth][nr] (or
// pairs).
void pack_b_panel(const GemmOperand& b, int64_t k0, int64_t depth, int64_t n0, int64_t cols,
                  const Plan& plan, float* out, bool stream = false) {
  const char* data = static_cast<const char*>(b.data);
  const int64_t size = static_cast<int64_t>(dtype_size(b.dtype));
  const bool native = plan.engine == GemmEngine::kBf16Dot;
  if (plan.engine == GemmEngine::kAmxBf16) {
    const bf16* panel =
        reinterpret_cast<const bf16*>(data) + (b.transposed ? n0 * b.ld + k0 : k0 * b.ld + n0);
    pack_rhs_panel_amx(panel, b.ld, b.transposed, depth, cols, reinterpret_cast<uint32_t*>(out));
    return;
  }
  if (is_quantized(b.dtype)) {
    pack_rhs_panel_dequant(b.dtype, data + k0 * b.ld + n0, b.ld, depth, cols, plan.nr, b.scale + n0,
                           b.scale_ld, k0, b.scale_block, out);
    return;
  }
  // B transposed is stored [N, K]: its strips [depth][nr] are the lhs micro-panel layout of the
  // stored rows with nr rows per panel, so the lhs packer (register transposes) builds them.
  if (b.transposed && native) {
    pack_lhs_block_pairs(reinterpret_cast<const bf16*>(data) + n0 * b.ld + k0, b.ld, cols, depth,
                         plan.nr, reinterpret_cast<uint32_t*>(out), stream);
  } else if (native) {
    pack_rhs_panel_pairs(reinterpret_cast<const bf16*>(data) + k0 * b.ld + n0, b.ld, depth, cols,
                         plan.nr, reinterpret_cast<uint32_t*>(out), stream);
  } else if (b.transposed) {
    pack_lhs_block(b.dtype, data + (n0 * b.ld + k0) * size, b.ld, cols, depth, plan.nr, out,
                   stream);
  } else {
    pack_rhs_panel(b.dtype, data + (k0 * b.ld + n0) * size, b.ld, depth, cols, plan.nr, out,
                   stream);
  }
}

// Where the packed A block of k0 starts, and the packed B panel of (k0, n0): every block before
// k0 is a full tk deep.
int64_t a_block_offset(const Plan& plan, int64_t M, int64_t k0) {
  return round_up(M, plan.mr) * (k0 / plan.tk) * plan.words(plan.tk);
}
int64_t b_panel_offset(const Plan& plan, int64_t N, int64_t K, int64_t k0, int64_t n0) {
  const int64_t depth = std::min(plan.tk, K - k0);
  return round_up(N, plan.nr) * (k0 / plan.tk) * plan.words(plan.tk) + n0 * plan.words(depth);
}

PackedGemmOperand describe(const Plan& plan, const float* data, bool is_lhs, int64_t extent,
                           int64_t K) {
  return {data,    is_lhs,  extent,     K, plan.shape.mr, plan.shape.nr_vectors,
          plan.tk, plan.tn, plan.engine};
}

void check_packed(const PackedGemmOperand& packed, bool is_lhs, const Plan& plan, int64_t K) {
  if (packed.is_lhs != is_lhs || packed.K != K || packed.mr != plan.shape.mr ||
      packed.nr_vectors != plan.shape.nr_vectors || packed.tk != plan.tk ||
      packed.engine != plan.engine || (!is_lhs && packed.tn != plan.tn)) {
    throw InvalidArgument(
        "cpu gemm: a packed operand used with other options than it was "
        "packed for");
  }
}

// C[M, N] (+)= A B, each side given either as a strided operand or packed.
void gemm(const GemmOperand* a, const PackedGemmOperand* packed_a, const GemmOperand* b,
          const PackedGemmOperand* packed_b, int64_t M, int64_t N, int64_t K, float* c, int64_t ldc,
          bool accumulate, const CpuGemmOptions& options) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate) {
      for (int64_t r = 0; r < M; ++r) std::memset(c + r * ldc, 0, N * sizeof(float));
    }
    return;
  }
  const Plan plan = make_plan(N, K, options);
  if (a) check_native_dtype(plan, a->dtype);
  if (b) check_native_dtype(plan, b->dtype);
  if (a && is_quantized(a->dtype)) {
    throw NotImplemented("cpu gemm: quantized codes are taken as B only");
  }
  if (b && is_quantized(b->dtype) &&
      (b->transposed || !b->scale || b->scale_block <= 0 || plan.engine != GemmEngine::kF32Fma)) {
    throw NotImplemented("cpu gemm: quantized B needs its scales, no transpose and the f32 engine");
  }
  if (packed_a) check_packed(*packed_a, true, plan, K);
  if (packed_b) check_packed(*packed_b, false, plan, K);
  const bool in_place = b && options.rhs_in_place && plan.engine == GemmEngine::kF32Fma &&
                        !b->transposed && !is_quantized(b->dtype) && N % plan.nr == 0;
  const int64_t lhs_elems = a ? round_up(M, plan.mr) * plan.words(plan.tk) : 0;
  const int64_t rhs_elems = b && !in_place ? plan.tn * plan.words(plan.tk) : 0;
  float* lhs_block = scratch_floats(static_cast<size_t>(lhs_elems + rhs_elems + 16));
  float* rhs_panel = lhs_block + round_up(lhs_elems, 16);

  for (int64_t k0 = 0; k0 < K; k0 += plan.tk) {
    const int64_t depth = std::min(plan.tk, K - k0);
    BlockArgs args{};
    args.rows = M;
    args.depth = depth;
    args.ldc = ldc;
    args.accumulate = accumulate || k0 > 0;
    args.mr = plan.shape.mr;
    args.nr_vectors = plan.shape.nr_vectors;
    args.rhs_packed = true;
    if (a) {
      pack_a_block(*a, M, k0, depth, plan, lhs_block);
      args.lhs_block = lhs_block;
    } else {
      args.lhs_block = packed_a->data + a_block_offset(plan, M, k0);
    }
    for (int64_t n0 = 0; n0 < N; n0 += plan.tn) {
      const int64_t cols = std::min(plan.tn, N - n0);
      args.cols = cols;
      args.out = c + n0;
      args.next_rhs = {};
      if (in_place) {
        const int64_t b_size = static_cast<int64_t>(dtype_size(b->dtype));
        args.rhs = static_cast<const char*>(b->data) + (k0 * b->ld + n0) * b_size;
        args.rhs_dtype = b->dtype;
        args.rhs_packed = false;
        args.rhs_strip_stride = plan.nr;
        args.ldb = b->ld;
        if (!block_product_f32(args)) throw NotImplemented("cpu gemm: no such f32 micro-kernel");
        continue;
      }
      if (b) {
        // Prefetch the panel after this one (the next columns of this K block, or the first of
        // the next) into L2 while this one is multiplied: with few rows of A, reading B from
        // memory is otherwise a stall at every panel.
        const int64_t next_n0 = n0 + plan.tn < N ? n0 + plan.tn : 0;
        const int64_t next_k0 = n0 + plan.tn < N ? k0 : k0 + plan.tk;
        if (next_k0 < K) {
          const int64_t b_size = static_cast<int64_t>(dtype_size(b->dtype));
          const char* b_data = static_cast<const char*>(b->data);
          const int64_t next_depth = std::min(plan.tk, K - next_k0);
          const int64_t next_cols = std::min(plan.tn, N - next_n0);
          if (b->transposed) {
            args.next_rhs.base = b_data + (next_n0 * b->ld + next_k0) * b_size;
            args.next_rhs.rows = next_cols;
            args.next_rhs.bytes = next_depth * b_size;
          } else {
            args.next_rhs.base = b_data + (next_k0 * b->ld + next_n0) * b_size;
            args.next_rhs.rows = next_depth;
            args.next_rhs.bytes = next_cols * b_size;
          }
          args.next_rhs.stride = b->ld * b_size;
        }
        pack_b_panel(*b, k0, depth, n0, cols, plan, rhs_panel);
        args.rhs = rhs_panel;
      } else {
        args.rhs = packed_b->data + b_panel_offset(plan, N, K, k0, n0);
      }
      if (plan.engine == GemmEngine::kAmxBf16) {
        if (!block_product_amx_bf16(args)) throw NotImplemented("cpu gemm: AMX tiles unavailable");
        continue;
      }
      if (plan.engine == GemmEngine::kBf16Dot) {
        if (!block_product_bf16(args)) throw NotImplemented("cpu gemm: no such bf16 micro-kernel");
        continue;
      }
      args.rhs_strip_stride = depth * plan.nr;
      args.ldb = plan.nr;
      if (!block_product_f32(args)) throw NotImplemented("cpu gemm: no such f32 micro-kernel");
    }
  }
}

}  // namespace

PackedGemmOperand reserve_gemm_lhs(int64_t M, int64_t K, const CpuGemmOptions& options,
                                   GemmPackStorage& storage) {
  // N does not shape A's blocks: any extent gives the same tk.
  const Plan plan = make_plan(1, std::max<int64_t>(K, 1), options);
  const int64_t total = K > 0 ? a_block_offset(plan, M, round_up(K, plan.tk)) : 0;
  if (static_cast<int64_t>(storage.size()) < total) storage.resize(static_cast<size_t>(total));
  return describe(plan, storage.data(), true, M, K);
}

PackedGemmOperand reserve_gemm_rhs(int64_t K, int64_t N, const CpuGemmOptions& options,
                                   GemmPackStorage& storage) {
  const Plan plan = make_plan(N, std::max<int64_t>(K, 1), options);
  int64_t total = 0;
  for (int64_t k0 = 0; k0 < K; k0 += plan.tk) {
    total += round_up(N, plan.nr) * plan.words(std::min(plan.tk, K - k0));
  }
  if (static_cast<int64_t>(storage.size()) < total) storage.resize(static_cast<size_t>(total));
  return describe(plan, storage.data(), false, N, K);
}

namespace {

// The plan a packed operand was reserved with (make_plan is idempotent on its own tk and tn).
Plan packed_plan(const PackedGemmOperand& packed) {
  CpuGemmOptions options;
  options.mr = packed.mr;
  options.nr_vectors = packed.nr_vectors;
  options.tk = packed.tk;
  options.tn = packed.tn;
  options.engine = packed.engine;
  return make_plan(packed.is_lhs ? 1 : packed.extent, std::max<int64_t>(packed.K, 1), options);
}

}  // namespace

int64_t gemm_pack_pieces(const PackedGemmOperand& packed) {
  if (packed.K <= 0 || packed.extent <= 0) return 0;
  const Plan plan = packed_plan(packed);
  const int64_t blocks = ceil_div(packed.K, plan.tk);
  return packed.is_lhs ? blocks : blocks * ceil_div(packed.extent, plan.tn);
}

void pack_gemm_piece(const GemmOperand& source, const PackedGemmOperand& packed, int64_t piece,
                     bool stream) {
  const Plan plan = packed_plan(packed);
  check_native_dtype(plan, source.dtype);
  if (is_quantized(source.dtype) &&
      (packed.is_lhs || source.transposed || !source.scale || source.scale_block <= 0 ||
       plan.engine != GemmEngine::kF32Fma)) {
    throw NotImplemented("cpu gemm: quantized B needs its scales, no transpose and the f32 engine");
  }
  // The storage is the caller's, reserved writable; the operand hands it out read-only.
  float* data = const_cast<float*>(packed.data);
  if (packed.is_lhs) {
    const int64_t k0 = piece * plan.tk;
    pack_a_block(source, packed.extent, k0, std::min(plan.tk, packed.K - k0), plan,
                 data + a_block_offset(plan, packed.extent, k0), stream);
  } else {
    const int64_t panels = ceil_div(packed.extent, plan.tn);
    const int64_t k0 = piece / panels * plan.tk, n0 = piece % panels * plan.tn;
    pack_b_panel(source, k0, std::min(plan.tk, packed.K - k0), n0,
                 std::min(plan.tn, packed.extent - n0), plan,
                 data + b_panel_offset(plan, packed.extent, packed.K, k0, n0), stream);
  }
  // Non-temporal stores are weakly ordered: drained before the piece counts as done.
  if (stream) hwy::FlushStream();
}

namespace {

// Every piece of a reserved operand, in order (the dtype checked even when there are none).
PackedGemmOperand pack_every_piece(const GemmOperand& source, const PackedGemmOperand& packed) {
  check_native_dtype(packed_plan(packed), source.dtype);
  for (int64_t piece = 0, n = gemm_pack_pieces(packed); piece < n; ++piece) {
    pack_gemm_piece(source, packed, piece);
  }
  return packed;
}

}  // namespace

PackedGemmOperand pack_gemm_lhs(const GemmOperand& a, int64_t M, int64_t K,
                                const CpuGemmOptions& options, GemmPackStorage& storage) {
  return pack_every_piece(a, reserve_gemm_lhs(M, K, options, storage));
}

PackedGemmOperand pack_gemm_rhs(const GemmOperand& b, int64_t K, int64_t N,
                                const CpuGemmOptions& options, GemmPackStorage& storage) {
  return pack_every_piece(b, reserve_gemm_rhs(K, N, options, storage));
}

void cpu_gemm_f32(const GemmOperand& a, const GemmOperand& b, int64_t M, int64_t N, int64_t K,
                  float* c, int64_t ldc, bool accumulate, const CpuGemmOptions& options) {
  gemm(&a, nullptr, &b, nullptr, M, N, K, c, ldc, accumulate, options);
}

void cpu_gemm_f32(const GemmOperand& a, const PackedGemmOperand& b, int64_t M, float* c,
                  int64_t ldc, bool accumulate, const CpuGemmOptions& options) {
  gemm(&a, nullptr, nullptr, &b, M, b.extent, b.K, c, ldc, accumulate, options);
}

void cpu_gemm_f32(const PackedGemmOperand& a, const GemmOperand& b, int64_t N, float* c,
                  int64_t ldc, bool accumulate, const CpuGemmOptions& options) {
  gemm(nullptr, &a, &b, nullptr, a.extent, N, a.K, c, ldc, accumulate, options);
}

void cpu_gemm_f32(const PackedGemmOperand& a, const PackedGemmOperand& b, float* c, int64_t ldc,
                  bool accumulate, const CpuGemmOptions& options) {
  if (a.K != b.K) {
    throw InvalidArgument("cpu gemm: packed operands of different depths (" + std::to_string(a.K) +
                          " and " + std::to_string(b.K) + ")");
  }
  gemm(nullptr, &a, nullptr, &b, a.extent, b.extent, a.K, c, ldc, accumulate, options);
}

}  // namespace tokamax
