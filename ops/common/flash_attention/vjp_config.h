// The flash-attention core's backward "cpu" config (every attention op's VJP), its check, its
// conversion to the kernel's options, heuristics and search space.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq     query rows per block and task (block_q);  bkv  keys per block (block_kv)
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/common/flash_attention/problem.h"
#include "ops/common/flash_attention/vjp.h"

namespace tokamax {

struct CpuAttentionVjpConfig {
  // bq: query rows of one task (per q head), which keeps S and dP of its rows for every key in
  // [bq, t] f32 strips of its thread's scratch (and the cap's gate with a soft cap).
  int block_q = 128;
  // bkv: keys of one block: the tile of the five products, [bq, bkv].
  int block_kv = 128;
  // "convert_f32": bf16 operands widened to f32 while packing. "native_dot": bf16 inputs only,
  // the two products of bf16 inputs alone (S = q k^T, dP = dout v^T) with vdpbf16ps (exact
  // bf16 products, f32 sums: the error model's f32 accumulation); the three products with P or
  // dS stay f32, so nothing is rounded to bf16. "native_all": also dv = P^T dout, dk = dS^T q
  // and dq = dS k with vdpbf16ps, P and dS rounded to bf16 for them (as the forward's
  // native_dot rounds P; the op's error model allows for both roundings). "amx": native_all's
  // products and roundings on AMX tiles.
  std::string bf16_path = "convert_f32";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("block_q", block_q);
    v("block_kv", block_kv);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const { return std::make_tuple(block_q, block_kv, bf16_path, num_threads); }
};

// check_config of every implementation on the core: threads, the bf16 engine for the inputs.
void check_cpu_attention_vjp_config(const FlashAttentionProblem& p, const CpuAttentionVjpConfig& c,
                                    const Device& device);
// The kernel's options for a checked config.
FlashVjpOptions cpu_attention_vjp_options(const CpuAttentionVjpConfig& c);

CpuAttentionVjpConfig cpu_attention_vjp_heuristics_config(const FlashAttentionProblem& p,
                                                          const Device& device);
std::vector<CpuAttentionVjpConfig> cpu_attention_vjp_autotuning_configs(
    const FlashAttentionProblem& p, const Device& device);

}  // namespace tokamax
