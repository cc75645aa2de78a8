// fused_moe on CPU: the fused layer's task loop and combine pass.
#include "ops/fused_moe/cpu_kernel.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_info.h"
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
#include "ops/fused_moe/combine.h"

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

// Tasks of at most this many routes stream the weights (the streaming kernel, kCpuStreamRows
// rows per call) instead of packing them: with so few rows per weight element, packing (a read,
// an f32 write and a reread of every element) costs more than the multiply-adds it speeds up.
constexpr int64_t kStreamTaskRows = 16;

// C[m, N] (row stride ldc) = A[m, K] B[K, N], A's rows contiguous (row stride K) when m <=
// kStreamTaskRows: the streaming kernel over column blocks of B that stay in L2 while every
// group of kCpuStreamRows rows reads them (B comes from memory once); quantized codes (B.scale
// set) for one group of rows are decoded and scaled as they are read. Otherwise the engine's
// tiles (quantized codes dequantized as its panels are packed, once per call): more rows would
// decode each code once per group.
void product(const GemmOperand& a, const GemmOperand& b, int64_t m, int64_t N, int64_t K, float* c,
             int64_t ldc, const CpuGemmOptions& options, int64_t l2_bytes) {
  const int64_t b_size = static_cast<int64_t>(dtype_size(b.dtype));
  if (m <= (b.scale ? kCpuStreamRows : kStreamTaskRows) && a.ld == K) {
    const int64_t a_size = static_cast<int64_t>(dtype_size(a.dtype));
    const int64_t block =
        m <= kCpuStreamRows ? N : std::clamp<int64_t>(l2_bytes / 2 / (K * b_size) / 64 * 64, 64, N);
    bool done = true;
    for (int64_t c0 = 0; c0 < N && done; c0 += block) {
      for (int64_t r0 = 0; r0 < m && done; r0 += kCpuStreamRows) {
        StreamArgs args{};
        args.lhs = static_cast<const char*>(a.data) + r0 * K * a_size;
        args.lhs_dtype = a.dtype;
        args.rows = std::min(kCpuStreamRows, m - r0);
        args.rhs = static_cast<const char*>(b.data) + c0 * b_size;
        args.rhs_dtype = b.dtype;
        args.ldb = b.ld;
        args.K = K;
        args.cols = std::min(block, N - c0);
        args.out = c + r0 * ldc + c0;
        args.ldc = ldc;
        if (b.scale) {
          args.scale = b.scale + c0;
          args.scale_ld = b.scale_ld;
          args.scale_block = b.scale_block;
        }
        done = stream_rows_f32(args);
      }
    }
    if (done) return;
  }
  cpu_gemm_f32(a, b, m, N, K, c, ldc, /*accumulate=*/false, options);
}

}  // namespace

void fused_moe_cpu_kernel(const FusedMoeProblem& p, const CpuFusedMoeConfig& c,
                          const MoeRouting& routing, const Tensor& x, const Tensor& w1,
                          const Tensor& w2, const Tensor* w1_bias, const Tensor* w2_bias,
                          const Tensor* w1_scale, const Tensor* w2_scale, Tensor& out) {
  const int64_t H = p.H, I = p.I, N1 = 2 * I;
  const GemmEngine engine = gemm_engine(c.bf16_path);
  const CpuGemmOptions gemm{.mr = c.mr,
                            .nr_vectors = c.nr / cpu::simd_f32_lanes(),
                            .tk = c.tile_k,
                            .tn = c.panel_n,
                            .engine = engine};
  const std::vector<float> b1 = optional_f32(w1_bias), b2 = optional_f32(w2_bias);
  const std::vector<float> s1 = optional_f32(w1_scale), s2 = optional_f32(w2_scale);
  const int64_t l2 = cpu::host_cpu().tile_l2_bytes();
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

  // Each route's weighted down projection in x's dtype (rounded as a chain of ops would round
  // it, half the bytes of f32 to write and read back).
  const RoutedRows routed(p);

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
    GemmOperand w1e{p.w_dtype, w1s + e * H * N1 * w_size, N1};
    if (p.quantized()) {
      w1e.scale = s1.data() + e * p.w1_blocks * N1;
      w1e.scale_ld = N1;
      w1e.scale_block = H / p.w1_blocks;
    }
    product({p.x_dtype, rows, H}, w1e, m, N1, H, gate, N1, gemm, l2);
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
    GemmOperand w2e{p.w_dtype, w2s + e * I * H * w_size, H};
    if (p.quantized()) {
      w2e.scale = s2.data() + e * p.w2_blocks * H;
      w2e.scale_ld = H;
      w2e.scale_block = I / p.w2_blocks;
    }
    product(hidden, w2e, m, H, I, down, H, gemm, l2);
    const float* db = b2.empty() ? nullptr : b2.data() + e * H;
    for (int64_t i = 0; i < m; ++i) {
      store_route_row(p, routing, routing.sorted[task.first + i], db, down + i * H, routed);
    }
  });

  combine_routes(p, routed, out, c.num_threads);
}

}  // namespace tokamax
