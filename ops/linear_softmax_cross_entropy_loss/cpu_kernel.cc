// linear_softmax_cross_entropy_loss on CPU: the fused GEMM + online log-sum-exp kernel.
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size
//   tb     rows of one row tile (tile_b); nb = ceil(B / tb) row tiles
//   nv     V ranges (v_splits) of equal width (whole vectors), tasks = nb * nv
//   tv     logits columns of one chunk (at most chunk_v): each range is cut into equal chunks
//
// Memory traffic. w [H, V] is the big operand (4096 x 128256 bf16 = 1 GB for llama3.1): each row
// tile streams it once, chunk by chunk, so w is read nb times in all; tb as tall as B allows
// keeps nb at 1-4. The logits tile [tb, tv] f32 is cache-sized scratch per thread, reduced to a
// running (max, sum) per row right after its GEMM and then overwritten: the [B, V] logits never
// exist. Threads take (row tile, V range) tasks: with few rows they split V, so every core
// streams its own slice of w and none re-reads another's.
//
// Determinism. Each task folds its chunks in order into its own partial (max, sum) per row;
// the partials of the nv ranges are merged in range order afterwards, so the result does not
// depend on which thread ran which task.
#include "ops/linear_softmax_cross_entropy_loss/cpu_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/tiles.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/online_softmax.h"

namespace tokamax {
namespace {

// The logits tile of this thread, grown once and reused across calls (a kernel called in a
// training loop must not fault in fresh pages every step).
float* logits_scratch(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void lsce_cpu_row_stats(const LinearSoftmaxCrossEntropyProblem& p,
                        const LsceCpuKernelOptions& options, const void* x, const int32_t* labels,
                        const void* w, double* lse, double* label_logit) {
  const int64_t B = p.B, H = p.H, V = p.V;
  if (B == 0) return;
  const int64_t tb = std::clamp<int64_t>(options.tile_b, 1, B);
  const int64_t tv = std::clamp<int64_t>(options.chunk_v, 1, V);
  const int64_t nb = ceil_div(B, tb);
  // Ranges of equal width, in whole 16-column vectors where V allows, so that every task costs
  // the same; each range is then cut into equal chunks of at most tv columns (no thin tail chunk
  // whose GEMM would run at a fraction of the speed).
  const int64_t nv = std::clamp<int64_t>(options.v_splits, 1, ceil_div(V, 16));
  const int64_t range_width = ceil_div(ceil_div(V, nv), 16) * 16;
  const size_t x_size = dtype_size(p.x_dtype), w_size = dtype_size(p.w_dtype);

  // Partial (max, sum) per (V range, row): nv * B pairs, merged in range order below.
  std::vector<float> part_max(static_cast<size_t>(nv * B), -std::numeric_limits<float>::infinity());
  std::vector<float> part_sum(static_cast<size_t>(nv * B), 0.0f);

  CpuGemmOptions gemm;
  gemm.mr = options.mr;
  gemm.nr_vectors = options.nr_vectors;
  gemm.tk = options.tile_k;
  // x's row tiles are packed once per call (on the pool, before the tasks) and shared by every
  // chunk of every range; the GEMM packs w in [tk, tn] panels that stay in L2 while every
  // micro-panel of rows passes over them (a narrow panel keeps w's panel cache-resident).
  gemm.tn = options.tile_n;
  gemm.engine = options.engine;
  thread_local std::vector<GemmPackStorage> x_storage;
  std::vector<GemmPackRequest> x_requests;
  for (int64_t i = 0; i < nb; ++i) {
    const GemmOperand rows{p.x_dtype, static_cast<const char*>(x) + i * tb * H * int64_t(x_size), H,
                           false};
    x_requests.push_back({rows, true, std::min(tb, B - i * tb), H});
  }
  const std::vector<PackedGemmOperand> x_packed =
      pack_gemm_operands(x_requests, gemm, options.num_threads, x_storage);

  cpu::parallel_for(nb * nv, options.num_threads, [&](int64_t task, int) {
    const int64_t b_i = task / nv, range = task % nv;
    const int64_t b0 = b_i * tb, rows = std::min(tb, B - b0);
    const int64_t v_begin = std::min(V, range * range_width);
    const int64_t v_end = std::min(V, v_begin + range_width);
    const int64_t num_chunks = ceil_div(v_end - v_begin, tv);
    const int64_t chunk_width =
        num_chunks == 0 ? 0 : ceil_div(ceil_div(v_end - v_begin, num_chunks), 16) * 16;
    // chunk_width <= tv rounded up to 16 (ceil(width / ceil(width / tv)) <= tv).
    float* logits =
        logits_scratch(static_cast<size_t>(tb * ceil_div(tv, 16) * 16));  // [rows, cols]
    float* run_max = part_max.data() + range * B + b0;  // [rows] this task's running state
    float* run_sum = part_sum.data() + range * B + b0;
    for (int64_t v0 = v_begin; v0 < v_end; v0 += chunk_width) {
      const int64_t cols = std::min(chunk_width, v_end - v0);
      // w[:, v0:v0+cols] in place: row stride V, no copy beyond the GEMM's own panel packing.
      GemmOperand b;
      b.dtype = p.w_dtype;
      b.data = static_cast<const char*>(w) + v0 * static_cast<int64_t>(w_size);
      b.ld = V;
      cpu_gemm_f32(x_packed[b_i], b, cols, logits, cols, /*accumulate=*/false, gemm);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = logits + r * cols;
        // The label logit first: exp overwrites the row. Exactly one chunk holds it, so this
        // write has a single owner across tasks.
        const int64_t label = labels[b0 + r];
        if (label >= v0 && label < v0 + cols) label_logit[b0 + r] = row[label - v0];
        const float chunk_max = cpu_row_max(row, cols);
        const float chunk_sum = cpu_exp_shift_sum(row, cols, chunk_max);
        OnlineSoftmax<float> state{run_max[r], run_sum[r]};
        state.merge(chunk_max, chunk_sum);
        run_max[r] = state.max;
        run_sum[r] = state.sum;
      }
    }
  });

  // Merge the V ranges in order, in f64: nv terms per row, cheap, and the final log is taken
  // once at full precision.
  for (int64_t i = 0; i < B; ++i) {
    OnlineSoftmax<double> total;
    for (int64_t range = 0; range < nv; ++range) {
      total.merge(part_max[range * B + i], part_sum[range * B + i]);
    }
    lse[i] = total.log_sum_exp();
  }
}

}  // namespace tokamax
