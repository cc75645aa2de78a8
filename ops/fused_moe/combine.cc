// fused_moe: the per-route store and the combine pass.
#include "ops/fused_moe/combine.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {

RoutedRows::RoutedRows(const FusedMoeProblem& p)
    : row_bytes(p.H * static_cast<int64_t>(dtype_size(p.x_dtype))),
      data(static_cast<char*>(cpu::allocate_host(static_cast<size_t>(p.routes() * row_bytes))),
           cpu::free_host) {}

void store_route_row(const FusedMoeProblem& p, const MoeRouting& routing, int64_t route,
                     const float* bias, float* down, const RoutedRows& rows) {
  const float weight = routing.weight[route];
  if (bias) {
    for (int64_t c = 0; c < p.H; ++c) down[c] = (down[c] + bias[c]) * weight;
  } else {
    for (int64_t c = 0; c < p.H; ++c) down[c] *= weight;
  }
  store_rows(down, p.H, 1, p.H, p.x_dtype, rows.row(route), p.H);
}

void combine_routes(const FusedMoeProblem& p, const RoutedRows& rows, Tensor& out,
                    int num_threads) {
  constexpr int64_t kTokensPerTask = 16;
  const int64_t H = p.H;
  char* dst = static_cast<char*>(out.raw());
  dispatch_float(p.x_dtype, [&](auto type) {
    using T = decltype(type);
    cpu::parallel_for((p.T + kTokensPerTask - 1) / kTokensPerTask, num_threads,
                      [&](int64_t task, int) {
                        thread_local std::vector<float> acc;
                        if (static_cast<int64_t>(acc.size()) < H) acc.resize(H);
                        const int64_t t_end = std::min(p.T, (task + 1) * kTokensPerTask);
                        for (int64_t t = task * kTokensPerTask; t < t_end; ++t) {
                          const T* first = reinterpret_cast<const T*>(rows.row(t * p.k));
                          for (int64_t c = 0; c < H; ++c) acc[c] = to_float(first[c]);
                          for (int64_t j = 1; j < p.k; ++j) {
                            const T* row = first + j * H;
                            for (int64_t c = 0; c < H; ++c) acc[c] += to_float(row[c]);
                          }
                          store_rows(acc.data(), H, 1, H, p.x_dtype, dst + t * rows.row_bytes, H);
                        }
                      });
  });
}

std::vector<float> optional_f32(const Tensor* tensor) {
  std::vector<float> values;
  if (!tensor) return values;
  values.resize(static_cast<size_t>(tensor->num_elements()));
  for (int64_t i = 0; i < tensor->num_elements(); ++i) {
    values[i] = static_cast<float>(tensor->get(i));
  }
  return values;
}

}  // namespace tokamax
