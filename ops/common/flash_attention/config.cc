// The flash-attention core's forward config: validation, heuristics and the autotuning search
// space.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  block_q, block_kv;  M  rows of one task (g * bq with group_heads)
#include "ops/common/flash_attention/config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/flash_attention/forward.h"

namespace tokamax {
namespace {

constexpr int kMaxBlock = 1 << 14;

}  // namespace

void CpuAttentionConfig::validate() const {
  require_range("block_q", block_q, 1, kMaxBlock);
  require_range("block_kv", block_kv, 1, kMaxBlock);
  require_bf16_path_name(bf16_path);
  require_config(kv_packing == "shared" || kv_packing == "transposed" || kv_packing == "per_block",
                 "kv_packing", [&] {
                   return "kv_packing is '" + kv_packing +
                          "'; expected 'shared', 'transposed' or 'per_block'";
                 });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

bool attention_native_bf16_available(const FlashAttentionProblem& p) {
  return p.dtype == DType::kBF16 && gemm_has_native_bf16();
}

void check_cpu_attention_config(const FlashAttentionProblem& p, const CpuAttentionConfig& c,
                                const Device& device) {
  require_num_threads(c.num_threads, device);
  require_bf16_path(c.bf16_path, p.dtype == DType::kBF16, "bf16 q/k/v");
  require_config(c.bf16_path != "amx" || c.kv_packing == "per_block", "kv_packing",
                 [&] { return "bf16_path=amx runs kv_packing=per_block, not " + c.kv_packing; });
}

CpuAttentionKernelOptions cpu_attention_kernel_options(const FlashAttentionProblem& p,
                                                       const CpuAttentionConfig& c) {
  CpuAttentionKernelOptions options;
  options.block_q = c.block_q;
  options.block_kv = c.block_kv;
  options.group_heads = c.group_heads;
  options.engine = gemm_engine(c.bf16_path);
  if (options.engine == GemmEngine::kBf16Dot && !attention_native_bf16_available(p)) {
    throw NotImplemented("cpu attention: native_dot needs bf16 inputs and avx512_bf16");
  }
  options.shared_kv_packing = c.kv_packing != "per_block";
  options.transposed = c.kv_packing == "transposed";
  options.num_threads = c.num_threads;
  return options;
}

CpuAttentionConfig cpu_attention_heuristics_config(const FlashAttentionProblem& p,
                                                   const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuAttentionConfig c;
  const int64_t g = p.groups();
  const int64_t cores = std::max(device.cores, 1);
  auto tasks = [&](int64_t bq) { return p.B * p.h * ((p.T + bq - 1) / bq); };
  // bf16 on AMX tiles where they run on the hardware: the per-block products (cpu_gemm_f32
  // packs the tiles' layouts), 128 rows of Q per task where the cores allow (four 32-row
  // blocks), the vector path's K/V blocks.
  if (p.dtype == DType::kBF16 && amx_on_hardware(device)) {
    c.bf16_path = "amx";
    c.kv_packing = "per_block";
    c.group_heads = true;
    c.block_kv = static_cast<int>(
        std::clamp<int64_t>(p.t, 1, p.is_causal || p.has_local_window() ? 128 : 256));
    int64_t bq = std::clamp<int64_t>(128 / g, 8, 128);
    while (bq > 16 && tasks(bq) < 4 * cores) bq /= 2;
    c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, bq));
    return c;
  }
  // vdpbf16ps where it out-runs f32 FMAs (checks.h).
  if (p.dtype == DType::kBF16 && native_bf16_outruns_fma(device) && gemm_has_native_bf16()) {
    c.bf16_path = "native_dot";
  }
  // Under causal and local-window masks a tile's last visible block is cut by the diagonal,
  // and its invisible keys are computed and masked: half a block per tile on average, so those
  // masks get shorter blocks (a tune on the bench_cpu causal shapes picked 64-128 keys).
  const bool diagonal = p.is_causal || p.has_local_window() || p.key_mask;
  c.block_kv = static_cast<int>(std::clamp<int64_t>(p.t, 1, diagonal ? 128 : 256));
  if (!p.bias && !p.mask) {
    // The transposed layout: M = g * bq query columns, about 96..160 (S^T [bkv, M] and O^T
    // [d, M] stay within L2), chosen so that d and M pad least to the micro-tile the kernel
    // will pick (d = 128: M = 144 on 8 x 48 tiles, no padding), the largest on ties; then
    // halved while there are fewer than 4 tasks per core.
    c.kv_packing = "transposed";
    const int lanes = std::max(1, device.simd_bytes / 4);
    double best = 0;
    for (int64_t bq = std::max<int64_t>(1, 96 / g); g * bq <= std::max<int64_t>(160, g); ++bq) {
      const MicroKernelShape shape = attention_transposed_shape(lanes, g * bq, p.d);
      const double waste = static_cast<double>(round_up(p.d, shape.mr)) *
                           round_up(g * bq, int64_t{shape.nr_vectors} * lanes) / (g * bq);
      if (best == 0 || waste <= best) {
        best = waste;
        c.block_q = static_cast<int>(bq);
      }
    }
    while (c.block_q > 8 && tasks(c.block_q) < 4 * cores) c.block_q /= 2;
    c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, c.block_q));
    return c;
  }
  // Aim for M = 128..256 rows per task: enough rows to amortise packing a K/V block (D * bkv)
  // over the GEMM's M * bkv * D multiply-adds, while S [M, bkv] and the accumulators [M, d] stay
  // within L2 (M * (bkv + d) * 4 bytes: 192 KiB at M = 128, bkv = 256, d = 128).
  c.group_heads = true;
  c.block_q = static_cast<int>(std::clamp<int64_t>(256 / g, 16, 128));
  // Enough tasks for the cores (dynamic scheduling evens out causal's triangle): shrink bq
  // while there are fewer than 4 tasks per core.
  while (c.block_q > 16 && tasks(c.block_q) < 4 * cores) c.block_q /= 2;
  // Whole micro-panels: M = g * bq a multiple of the micro-kernel's mr (14 rows on AVX-512),
  // so no panel is padded with zero rows (128 rows would run 140).
  const int lanes = std::max(1, device.simd_bytes / 4);
  const int64_t mr = micro_kernel_shapes(lanes)[0].mr;
  for (int64_t bq = c.block_q; bq >= std::max<int64_t>(8, c.block_q / 2); --bq) {
    if ((g * bq) % mr == 0) {
      c.block_q = static_cast<int>(bq);
      break;
    }
  }
  c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, c.block_q));
  return c;
}

std::vector<CpuAttentionConfig> cpu_attention_autotuning_configs(const FlashAttentionProblem& p,
                                                                 const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  std::vector<CpuAttentionConfig> out;
  std::set<decltype(CpuAttentionConfig{}.key())> seen;
  std::vector<std::string> paths = {"convert_f32"};
  if (p.dtype == DType::kBF16 && device.has("avx512_bf16") && gemm_has_native_bf16()) {
    paths.push_back("native_dot");
  }
  std::vector<bool> grouping = {true};
  if (p.groups() > 1) grouping.push_back(false);
  for (const char* packing : {"shared", "transposed"}) {
    for (int bq : {16, 32, 64, 128}) {
      for (int bkv : {64, 128, 256, 512}) {
        for (bool group : grouping) {
          for (const std::string& path : paths) {
            CpuAttentionConfig c;
            c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, bq));
            c.block_kv = static_cast<int>(std::clamp<int64_t>(p.t, 1, bkv));
            c.group_heads = group;
            c.bf16_path = path;
            c.kv_packing = packing;
            if (seen.insert(c.key()).second) out.push_back(c);
          }
        }
      }
    }
  }
  // The per-block path (cpu_gemm_f32 repacking K and V per task) at the heuristic tiles: no
  // packed copy of K and V, for comparison and for memory-tight cases; on AMX tiles, at a few
  // block sizes.
  CpuAttentionConfig per_block = cpu_attention_heuristics_config(p, target);
  per_block.kv_packing = "per_block";
  if (seen.insert(per_block.key()).second) out.push_back(per_block);
  if (p.dtype == DType::kBF16 && kernel_has_amx_bf16(device)) {
    for (int bq : {32, 64, 128}) {
      for (int bkv : {128, 256, 512}) {
        CpuAttentionConfig c = per_block;
        c.bf16_path = "amx";
        c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, bq));
        c.block_kv = static_cast<int>(std::clamp<int64_t>(p.t, 1, bkv));
        if (seen.insert(c.key()).second) out.push_back(c);
      }
    }
  }
  return out;
}

}  // namespace tokamax
