// fused_moe: the router of the fast implementations (composite and cpu): each token's top k
// experts with their softmax weights, and the routes sorted into expert groups.
//
// Dimensions.
//   T, E, k   as in base.h
//   R         routes, T k; route r = t k + j is token t's j-th expert
#pragma once

#include <cstdint>
#include <vector>

#include "backends/device.h"
#include "ops/framework/tensor.h"
#include "ops/fused_moe/base.h"

namespace tokamax {

struct MoeRouting {
  std::vector<int32_t> expert;  // [R]: route r's expert, a token's largest logit first
  std::vector<float> weight;    // [R]: its softmax weight (renormalised over the k with it)
  // The routes grouped by expert by a counting sort (stable: ascending route within a group):
  // expert e's routes are sorted[expert_start[e] .. expert_start[e + 1]).
  std::vector<int64_t> expert_start;  // [E + 1]
  std::vector<int32_t> sorted;        // [R]
};

// The top k logits of each row of gating (ties to the lower expert; the selection engine of
// ops/common/row_select.h, on `device`'s heuristics), softmax in f32 over the row (or over the k
// with renormalize), then the counting sort. Threaded over tokens on up to num_threads threads
// (0: all).
MoeRouting route_tokens(const FusedMoeProblem& problem,
                        const Tensor& gating,  // [T, E] f32, bf16 or f16
                        const Device& device, int num_threads = 0);

}  // namespace tokamax
