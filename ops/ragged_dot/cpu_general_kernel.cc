// ragged_dot on CPU for the other dimension numbers: heuristics and the task loop.
#include "ops/ragged_dot/cpu_general_kernel.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

struct Task {
  int64_t group = 0, row0 = 0, rows = 0, col0 = 0, cols = 0;
};

// Rows of one group's output: its rows of M (trans_rhs) or all of M (ragged_contracting).
int64_t group_rows(const RaggedDotProblem& p, int64_t g) {
  return p.dims == RaggedDims::kRaggedContracting ? p.M : p.group_sizes[g];
}

}  // namespace

CpuRaggedDotConfig cpu_general_heuristics_config(const RaggedDotProblem& p, const Device& target) {
  CpuRaggedDotConfig c = cpu_ragged_dot_heuristics_config(p, target);
  c.packing = "packed";
  c.int8_path = "dequant_f32";
  const int64_t cores = std::max(1, cpu::cpu_info(target).cores);
  int64_t most = 1;
  for (int64_t g = 0; g < p.G; ++g) most = std::max(most, group_rows(p, g));
  // Tall tasks amortise the packing of their columns (18 micro-panels, as the GEMM clients);
  // halved while there are fewer than 4 tasks per core.
  int64_t tm = std::min<int64_t>(round_up(most, c.mr), 18 * int64_t{c.mr});
  auto tasks = [&](int64_t rows_per_task) {
    int64_t count = 0;
    for (int64_t g = 0; g < p.G; ++g) count += ceil_div(group_rows(p, g), rows_per_task);
    return count;
  };
  while (tm > c.mr && tasks(tm) < 4 * cores) tm = round_up(tm / 2, c.mr);
  c.tile_m = static_cast<int>(std::max<int64_t>(tm, 1));
  return c;
}

std::vector<CpuRaggedDotConfig> cpu_general_autotuning_configs(const RaggedDotProblem& p,
                                                               const Device& target) {
  std::vector<CpuRaggedDotConfig> configs = {cpu_general_heuristics_config(p, target)};
  for (CpuRaggedDotConfig c : cpu_ragged_dot_autotuning_configs(p, target)) {
    if (c.packing != "packed" || c.int8_path != "dequant_f32") continue;
    if (std::none_of(configs.begin(), configs.end(),
                     [&](const CpuRaggedDotConfig& seen) { return seen.key() == c.key(); })) {
      configs.push_back(c);
    }
  }
  return configs;
}

void ragged_dot_general_cpu_kernel(const RaggedDotProblem& p, const CpuRaggedDotConfig& c,
                                   const Tensor& lhs, const Tensor& rhs, Tensor& out) {
  if (p.out_dtype == DType::kF64 || p.lhs_dtype == DType::kF64 || p.rhs_dtype == DType::kF64) {
    throw NotImplemented("cpu ragged_dot: " + std::string(ragged_dims_name(p.dims)) +
                         " with f64 runs on the GEMM engine's f32 accumulators only");
  }
  const bool contracting = p.dims == RaggedDims::kRaggedContracting;
  const int64_t M = p.M, K = p.K, N = p.N;
  const int64_t lsize = static_cast<int64_t>(dtype_size(p.lhs_dtype));
  const int64_t rsize = static_cast<int64_t>(dtype_size(p.rhs_dtype));
  const int64_t osize = static_cast<int64_t>(dtype_size(p.out_dtype));
  const char* a = static_cast<const char*>(lhs.raw());
  const char* b = static_cast<const char*>(rhs.raw());
  char* o = static_cast<char*>(out.raw());
  const CpuGemmOptions gemm{.mr = c.mr,
                            .nr_vectors = c.nr / cpu::simd_f32_lanes(),
                            .tk = c.tile_k,
                            .tn = c.tile_n,
                            .engine = gemm_engine(c.bf16_path)};
  const int64_t tm = std::max<int64_t>(c.tile_m, 1);
  const int64_t tn = c.task_n > 0 ? c.task_n : std::max<int64_t>(N, 1);

  // What no product writes is zero: trans_rhs's rows outside the groups, ragged_contracting's
  // out[g] of an empty group (and every group when K or N is empty).
  if (!contracting) {
    std::memset(o, 0, static_cast<size_t>(p.first_row() * N * osize));
    std::memset(o + p.rows() * N * osize, 0, static_cast<size_t>((M - p.rows()) * N * osize));
  }
  std::vector<Task> tasks;
  for (int64_t g = 0; g < p.G; ++g) {
    if (contracting && p.group_sizes[g] == 0) {
      std::memset(o + g * M * N * osize, 0, static_cast<size_t>(M * N * osize));
      continue;
    }
    const int64_t first = contracting ? 0 : p.group_starts[g];
    for (int64_t r = 0; r < group_rows(p, g); r += tm) {
      for (int64_t n = 0; n < N; n += tn) {
        tasks.push_back({g, first + r, std::min(tm, group_rows(p, g) - r), n, std::min(tn, N - n)});
      }
    }
  }
  cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t i, int) {
    const Task& t = tasks[i];
    thread_local std::vector<float> acc;
    if (static_cast<int64_t>(acc.size()) < t.rows * t.cols) acc.resize(t.rows * t.cols);
    if (contracting) {
      // A = lhs_g^T: lhs [K, M] rows [k0, k0 + size) from column row0; B = rhs_g rows.
      const int64_t k0 = p.group_starts[t.group], depth = p.group_sizes[t.group];
      cpu_gemm_f32({p.lhs_dtype, a + (k0 * M + t.row0) * lsize, M, /*transposed=*/true},
                   {p.rhs_dtype, b + (k0 * N + t.col0) * rsize, N}, t.rows, t.cols, depth,
                   acc.data(), t.cols, /*accumulate=*/false, gemm);
      store_rows(acc.data(), t.cols, t.rows, t.cols, p.out_dtype,
                 o + ((t.group * M + t.row0) * N + t.col0) * osize, N);
    } else {
      // B = rhs[g]^T: rhs [G, N, K], rows [col0, col0 + cols) of group g read transposed.
      cpu_gemm_f32({p.lhs_dtype, a + t.row0 * K * lsize, K},
                   {p.rhs_dtype, b + (t.group * N + t.col0) * K * rsize, K, /*transposed=*/true},
                   t.rows, t.cols, K, acc.data(), t.cols, /*accumulate=*/false, gemm);
      store_rows(acc.data(), t.cols, t.rows, t.cols, p.out_dtype, o + (t.row0 * N + t.col0) * osize,
                 N);
    }
  });
}

}  // namespace tokamax
