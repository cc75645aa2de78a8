// ragged_paged_attention on CPU: the batch's tasks (cpu_kernel.h).
#include "ops/ragged_paged_attention/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/online_softmax.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Task {
  int64_t seq = 0, head = 0, t0 = 0, rows = 0;
};

struct Scratch {
  std::vector<float> q, s, o, k_rows, v_rows, ones;
  std::vector<OnlineSoftmax<float>> state;
  std::vector<int64_t> lo, hi;
};

template <typename V>
typename V::value_type* grown(V& v, int64_t count) {
  if (static_cast<int64_t>(v.size()) < count) v.resize(static_cast<size_t>(count));
  return v.data();
}

}  // namespace

void ragged_paged_attention_cpu_kernel(const RaggedPagedAttentionProblem& p, const CpuRpaConfig& c,
                                       const TensorMap& inputs, TensorMap& outputs) {
  const RpaTokens tokens(p);
  const Tensor* cache = &inputs.at("kv_cache");
  if (!p.skip_kv_update) {
    rpa_update_cache(p, tokens, inputs, outputs.at("updated_kv_cache"));
    cache = &outputs.at("updated_kv_cache");
  }
  Tensor& out = outputs.at("out");
  std::memset(out.raw(), 0, out.size_bytes());  // invalid tokens
  float* lse = p.return_lse ? outputs.at("lse").data<float>() : nullptr;
  if (lse) std::fill_n(lse, p.Tq * p.Hq, kNegInf);
  if (p.Tq == 0 || p.D == 0) return;

  const int64_t g = p.groups(), D = p.D, ld = 2 * p.Hkv * p.Dp;
  const int64_t bq = std::max(c.block_q, 1);
  std::vector<Task> tasks;
  for (int64_t s = 0; s < p.active(); ++s) {
    for (int64_t h = 0; h < p.Hkv; ++h) {
      for (int64_t t0 = p.cu_q_lens[s]; t0 < p.cu_q_lens[s + 1]; t0 += bq) {
        tasks.push_back({s, h, t0, std::min(bq, p.cu_q_lens[s + 1] - t0)});
      }
    }
  }
  const char* cache_data = static_cast<const char*>(cache->raw());
  const size_t kv_size = dtype_size(p.kv_dtype);
  const bool decode_pages = is_quantized(p.kv_dtype);
  const CpuGemmOptions gemm{};
  const float scale = static_cast<float>(p.sm_scale / p.k_scale);
  const float cap = static_cast<float>(p.soft_cap);
  char* out_data = static_cast<char*>(out.raw());
  const size_t out_size = dtype_size(p.out_dtype);

  cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t index, int) {
    thread_local Scratch sc;
    const Task& task = tasks[index];
    const int64_t rows = task.rows, M = g * rows, ps = p.page_size;
    float* q = grown(sc.q, M * D);
    float* o = grown(sc.o, M * D);
    float* s_tile = grown(sc.s, M * ps);
    int64_t* lo = grown(sc.lo, M);
    int64_t* hi = grown(sc.hi, M);
    sc.state.assign(static_cast<size_t>(M), OnlineSoftmax<float>{});
    std::fill_n(o, M * D, 0.0f);
    // Row m: head h g + m / rows, token t0 + m % rows.
    int64_t first = INT64_MAX, last = 0;
    dispatch_float(p.q_dtype, [&](auto type) {
      using T = decltype(type);
      const T* src = inputs.at("queries").data<T>();
      for (int64_t m = 0; m < M; ++m) {
        const int64_t t = task.t0 + m % rows, hq = task.head * g + m / rows;
        for (int64_t x = 0; x < D; ++x) {
          q[m * D + x] = to_float(src[(t * p.Hq + hq) * D + x]) / static_cast<float>(p.q_scale);
        }
        const auto [a, b] = RpaTokens::key_range(p, task.seq, tokens.pos[t]);
        lo[m] = a;
        hi[m] = b;
        first = std::min(first, a);
        last = std::max(last, b);
      }
    });
    // Page by page over [first, last): the keys of one page are page_size rows, ld apart.
    for (int64_t j0 = first / ps * ps; j0 < last; j0 += ps) {
      const int64_t a = std::max(j0, first), n = std::min(j0 + ps, last) - a;
      const char* k_rows = cache_data + rpa_cache_at(p, task.seq, a, task.head, 0) * kv_size;
      const char* v_rows = cache_data + rpa_cache_at(p, task.seq, a, task.head, 1) * kv_size;
      GemmOperand k_t{p.kv_dtype, k_rows, ld, /*transposed=*/true};
      GemmOperand v_op{p.kv_dtype, v_rows, ld};
      if (decode_pages) {  // fp8 pages to f32 rows first (scale 1: k_scale is folded above)
        float* ones = grown(sc.ones, D);
        std::fill_n(ones, D, 1.0f);
        float* kd = grown(sc.k_rows, n * D);
        float* vd = grown(sc.v_rows, n * D);
        pack_rhs_panel_dequant(p.kv_dtype, k_rows, ld, n, D, D, ones, 0, 0, n, kd);
        pack_rhs_panel_dequant(p.kv_dtype, v_rows, ld, n, D, D, ones, 0, 0, n, vd);
        k_t = {DType::kF32, kd, D, true};
        v_op = {DType::kF32, vd, D};
      }
      cpu_gemm_f32({DType::kF32, q, D}, k_t, M, n, D, s_tile, n, /*accumulate=*/false, gemm);
      for (int64_t m = 0; m < M; ++m) {
        float* row = s_tile + m * n;
        const int64_t c_lo = std::clamp<int64_t>(lo[m] - a, 0, n);
        const int64_t c_hi = std::clamp<int64_t>(hi[m] - a, c_lo, n);
        std::fill(row, row + c_lo, kNegInf);
        std::fill(row + c_hi, row + n, kNegInf);
        for (int64_t j = c_lo; j < c_hi; ++j) {
          float z = scale * row[j];
          if (cap > 0.0f) z = cap * std::tanh(z / cap);
          row[j] = z;
        }
        OnlineSoftmax<float>& state = sc.state[m];
        const float target = std::max(state.max, cpu_row_max(row, n));
        const float block_sum = cpu_exp_shift_sum(row, n, target);
        const float rescale = state.merge(target, block_sum);
        if (rescale != 1.0f) cpu_scale_row(o + m * D, D, rescale);
      }
      cpu_gemm_f32({DType::kF32, s_tile, n}, v_op, M, D, n, o, D, /*accumulate=*/true, gemm);
    }
    for (int64_t m = 0; m < M; ++m) {
      const int64_t t = task.t0 + m % rows, hq = task.head * g + m / rows;
      const OnlineSoftmax<float>& state = sc.state[m];
      const float inv =
          state.sum > 0.0f ? 1.0f / (state.sum * static_cast<float>(p.v_scale)) : 0.0f;
      cpu_scale_row(o + m * D, D, inv);
      store_rows(o + m * D, D, 1, D, p.out_dtype, out_data + (t * p.Hq + hq) * D * out_size, D);
      if (lse && state.sum > 0.0f) lse[t * p.Hq + hq] = state.max + std::log(state.sum);
    }
  });
}

}  // namespace tokamax
