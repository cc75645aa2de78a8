// splash_attention on the flash-attention core: what the forward and the VJP "cpu"
// implementations share, the core's problem for splash's args and the copies between splash's
// head-major layouts and the core's.
//
// Dimensions: as base.h; A, L the outer two dimensions of a copy, X the contiguous one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"
#include "ops/splash_attention/base.h"

namespace tokamax {

// The core's problem: one batch, q heads over kv heads, no logits scale, the mask (with the
// segment ids) as the core's key mask and the sinks per q head (empty: none).
FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p,
                                           std::shared_ptr<const FlashKeyMask> mask,
                                           std::vector<float> sinks);
// The same without segment ids or sinks (what the configs depend on).
FlashAttentionProblem splash_flash_problem(const SplashAttentionProblem& p);

// The sinks as f32 (empty without them).
std::vector<float> splash_sinks(const SplashAttentionProblem& p, const TensorMap& inputs);

// x [A, L, X] into y [L, A, X] (rows of X elements in parallel), converting x's dtype to y's.
// Splash's [H, T, D] to the core's [1, T, H, D] and back.
void swap_outer(const Tensor& x, int64_t A, int64_t L, int64_t X,
                // Outputs.
                Tensor& y);

}  // namespace tokamax
