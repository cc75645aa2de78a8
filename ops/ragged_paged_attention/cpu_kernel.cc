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
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/online_softmax.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/ragged_paged_attention/cpu_core.h"

namespace tokamax {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Keys per product: enough that a product's fixed costs (packing, the call) are noise per key,
// few enough that the K and V staging (2 x 256 x D f32: 256 KiB at D = 128) stays in L2.
constexpr int64_t kChunkKeys = 256;

// kv heads [h0, h1) of tokens [t0, t0 + rows) of sequence `seq`.
struct Task {
  int64_t seq = 0, h0 = 0, h1 = 0, t0 = 0, rows = 0;
};

struct Scratch {
  std::vector<float> q, s, o, k_rows, v_rows;
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
                                       const Device& device, const TensorMap& inputs,
                                       TensorMap& outputs) {
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
  const bool decode_pages = is_quantized(p.kv_dtype);
  // A block of few rows (decode: M = g rows <= 4) streams its keys; its task takes every kv head,
  // so that it walks each page's rows (all heads side by side) in memory order. Other blocks
  // take one kv head each.
  std::vector<Task> tasks;
  const bool on_core = c.prefill == "core";
  for (int64_t s = 0; s < p.active(); ++s) {
    if (on_core && rpa_sequence_on_core(p, s)) {
      rpa_run_sequence_on_core(p, s, c.num_threads, device, inputs.at("queries"), *cache, out, lse);
      continue;
    }
    for (int64_t t0 = p.cu_q_lens[s]; t0 < p.cu_q_lens[s + 1]; t0 += bq) {
      const int64_t rows = std::min(bq, p.cu_q_lens[s + 1] - t0);
      if (g * rows <= kCpuStreamRows && !decode_pages) {
        tasks.push_back({s, 0, p.Hkv, t0, rows});
        continue;
      }
      for (int64_t h = 0; h < p.Hkv; ++h) tasks.push_back({s, h, h + 1, t0, rows});
    }
  }
  const char* cache_data = static_cast<const char*>(cache->raw());
  const size_t kv_size = dtype_size(p.kv_dtype);
  const std::vector<float> ones(static_cast<size_t>(p.D), 1.0f);
  const CpuGemmOptions gemm{};
  const float scale = static_cast<float>(p.sm_scale / p.k_scale);
  const float cap = static_cast<float>(p.soft_cap);
  char* out_data = static_cast<char*>(out.raw());
  const size_t out_size = dtype_size(p.out_dtype);

  cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t index, int) {
    thread_local Scratch sc;
    const Task& task = tasks[index];
    const int64_t rows = task.rows, M = g * rows, ps = p.page_size, heads = task.h1 - task.h0;
    float* q_all = grown(sc.q, heads * M * D);
    float* o_all = grown(sc.o, heads * M * D);
    int64_t* lo = grown(sc.lo, M);
    int64_t* hi = grown(sc.hi, M);
    sc.state.assign(static_cast<size_t>(heads * M), OnlineSoftmax<float>{});
    std::fill_n(o_all, heads * M * D, 0.0f);
    // Row m of head slot hh: query head (h0 + hh) g + m / rows, token t0 + m % rows.
    int64_t first = INT64_MAX, last = 0;
    dispatch_float(p.q_dtype, [&](auto type) {
      using T = decltype(type);
      const T* src = inputs.at("queries").data<T>();
      for (int64_t hh = 0; hh < heads; ++hh) {
        for (int64_t m = 0; m < M; ++m) {
          const int64_t t = task.t0 + m % rows, hq = (task.h0 + hh) * g + m / rows;
          for (int64_t x = 0; x < D; ++x) {
            q_all[(hh * M + m) * D + x] =
                to_float(src[(t * p.Hq + hq) * D + x]) / static_cast<float>(p.q_scale);
          }
        }
      }
      for (int64_t m = 0; m < M; ++m) {
        const auto [a, b] = RpaTokens::key_range(p, task.seq, tokens.pos[task.t0 + m % rows]);
        lo[m] = a;
        hi[m] = b;
        first = std::min(first, a);
        last = std::max(last, b);
      }
    });
    // Chunks of whole pages over [first, last); for each, every kv head of the task: its keys'
    // logits, the online softmax, P V.
    const int64_t chunk = std::max<int64_t>(kChunkKeys / ps, 1) * ps;
    float* kd = grown(sc.k_rows, chunk * D);
    float* vd = grown(sc.v_rows, chunk * D);
    float* s_tile = grown(sc.s, M * chunk);
    // Few rows (decode): each key row read in place once for all of them; else staged.
    const bool stream = M <= kCpuStreamRows && !decode_pages;
    for (int64_t c0 = first / ps * ps; c0 < last; c0 += chunk) {
      const int64_t a = std::max(c0, first), b = std::min(c0 + chunk, last), n = b - a;
      for (int64_t hh = 0; hh < heads; ++hh) {
        const int64_t head = task.h0 + hh;
        const float* q = q_all + hh * M * D;
        float* o = o_all + hh * M * D;
        OnlineSoftmax<float>* states = sc.state.data() + hh * M;
        for (int64_t j = a; j < b;) {  // one page's run of keys
          const int64_t run = std::min(b, (j / ps + 1) * ps) - j;
          const char* k_rows = cache_data + rpa_cache_at(p, task.seq, j, head, 0) * kv_size;
          const char* v_rows = cache_data + rpa_cache_at(p, task.seq, j, head, 1) * kv_size;
          if (stream) {
            const RowDotArgs dots{q, M, k_rows, p.kv_dtype, ld, run, D, s_tile + (j - a), n};
            if (!row_dots_f32(dots)) throw NotImplemented("cpu ragged_paged_attention: row dots");
          } else {
            float* k_out = kd + (j - a) * D;
            float* v_out = vd + (j - a) * D;
            if (decode_pages) {  // scale 1: k_scale is folded into the logits, v_scale at the end
              pack_rhs_panel_dequant(p.kv_dtype, k_rows, ld, run, D, D, ones.data(), 0, 0, run,
                                     k_out);
              pack_rhs_panel_dequant(p.kv_dtype, v_rows, ld, run, D, D, ones.data(), 0, 0, run,
                                     v_out);
            } else {
              pack_rhs_panel(p.kv_dtype, k_rows, ld, run, D, D, k_out);
              pack_rhs_panel(p.kv_dtype, v_rows, ld, run, D, D, v_out);
            }
          }
          j += run;
        }
        if (!stream) {
          cpu_gemm_f32({DType::kF32, q, D}, {DType::kF32, kd, D, /*transposed=*/true}, M, n, D,
                       s_tile, n, /*accumulate=*/false, gemm);
        }
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
          OnlineSoftmax<float>& state = states[m];
          const float target = std::max(state.max, cpu_row_max(row, n));
          const float block_sum = cpu_exp_shift_sum(row, n, target);
          const float rescale = state.merge(target, block_sum);
          if (rescale != 1.0f) cpu_scale_row(o + m * D, D, rescale);
        }
        if (!stream) {
          cpu_gemm_f32({DType::kF32, s_tile, n}, {DType::kF32, vd, D}, M, D, n, o, D,
                       /*accumulate=*/true, gemm);
          continue;
        }
        // P V page run by page run on the streaming kernel, V read in place, into o.
        for (int64_t j = a; j < b;) {
          const int64_t run = std::min(b, (j / ps + 1) * ps) - j;
          StreamArgs args{};
          args.lhs = s_tile + (j - a);
          args.lda = n;
          args.accumulate = true;
          args.lhs_dtype = DType::kF32;
          args.rows = M;
          args.rhs = cache_data + rpa_cache_at(p, task.seq, j, head, 1) * kv_size;
          args.rhs_dtype = p.kv_dtype;
          args.ldb = ld;
          args.K = run;
          args.cols = D;
          args.out = o;
          args.ldc = D;
          if (!stream_rows_f32(args)) throw NotImplemented("cpu ragged_paged_attention: streaming");
          j += run;
        }
      }
    }
    for (int64_t hh = 0; hh < heads; ++hh) {
      for (int64_t m = 0; m < M; ++m) {
        const int64_t t = task.t0 + m % rows, hq = (task.h0 + hh) * g + m / rows;
        const OnlineSoftmax<float>& state = sc.state[hh * M + m];
        float* o = o_all + (hh * M + m) * D;
        const float inv =
            state.sum > 0.0f ? 1.0f / (state.sum * static_cast<float>(p.v_scale)) : 0.0f;
        cpu_scale_row(o, D, inv);
        store_rows(o, D, 1, D, p.out_dtype, out_data + (t * p.Hq + hq) * D * out_size, D);
        if (lse && state.sum > 0.0f) lse[t * p.Hq + hq] = state.max + std::log(state.sum);
      }
    }
  });
}

}  // namespace tokamax
