// The flash-attention core's backward "cpu" config: validation, check, options, heuristics and
// search space.
//
// Dimensions: as vjp_config.h.
#include "ops/common/flash_attention/vjp_config.h"

#include <algorithm>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/framework/config.h"

namespace tokamax {
namespace {

constexpr int kMaxBlock = 4096;
// Below this many multiply-adds one thread beats waking the pool.
constexpr double kSerialMultiplyAdds = double(1 << 18);
// The heuristics and the search space keep a thread's strips (S, dP and the cap's gate, [bq, t]
// f32 each) under this: long key sequences get fewer rows per task (t = 131072: 32).
constexpr int64_t kMaxStripBytes = int64_t{64} << 20;
int max_block_q(const FlashAttentionProblem& p) {
  const int64_t per_row = 3 * 4 * std::max<int64_t>(p.t, 1);
  return static_cast<int>(std::clamp<int64_t>(kMaxStripBytes / per_row, 8, kMaxBlock));
}

}  // namespace

void CpuAttentionVjpConfig::validate() const {
  require_range("block_q", block_q, 1, kMaxBlock);
  require_range("block_kv", block_kv, 1, kMaxBlock);
  require_config(bf16_path == "convert_f32" || bf16_path == "native_dot" ||
                     bf16_path == "native_all" || bf16_path == "amx",
                 "bf16_path", [&] {
                   return "bf16_path is '" + bf16_path +
                          "'; expected 'convert_f32', 'native_dot', 'native_all' or 'amx'";
                 });
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void check_cpu_attention_vjp_config(const FlashAttentionProblem& p, const CpuAttentionVjpConfig& c,
                                    const Device& device) {
  require_num_threads(c.num_threads, device);
  if (c.bf16_path != "convert_f32") {
    // native_dot and native_all both run on vdpbf16ps.
    require_bf16_path(c.bf16_path == "amx" ? "amx" : "native_dot", p.dtype == DType::kBF16,
                      "bf16 q/k/v");
  }
}

FlashVjpOptions cpu_attention_vjp_options(const CpuAttentionVjpConfig& c) {
  FlashVjpOptions options;
  options.block_q = c.block_q;
  options.block_kv = c.block_kv;
  options.engine = gemm_engine(c.bf16_path == "native_all" ? "native_dot" : c.bf16_path);
  options.round_p = c.bf16_path == "native_all" || c.bf16_path == "amx";
  options.num_threads = c.num_threads;
  return options;
}

CpuAttentionVjpConfig cpu_attention_vjp_heuristics_config(const FlashAttentionProblem& p,
                                                          const Device& target) {
  const cpu::CpuInfo& device = cpu::cpu_info(target);
  CpuAttentionVjpConfig c;
  // 128 x 128 blocks at least: the five block products are then 128^3 each (packing is a few
  // percent of them). Without a causal or window mask every block is full and 256 keys per block
  // spread that packing over larger products; with a mask, 128 wastes less on the diagonal
  // blocks. The native bf16 products, twice as fast, favour 256 rows too (their packing weighs
  // more). Other (bq, bkv) pairs, each extent 64 to 256, run within the noise of these (measured:
  // docs/measurement_log.md, "attention backward block extents").
  const bool banded = p.is_causal || p.has_local_window() || p.key_mask;
  // bf16 products on a bf16 engine: the AMX tiles where they run on the hardware, else
  // vdpbf16ps where it out-runs f32 FMAs.
  const bool amx = p.dtype == DType::kBF16 && amx_on_hardware(device);
  const bool native = amx || (p.dtype == DType::kBF16 && native_bf16_outruns_fma(device));
  c.block_q = static_cast<int>(std::clamp<int64_t>(p.T, 1, native ? 256 : 128));
  c.block_kv = static_cast<int>(std::clamp<int64_t>(p.t, 1, banded && !native ? 128 : 256));
  // Enough tasks, one per block of query rows (B H ceil(T / bq)), to balance the cores: 4 per
  // core where T allows.
  const int cores = std::max(1, device.cores);
  while (c.block_q > 32 && p.B * p.H * ((p.T + c.block_q - 1) / c.block_q) < 4 * cores) {
    c.block_q /= 2;
  }
  c.block_q = std::min(c.block_q, max_block_q(p));
  // vdpbf16ps doubles the rate of all five products (P and dS rounded to bf16 for three).
  if (native) c.bf16_path = amx ? "amx" : "native_all";
  const double multiply_adds = 5.0 * static_cast<double>(p.B) * p.H * p.T * p.t * (p.D + p.d) / 2;
  c.num_threads = multiply_adds < kSerialMultiplyAdds ? 1 : 0;
  return c;
}

std::vector<CpuAttentionVjpConfig> cpu_attention_vjp_autotuning_configs(
    const FlashAttentionProblem& p, const Device& device) {
  const CpuAttentionVjpConfig base = cpu_attention_vjp_heuristics_config(p, device);
  std::set<decltype(base.key())> seen;
  std::vector<CpuAttentionVjpConfig> configs;
  auto add = [&](const CpuAttentionVjpConfig& c) {
    if (seen.insert(c.key()).second) configs.push_back(c);
  };
  add(base);
  for (int bq : {64, 128, 256}) {
    if (bq > max_block_q(p)) continue;
    for (int bkv : {64, 128, 256}) {
      CpuAttentionVjpConfig c = base;
      c.block_q = bq;
      c.block_kv = bkv;
      add(c);
      if (p.dtype == DType::kBF16 && kernel_has_native_bf16(cpu::cpu_info(device))) {
        for (const char* path : {"convert_f32", "native_dot", "native_all"}) {
          c.bf16_path = path;
          add(c);
        }
      }
      if (p.dtype == DType::kBF16 && kernel_has_amx_bf16(cpu::cpu_info(device))) {
        c.bf16_path = "amx";
        add(c);
      }
    }
  }
  return configs;
}

}  // namespace tokamax
