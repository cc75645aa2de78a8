// fused_moe: the end of the layer shared by the implementations that run its products per
// expert (cpu, onednn): each route's down projection stored with its bias and weight, in x's
// dtype, at its place in route order; then each token's k rows summed.
//
// Dimensions.
//   T, H, k   as in base.h
//   R         routes, T k (route r = t k + j)
#pragma once

#include <cstdint>
#include <memory>

#include "ops/framework/tensor.h"
#include "ops/fused_moe/base.h"
#include "ops/fused_moe/routing.h"

namespace tokamax {

// [R, H] in x's dtype: route r's row at r H. Fresh host pages (the writers touch them first).
struct RoutedRows {
  RoutedRows(const FusedMoeProblem& p);
  char* row(int64_t route) const { return data.get() + route * row_bytes; }
  int64_t row_bytes = 0;
  std::unique_ptr<char, void (*)(void*)> data;
};

// Route `route`'s down projection `down` (f32 [H], overwritten): + bias (f32 [H] or null), times
// the route's weight, rounded to x's dtype into rows.row(route).
void store_route_row(const FusedMoeProblem& p, const MoeRouting& routing, int64_t route,
                     const float* bias, float* down, const RoutedRows& rows);

// out[t] = the sum of rows t k .. t k + k - 1 in f32, rounded once to x's dtype; threaded over
// tokens on up to num_threads threads (0: all).
void combine_routes(const FusedMoeProblem& p, const RoutedRows& rows, Tensor& out, int num_threads);

// An optional tensor (a bias, a quantized weight's scales) as f32; empty when absent.
std::vector<float> optional_f32(const Tensor* tensor);

}  // namespace tokamax
