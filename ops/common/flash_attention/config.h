// The flash-attention core's "cpu" config (every attention op's forward), heuristics and search
// space.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq     query rows of one task per head (block_q);  bkv  keys per inner block (block_kv)
//   M      rows of one task's tiles: g * bq with group_heads, else bq
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/common/flash_attention/forward.h"
#include "ops/common/flash_attention/problem.h"
#include "ops/framework/errors.h"

namespace tokamax {

struct CpuAttentionConfig {
  int block_q = 64;    // bq: query rows per task (and head); a task owns [M, d] f32 accumulators
  int block_kv = 256;  // bkv: keys per inner block: S = Q K^T is [M, bkv] f32 per thread
  // The g q heads that share a kv head in one task: every K/V block is packed once for all g
  // of them, and the GEMMs get g times more rows.
  bool group_heads = true;
  // "convert_f32": bf16/f16 operands widened to f32 while packing, P V with f32 P.
  // "native_dot": bf16 inputs only, Q K^T and P V with vdpbf16ps (P rounded to bf16; the op's
  // error model allows for it). "amx": the same on AMX tiles, with kv_packing=per_block.
  std::string bf16_path = "convert_f32";
  // "shared": K^T and V packed once per kv head into micro-kernel panels that all of its tasks
  // read (block_kv rounded up to whole strips of the micro-tile). "transposed": the same
  // sharing with every tile transposed (S^T = K Q^T, softmax down columns, O^T += V^T P^T: no
  // packing of P per block; block_kv rounded up to whole micro-panels); bias and mask tensors
  // are applied by a strided walk, so the heuristics keep "shared" for them. "per_block": every
  // block goes through cpu_gemm_f32, which repacks K, V and the Q tile on each call (no extra
  // memory).
  std::string kv_packing = "shared";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("block_q", block_q);
    v("block_kv", block_kv);
    v("group_heads", group_heads);
    v("bf16_path", bf16_path);
    v("kv_packing", kv_packing);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(block_q, block_kv, group_heads, bf16_path, kv_packing, num_threads);
  }
};

// Whether bf16_path=native_dot can run these args on this CPU.
bool attention_native_bf16_available(const FlashAttentionProblem& p);

// check_config of every implementation on the core: threads, the bf16 engine for the inputs,
// AMX on per-block packing only (cpu_gemm_f32's own tiles; the shared panels have the vector
// kernels' layouts).
void check_cpu_attention_config(const FlashAttentionProblem& p, const CpuAttentionConfig& c,
                                const Device& device);
// The kernel's options for a checked config. Throws NotImplemented when native_dot cannot run
// these inputs on this CPU.
CpuAttentionKernelOptions cpu_attention_kernel_options(const FlashAttentionProblem& p,
                                                       const CpuAttentionConfig& c);

CpuAttentionConfig cpu_attention_heuristics_config(const FlashAttentionProblem& p,
                                                   const Device& device);
std::vector<CpuAttentionConfig> cpu_attention_autotuning_configs(const FlashAttentionProblem& p,
                                                                 const Device& device);

}  // namespace tokamax
