// fused_moe on CPU: the fused layer's task loop and combine pass.
#include "ops/fused_moe/cpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

struct Task {
  int64_t expert = 0, first = 0, count = 0;  // sorted positions [first, first + count)
};

// A task's scratch, per thread, only growing (pool threads persist).
struct Scratch {
  std::vector<char> rows;   // [m, H] x's dtype: the gathered token rows
  std::vector<float> gate;  // [m, 2 I]: the gate/up product
  std::vector<float> act;   // [m, I]
  std::vector<bf16> act16;  // [m, I]: act rounded for a bf16 engine
  std::vector<float> down;  // [m, H]
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

template <typename V>
typename V::value_type* grown(V& v, int64_t count) {
  if (static_cast<int64_t>(v.size()) < count) v.resize(static_cast<size_t>(count));
  return v.data();
}

// A bias [E, 1, cols] as f32 [E, cols] (empty without one).
std::vector<float> bias_f32(const Tensor* bias) {
  std::vector<float> values;
  if (!bias) return values;
  values.resize(static_cast<size_t>(bias->num_elements()));
  for (int64_t i = 0; i < bias->num_elements(); ++i) values[i] = static_cast<float>(bias->get(i));
  return values;
}

// C[m, N] = A[m, K] B[K, N]: the streaming kernel for a few rows (bound by reading B), the
// engine's tiles otherwise.
void product(const GemmOperand& a, const GemmOperand& b, int64_t m, int64_t N, int64_t K, float* c,
             const CpuGemmOptions& options) {
  if (m <= kCpuStreamRows && a.ld == K && a.dtype == b.dtype) {
    StreamArgs args{};
    args.lhs = a.data;
    args.lhs_dtype = a.dtype;
    args.rows = m;
    args.rhs = b.data;
    args.rhs_dtype = b.dtype;
    args.ldb = b.ld;
    args.K = K;
    args.cols = N;
    args.out = c;
    args.ldc = N;
    if (stream_rows_f32(args)) return;
  }
  cpu_gemm_f32(a, b, m, N, K, c, N, /*accumulate=*/false, options);
}

}  // namespace

void fused_moe_cpu_kernel(const FusedMoeProblem& p, const CpuFusedMoeConfig& c,
                          const MoeRouting& routing, const Tensor& x, const Tensor& w1,
                          const Tensor& w2, const Tensor* w1_bias, const Tensor* w2_bias,
                          Tensor& out) {
  const int64_t H = p.H, I = p.I, N1 = 2 * I, R = p.routes();
  const GemmEngine engine = gemm_engine(c.bf16_path);
  const CpuGemmOptions gemm{.mr = c.mr,
                            .nr_vectors = c.nr / cpu::simd_f32_lanes(),
                            .tk = c.tile_k,
                            .tn = c.panel_n,
                            .engine = engine};
  const std::vector<float> b1 = bias_f32(w1_bias), b2 = bias_f32(w2_bias);
  const GluForm form{.clamped = moe_clamped_form(p.act)};
  const size_t x_size = dtype_size(p.x_dtype), w_size = dtype_size(p.w_dtype);
  const char* xs = static_cast<const char*>(x.raw());
  const char* w1s = static_cast<const char*>(w1.raw());
  const char* w2s = static_cast<const char*>(w2.raw());

  std::vector<Task> tasks;
  for (int64_t e = 0; e < p.E; ++e) {
    for (int64_t s = routing.expert_start[e]; s < routing.expert_start[e + 1]; s += c.tile_m) {
      tasks.push_back({e, s, std::min<int64_t>(c.tile_m, routing.expert_start[e + 1] - s)});
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& l, const Task& r) { return l.count > r.count; });

  // Each route's weighted down projection, in route order (a token's k rows adjacent); fresh
  // pages, first touched by the task that writes them.
  const std::unique_ptr<float, void (*)(void*)> routed(
      static_cast<float*>(cpu::allocate_host(static_cast<size_t>(R * H) * sizeof(float))),
      cpu::free_host);
  float* y = routed.get();

  cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t index, int) {
    const Task& task = tasks[index];
    const int64_t m = task.count, e = task.expert;
    Scratch& s = thread_scratch();
    char* rows = grown(s.rows, m * H * static_cast<int64_t>(x_size));
    float* gate = grown(s.gate, m * N1);
    float* act = grown(s.act, m * I);
    float* down = grown(s.down, m * H);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t token = routing.sorted[task.first + i] / p.k;
      std::memcpy(rows + i * H * x_size, xs + token * H * x_size, H * x_size);
    }
    product({p.x_dtype, rows, H}, {p.w_dtype, w1s + e * H * N1 * w_size, N1}, m, N1, H, gate,
            gemm);
    const float* gb = b1.empty() ? nullptr : b1.data() + e * N1;
    for (int64_t i = 0; i < m; ++i) {
      cpu_biased_glu_row(Activation::kSilu, form, gate + i * N1, gb, gate + i * N1 + I,
                         gb ? gb + I : nullptr, act + i * I, I);
    }
    GemmOperand hidden{DType::kF32, act, I};
    if (engine != GemmEngine::kF32Fma) {
      bf16* act16 = grown(s.act16, m * I);
      store_rows(act, I, m, I, DType::kBF16, act16, I);
      hidden = {DType::kBF16, act16, I};
    }
    product(hidden, {p.w_dtype, w2s + e * I * H * w_size, H}, m, H, I, down, gemm);
    const float* db = b2.empty() ? nullptr : b2.data() + e * H;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t route = routing.sorted[task.first + i];
      const float weight = routing.weight[route];
      const float* src = down + i * H;
      float* dst = y + route * H;
      if (db) {
        for (int64_t col = 0; col < H; ++col) dst[col] = (src[col] + db[col]) * weight;
      } else {
        for (int64_t col = 0; col < H; ++col) dst[col] = src[col] * weight;
      }
    }
  });

  // out[t] = the sum of its k routes' rows, rounded once.
  constexpr int64_t kTokensPerTask = 16;
  char* dst = static_cast<char*>(out.raw());
  cpu::parallel_for(ceil_div(p.T, kTokensPerTask), c.num_threads, [&](int64_t task, int) {
    Scratch& s = thread_scratch();
    float* acc = grown(s.down, H);
    const int64_t t_end = std::min(p.T, (task + 1) * kTokensPerTask);
    for (int64_t t = task * kTokensPerTask; t < t_end; ++t) {
      const float* first = y + t * p.k * H;
      std::memcpy(acc, first, H * sizeof(float));
      for (int64_t j = 1; j < p.k; ++j) {
        const float* row = first + j * H;
        for (int64_t col = 0; col < H; ++col) acc[col] += row[col];
      }
      store_rows(acc, H, 1, H, p.x_dtype, dst + t * H * x_size, H);
    }
  });
}

}  // namespace tokamax
