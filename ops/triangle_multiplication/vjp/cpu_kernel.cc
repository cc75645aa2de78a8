// triangle_multiplication_vjp on CPU: the gradient phases (cpu_kernel.h).
#include "ops/triangle_multiplication/vjp/cpu_kernel.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/cpu_kernel.h"
#include "ops/triangle_multiplication/rows.h"

namespace tokamax {
namespace {

// Enough slots for every core of a large machine to draw several, few enough that their
// partial sums stay a few MiB.
constexpr int64_t kSlots = 64;

// One slot's partial sums: [gate_in | projection_in | gate_out] [C, W], projection_out [H, D],
// the two norms' scales and offsets.
struct Partials {
  std::vector<float> w_in, w_out, in_scale, in_offset, out_scale, out_offset;
  Partials(const TriangleMultiplicationProblem& p)
      : w_in(static_cast<size_t>(p.C * (4 * p.H + p.D)), 0.0f),
        w_out(static_cast<size_t>(p.H * p.D), 0.0f),
        in_scale(static_cast<size_t>(p.C), 0.0f),
        in_offset(static_cast<size_t>(p.C), 0.0f),
        out_scale(static_cast<size_t>(p.H), 0.0f),
        out_offset(static_cast<size_t>(p.H), 0.0f) {}
  void add(const Partials& o) {
    for (auto [mine, theirs] :
         {std::pair{&w_in, &o.w_in}, std::pair{&w_out, &o.w_out}, std::pair{&in_scale, &o.in_scale},
          std::pair{&in_offset, &o.in_offset}, std::pair{&out_scale, &o.out_scale},
          std::pair{&out_offset, &o.out_offset}}) {
      for (size_t i = 0; i < mine->size(); ++i) (*mine)[i] += (*theirs)[i];
    }
  }
};

// Runs fn(task, slot) for every task, the tasks of one slot in order on one thread.
template <typename Fn>
void for_each_slot(int64_t tasks, int64_t slots, int num_threads, const Fn& fn) {
  cpu::parallel_for(slots, num_threads, [&](int64_t slot, int) {
    for (int64_t task = slot * tasks / slots; task < (slot + 1) * tasks / slots; ++task) {
      fn(task, slot);
    }
  });
}

// `count` elements of `dtype` at src widened to f32.
void widen(DType dtype, const void* src, int64_t count, float* dst) {
  dispatch_float(dtype, [&](auto type) {
    using T = decltype(type);
    const T* s = static_cast<const T*>(src);
    for (int64_t i = 0; i < count; ++i) dst[i] = to_float(s[i]);
  });
}

}  // namespace

void triangle_multiplication_vjp_cpu_kernel(const TriangleVjpProblem& problem,
                                            const CpuTriangleConfig& c, const TensorMap& inputs,
                                            TensorMap& outputs) {
  const TriangleMultiplicationProblem& p = problem.fwd;
  const int64_t N = p.N, C = p.C, H = p.H, D = p.D, P = p.positions(), W = 4 * H + D;
  const CpuGemmOptions gemm = triangle_gemm_options(c);
  const float epsilon = static_cast<float>(p.epsilon);
  const TriangleWeightsF32 w = triangle_weights_f32(p, inputs);
  // Each weight packed once for every task, in the four ways the products read them.
  GemmPackStorage in_storage, in4_storage, in_t_storage, out_storage, out_t_storage;
  const PackedGemmOperand in_packed =
      pack_gemm_rhs({DType::kF32, w.w_in.data(), W}, C, W, gemm, in_storage);
  const PackedGemmOperand in4_packed =  // [gate_in | projection_in]: phase 5's g and pr
      pack_gemm_rhs({DType::kF32, w.w_in.data(), W}, C, 4 * H, gemm, in4_storage);
  const PackedGemmOperand in_t_packed =
      pack_gemm_rhs({DType::kF32, w.w_in.data(), W, /*transposed=*/true}, W, C, gemm, in_t_storage);
  const PackedGemmOperand out_packed =
      pack_gemm_rhs({DType::kF32, w.projection_out.data(), D}, H, D, gemm, out_storage);
  const PackedGemmOperand out_t_packed = pack_gemm_rhs(
      {DType::kF32, w.projection_out.data(), D, /*transposed=*/true}, D, H, gemm, out_t_storage);

  TriangleCpuBuffers buffers = triangle_cpu_buffers(p);
  triangle_cpu_project(p, c, inputs, w, in_packed, buffers);
  triangle_cpu_product(p, c, buffers);

  const int64_t tm = std::max<int64_t>(c.tile_m, 1), tasks = ceil_div(P, tm);
  const int64_t slots = std::min(tasks, kSlots);
  std::vector<Partials> partials(static_cast<size_t>(slots), Partials(p));
  float* act = buffers.act.get();
  float* gates = buffers.gates.get();
  const DType x_dtype = p.x_dtype;
  const int64_t x_size = static_cast<int64_t>(dtype_size(x_dtype));
  const char* dout = static_cast<const char*>(inputs.at("dout").raw());

  // Phase 3: the output side; dq over the gates, dact over act.
  for_each_slot(tasks, slots, c.num_threads, [&](int64_t task, int64_t slot) {
    thread_local cpu::ScratchBuffer act_buffer, b_buffer, o_buffer, do_buffer, db_buffer, dy_buffer;
    const int64_t q0 = task * tm, rows = std::min(tm, P - q0);
    float* act_rows = act_buffer.floats(static_cast<size_t>(rows * H));
    float* b = b_buffer.floats(static_cast<size_t>(rows * H));
    float* o = o_buffer.floats(static_cast<size_t>(rows * D));
    float* d_o = do_buffer.floats(static_cast<size_t>(rows * D));
    float* db = db_buffer.floats(static_cast<size_t>(rows * H));
    float* dy = dy_buffer.floats(static_cast<size_t>(rows * D));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < rows; ++r) act_rows[r * H + h] = act[h * P + q0 + r];
    }
    std::vector<RowStats> stats(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      stats[r] = row_stats(act_rows + r * H, H, epsilon);
      for (int64_t h = 0; h < H; ++h) {
        b[r * H + h] = (act_rows[r * H + h] - stats[r].mean) * stats[r].rstd * w.out_scale[h] +
                       w.out_offset[h];
      }
    }
    cpu_gemm_f32({DType::kF32, b, H}, out_packed, rows, o, D, /*accumulate=*/false, gemm);
    widen(x_dtype, dout + q0 * D * x_size, rows * D, dy);
    for (int64_t e = 0; e < rows * D; ++e) {
      float& gate = gates[q0 * D + e];  // sigmoid(q), then dq
      const float s = gate;
      d_o[e] = dy[e] * s;
      gate = dy[e] * o[e] * s * (1.0f - s);
    }
    cpu_gemm_f32({DType::kF32, d_o, D}, out_t_packed, rows, db, H, /*accumulate=*/false, gemm);
    Partials& sums = partials[slot];
    cpu_gemm_f32({DType::kF32, b, H, /*transposed=*/true}, {DType::kF32, d_o, D}, H, D, rows,
                 sums.w_out.data(), D, /*accumulate=*/true, gemm);
    for (int64_t r = 0; r < rows; ++r) {
      // dact over b's row (b is not read again).
      layer_norm_vjp_row(act_rows + r * H, stats[r], w.out_scale.data(), db + r * H, H, b + r * H,
                         sums.out_scale.data(), sums.out_offset.data());
    }
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < rows; ++r) act[h * P + q0 + r] = b[r * H + h];
    }
  });

  // Phase 4: dL_h and dR_h over channel h's planes.
  const DType plane_dtype = buffers.plane_dtype;
  cpu::parallel_for(H, c.num_threads, [&](int64_t h, int) {
    thread_local cpu::ScratchBuffer dl_buffer, dr_buffer;
    float* dl = dl_buffer.floats(static_cast<size_t>(N * N));
    float* dr = dr_buffer.floats(static_cast<size_t>(N * N));
    char* L = buffers.plane(p, h);
    char* R = buffers.plane(p, H + h);
    const float* dact = act + h * P;
    if (p.outgoing) {  // dL = dact R, dR = dact^T L
      cpu_gemm_f32({DType::kF32, dact, N}, {plane_dtype, R, N}, N, N, N, dl, N, false, gemm);
      cpu_gemm_f32({DType::kF32, dact, N, /*transposed=*/true}, {plane_dtype, L, N}, N, N, N, dr, N,
                   false, gemm);
    } else {  // dL = R dact, dR = L dact^T
      cpu_gemm_f32({plane_dtype, R, N}, {DType::kF32, dact, N}, N, N, N, dl, N, false, gemm);
      cpu_gemm_f32({plane_dtype, L, N}, {DType::kF32, dact, N, /*transposed=*/true}, N, N, N, dr, N,
                   false, gemm);
    }
    store_rows(dl, N, N, N, plane_dtype, L, N);
    store_rows(dr, N, N, N, plane_dtype, R, N);
  });

  // Phase 5: the input side.
  const bool* mask = inputs.at("mask").data<bool>();
  const int64_t plane_size = static_cast<int64_t>(dtype_size(plane_dtype));
  char* dx = static_cast<char*>(outputs.at("dx").raw());
  for_each_slot(tasks, slots, c.num_threads, [&](int64_t task, int64_t slot) {
    thread_local cpu::ScratchBuffer x_buffer, a_buffer, y_buffer, z_buffer, da_buffer, dv_buffer;
    const int64_t q0 = task * tm, rows = std::min(tm, P - q0);
    float* xw = x_buffer.floats(static_cast<size_t>(rows * C));
    float* a = a_buffer.floats(static_cast<size_t>(rows * C));
    float* y = y_buffer.floats(static_cast<size_t>(rows * 4 * H));
    float* z = z_buffer.floats(static_cast<size_t>(rows * W));
    float* da = da_buffer.floats(static_cast<size_t>(rows * C));
    float* dv = dv_buffer.floats(static_cast<size_t>(rows));
    triangle_widen_x(p, inputs.at("x"), q0, rows, xw);
    std::vector<RowStats> stats(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      stats[r] = row_stats(xw + r * C, C, epsilon);
      for (int64_t ch = 0; ch < C; ++ch) {
        a[r * C + ch] =
            (xw[r * C + ch] - stats[r].mean) * stats[r].rstd * w.in_scale[ch] + w.in_offset[ch];
      }
    }
    cpu_gemm_f32({DType::kF32, a, C}, in4_packed, rows, y, 4 * H, /*accumulate=*/false, gemm);
    // y = [g | pr] -> Z = [dg | dpr | dq]: dg = dv mask pr s (1 - s), dpr = dv mask s.
    for (int64_t t = 0; t < 2 * H; ++t) {
      widen(plane_dtype, buffers.plane(p, t) + q0 * plane_size, rows, dv);
      for (int64_t r = 0; r < rows; ++r) z[r * W + t] = mask[q0 + r] ? dv[r] : 0.0f;
    }
    for (int64_t r = 0; r < rows; ++r) {
      float* zr = z + r * W;
      float* yr = y + r * 4 * H;
      cpu_activation_row(Activation::kSigmoid, yr, 2 * H);
      for (int64_t t = 0; t < 2 * H; ++t) {
        const float s = yr[t], d = zr[t];
        zr[t] = d * yr[2 * H + t] * s * (1.0f - s);
        zr[2 * H + t] = d * s;
      }
      std::copy_n(gates + (q0 + r) * D, D, zr + 4 * H);
    }
    cpu_gemm_f32({DType::kF32, z, W}, in_t_packed, rows, da, C, /*accumulate=*/false, gemm);
    Partials& sums = partials[slot];
    cpu_gemm_f32({DType::kF32, a, C, /*transposed=*/true}, {DType::kF32, z, W}, C, W, rows,
                 sums.w_in.data(), W, /*accumulate=*/true, gemm);
    for (int64_t r = 0; r < rows; ++r) {
      // dx over a's row (a is not read again).
      layer_norm_vjp_row(xw + r * C, stats[r], w.in_scale.data(), da + r * C, C, a + r * C,
                         sums.in_scale.data(), sums.in_offset.data());
    }
    store_rows(a, C, rows, C, x_dtype, dx + q0 * C * x_size, C);
  });

  // The slots added in order; each gradient rounded once to its input's dtype.
  for (size_t s = 1; s < partials.size(); ++s) partials[0].add(partials[s]);
  const Partials& total = partials[0];
  store_triangle_weight_grads(
      p,
      {total.w_in.data(), total.w_out.data(), total.in_scale.data(), total.in_offset.data(),
       total.out_scale.data(), total.out_offset.data()},
      outputs);
}

}  // namespace tokamax
