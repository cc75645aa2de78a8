// splash_attention on the flash-attention core: what the forward and the VJP "cpu"
// implementations share, the core's problem for splash's args (its head-major layouts read in
// place).
//
// Dimensions: as base.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"
#include "ops/splash_attention/base.h"

namespace tokamax {

// The core's problem: one batch, q heads over kv heads, heads-major layouts ([Hq, T, D] is the
// core's [1, H, T, D]; MQA's [t, D] one kv head), no logits scale, the mask (with the segment
// ids) as the core's key mask and the sinks per q head (empty: none).
FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p,
                                           std::shared_ptr<const FlashKeyMask> mask,
                                           std::vector<float> sinks);
// The same without segment ids or sinks (what the configs depend on).
FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p);

// The sinks as f32 (empty without them).
std::vector<float> splash_sinks(const SplashAttentionProblem& p, const TensorMap& inputs);

// y = x element for element, x f32 and y of any float dtype (rounded once), in parallel.
void convert_f32(const Tensor& x,
                 // Outputs.
                 Tensor& y);

}  // namespace tokamax
