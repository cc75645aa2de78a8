// ragged_dot_vjp on CPU: both gradient products as one set of GEMM tasks on the shared engine.
//
// Dimensions: as cpu_config.h (tm, tn, tk, pn, mr, nr); s_g the first row of group g.
//
// dlhs rows of group g are dout_g [rows_g, N] times rhs[g]^T: rhs[g] is stored [K, N], so B is
// read transposed (its packing walks rhs rows, contiguous along the contraction N). drhs[g] is
// lhs_g^T [K, rows_g] times dout_g [rows_g, N]: A is read transposed, its contraction the ragged
// dimension. Both run through cpu_gemm_f32 (its packed panels and micro-kernels, ~90% of the FMA
// peak on large tiles), one task per output tile [tm, tn] of either gradient, all in one
// dynamically scheduled loop so that a skewed routing still balances: a task computes its whole
// contraction, so no two tasks write one element and nothing is reduced afterwards. The B operand
// of a column block (rhs[g]^T's or dout_g's columns, over the whole contraction) is packed once
// and shared by the tasks of its row tiles when it has several, in waves of at most 64 MiB of
// packed slabs: the loop of a wave first packs its slabs, then runs their tasks.
#include "ops/ragged_dot/vjp/cpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_gemm/tiles.h"

namespace tokamax {
namespace {

float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

// One output tile: rows [r0, r0 + rows) and columns [c0, c0 + cols) of dlhs's group g rows
// (r0 relative to s_g, columns a K range) or of drhs[g] (rows a K range, columns an N range).
struct Task {
  enum Kind { kDlhs, kDrhs } kind;
  int64_t g, r0, rows, c0, cols;
};

}  // namespace

void ragged_dot_vjp_cpu_kernel(const RaggedDotVjpProblem& vp, const CpuRaggedDotVjpConfig& c,
                               const Tensor& lhs, const Tensor& rhs, const Tensor& dout,
                               Tensor& dlhs, Tensor& drhs, int64_t wave_bytes) {
  const RaggedDotProblem& p = vp.fwd;
  if (dlhs.dtype() != vp.dlhs_dtype || drhs.dtype() != vp.drhs_dtype) {
    throw InvalidArgument("ragged_dot_vjp cpu kernel: dlhs / drhs are not of the problem's dtypes",
                          "dlhs");
  }
  const int64_t M = p.M, K = p.K, N = p.N;
  const size_t lhs_size = dtype_size(p.lhs_dtype), rhs_size = dtype_size(p.rhs_dtype);
  const size_t dout_size = dtype_size(vp.dout_dtype);
  // The gradients' own dtypes (the inputs', or f32 for the passes of a precision preset).
  const size_t dlhs_size = dtype_size(vp.dlhs_dtype), drhs_size = dtype_size(vp.drhs_dtype);
  char* dlhs_data = static_cast<char*>(dlhs.raw());
  char* drhs_data = static_cast<char*>(drhs.raw());
  // Rows with no forward output (before the shard, past the group sum) have a zero gradient.
  std::memset(dlhs_data, 0, static_cast<size_t>(p.first_row() * K) * dlhs_size);
  std::memset(dlhs_data + p.rows() * K * static_cast<int64_t>(dlhs_size), 0,
              static_cast<size_t>((M - p.rows()) * K) * dlhs_size);
  if (K == 0) return;

  const int64_t tm = c.tile_m, tn = c.tile_n;
  const int lanes = cpu::simd_f32_lanes();
  CpuGemmOptions gemm;
  gemm.mr = c.mr;
  gemm.nr_vectors = c.nr / lanes;
  gemm.tk = c.tile_k;
  gemm.tn = c.panel_n;
  gemm.engine = gemm_engine(c.bf16_path);
  const char* lhs_data = static_cast<const char*>(lhs.raw());
  const char* rhs_data = static_cast<const char*>(rhs.raw());
  const char* dout_data = static_cast<const char*>(dout.raw());
  const bool dlhs_f32 = vp.dlhs_dtype == DType::kF32, drhs_f32 = vp.drhs_dtype == DType::kF32;

  // The B operand of a column block [c0, c0 + cols) of either gradient of group g: rhs[g]^T for
  // dlhs (contraction N), dout_g for drhs (contraction rows_g).
  auto b_operand = [&](Task::Kind kind, int64_t g, int64_t c0) -> GemmOperand {
    if (kind == Task::kDlhs) {
      return {p.rhs_dtype, rhs_data + (g * K + c0) * N * static_cast<int64_t>(rhs_size), N, true};
    }
    return {vp.dout_dtype,
            dout_data + (p.group_starts[g] * N + c0) * static_cast<int64_t>(dout_size), N, false};
  };
  // Slabs: one per (gradient, group, column block), packed once and shared by the tasks of all
  // its row tiles, in waves of at most wave_bytes (one slab at least).
  struct Slab {
    Task::Kind kind;
    int64_t g, c0, cols, depth;
  };
  std::vector<Slab> slabs;
  std::vector<std::vector<Task>> slab_tasks;
  // The slabs of one gradient of group g: column blocks of `width`, each with its row tiles of
  // `height` rows, contracting over `depth`.
  auto add_slabs = [&](Task::Kind kind, int64_t g, int64_t height, int64_t width, int64_t depth) {
    for (int64_t c0 = 0; c0 < width; c0 += tn) {
      const int64_t cols = std::min(tn, width - c0);
      slabs.push_back({kind, g, c0, cols, depth});
      slab_tasks.emplace_back();
      // Row tiles of at most tm, cut evenly (micro_tile.h's even_tile: no sliver task).
      const int64_t tile = even_tile(height, tm, c.mr);
      for (int64_t r0 = 0; r0 < height; r0 += tile) {
        slab_tasks.back().push_back({kind, g, r0, std::min(tile, height - r0), c0, cols});
      }
    }
  };
  std::vector<int64_t> empty_groups;  // their drhs[g] is zeroed
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t rows_g = p.group_sizes[g];
    if (rows_g == 0) {
      empty_groups.push_back(g);
      continue;
    }
    add_slabs(Task::kDrhs, g, K, N, rows_g);
    add_slabs(Task::kDlhs, g, rows_g, K, N);
  }
  const int64_t group_bytes = K * N * static_cast<int64_t>(drhs_size);
  cpu::parallel_for(static_cast<int64_t>(empty_groups.size()), c.num_threads, [&](int64_t i, int) {
    std::memset(drhs_data + empty_groups[i] * group_bytes, 0, static_cast<size_t>(group_bytes));
  });

  // Kept between calls, grown as needed (the loop bodies run on other threads: they reach the
  // thread_local through a reference).
  thread_local std::vector<GemmPackStorage> storage_of_caller;
  std::vector<GemmPackStorage>& storage = storage_of_caller;
  const int64_t slab_count = static_cast<int64_t>(slabs.size());
  for (int64_t first = 0; first < slab_count;) {
    // A slab with one row tile gains nothing from packing ahead (its panels would go to memory
    // and back instead of staying in L2): its task packs as it goes, and costs the wave nothing.
    auto shared = [&](int64_t slab) { return slab_tasks[static_cast<size_t>(slab)].size() > 1; };
    auto slab_bytes = [&](int64_t slab) {
      return shared(slab) ? 4 * slabs[slab].depth * round_up(slabs[slab].cols, c.nr) : 0;
    };
    int64_t last = first, bytes = 0;
    while (last < slab_count && (last == first || bytes + slab_bytes(last) <= wave_bytes)) {
      bytes += slab_bytes(last);
      ++last;
    }
    const int64_t count = last - first;
    // The shared slabs' packing a piece at a time over the cores (skewed routing gives slabs
    // of very different depths); an unshared slab is an empty slot.
    std::vector<GemmPackRequest> requests(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const Slab& slab = slabs[static_cast<size_t>(first + i)];
      if (shared(first + i)) {
        requests[i] = {b_operand(slab.kind, slab.g, slab.c0), false, slab.cols, slab.depth};
      }
    }
    const std::vector<PackedGemmOperand> packed =
        pack_gemm_operands(requests, gemm, c.num_threads, storage);
    // The wave's tasks, the largest first: the dynamic schedule then ends on small ones.
    std::vector<std::pair<int64_t, Task>> tasks;  // (slab within the wave, task)
    for (int64_t i = 0; i < count; ++i) {
      for (const Task& t : slab_tasks[static_cast<size_t>(first + i)]) tasks.push_back({i, t});
    }
    std::stable_sort(tasks.begin(), tasks.end(), [&](const auto& a, const auto& b) {
      auto work = [&](const Task& t) {
        return t.rows * t.cols * (t.kind == Task::kDlhs ? N : p.group_sizes[t.g]);
      };
      return work(a.second) > work(b.second);
    });
    cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t i, int) {
      // (Plain references, not a structured binding: the lambda below captures them.)
      const int64_t slab = tasks[static_cast<size_t>(i)].first;
      const Task& t = tasks[static_cast<size_t>(i)].second;
      const int64_t s_g = p.group_starts[t.g];
      GemmOperand a;
      char* out = nullptr;
      int64_t ld_out = 0;
      DType out_dtype = DType::kF32;
      if (t.kind == Task::kDlhs) {
        // dlhs[s_g + r0 + r, c0 + j] = sum_n dout[s_g + r0 + r, n] rhs[g, c0 + j, n].
        a = {vp.dout_dtype, dout_data + (s_g + t.r0) * N * static_cast<int64_t>(dout_size), N,
             false};
        out_dtype = vp.dlhs_dtype;
        out = dlhs_data + ((s_g + t.r0) * K + t.c0) * static_cast<int64_t>(dlhs_size);
        ld_out = K;
      } else {
        // drhs[g, r0 + r, c0 + j] = sum_m lhs[s_g + m, r0 + r] dout[s_g + m, c0 + j].
        a = {p.lhs_dtype, lhs_data + (s_g * K + t.r0) * static_cast<int64_t>(lhs_size), K, true};
        out_dtype = vp.drhs_dtype;
        out = drhs_data + ((t.g * K + t.r0) * N + t.c0) * static_cast<int64_t>(drhs_size);
        ld_out = N;
      }
      const bool f32_out = t.kind == Task::kDlhs ? dlhs_f32 : drhs_f32;
      const int64_t depth = slabs[static_cast<size_t>(first + slab)].depth;
      auto product = [&](float* c_out, int64_t ldc) {
        if (shared(first + slab)) {
          cpu_gemm_f32(a, packed[static_cast<size_t>(slab)], t.rows, c_out, ldc, false, gemm);
        } else {
          cpu_gemm_f32(a, b_operand(t.kind, t.g, t.c0), t.rows, t.cols, depth, c_out, ldc, false,
                       gemm);
        }
      };
      if (f32_out) {
        product(reinterpret_cast<float*>(out), ld_out);
        return;
      }
      // 16-bit gradients: the f32 tile, then one rounding per element on the store.
      float* tile = scratch_floats(static_cast<size_t>(t.rows * t.cols));
      product(tile, t.cols);
      store_rows(tile, t.cols, t.rows, t.cols, out_dtype, out, ld_out);
    });
    first = last;
  }
}

}  // namespace tokamax
