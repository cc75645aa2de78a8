// triangle_multiplication_vjp: the portable reference, the forward's and the gradient's stages
// (base.h) as plain f32 loops over whole arrays, and its implementation.
//
// Dimensions: as base.h; t indexes the 2H columns [left | right] of v.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/rows.h"
#include "ops/triangle_multiplication/vjp/base.h"

namespace tokamax {
namespace {

float sigmoidf(float v) { return 1.0f / (1.0f + std::exp(-v)); }

void store(const std::vector<float>& values, Tensor& t) {
  dispatch_float(t.dtype(), [&](auto type) {
    using T = decltype(type);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<T>()[i] = from_double<T>(values[i]);
  });
}

}  // namespace

void triangle_multiplication_vjp_reference(const TriangleVjpProblem& problem,
                                           const TensorMap& inputs, TensorMap& outputs) {
  const TriangleMultiplicationProblem& p = problem.fwd;
  const int64_t N = p.N, C = p.C, H = p.H, D = p.D, P = p.positions(), H2 = 2 * H;
  const float epsilon = static_cast<float>(p.epsilon);
  const bool* mask = inputs.at("mask").data<bool>();
  const std::vector<float> x = f32_values(inputs.at("x"));
  const std::vector<float> dout = f32_values(inputs.at("dout"));
  const TriangleWeightsF32 w = triangle_weights_f32(p, inputs);

  // The forward: a [P, C], g and pr [P, 2H], q [P, D], v [P, 2H], act [P, H], b [P, H].
  std::vector<float> a(x), g(P * H2), pr(P * H2), q(P * D), v(P * H2), act(P * H, 0.0f);
  std::vector<RowStats> in_stats(P), out_stats(P);
  for (int64_t pos = 0; pos < P; ++pos) {
    float* row = a.data() + pos * C;
    in_stats[pos] = row_stats(row, C, epsilon);
    layer_norm_row(row, C, w.in_scale.data(), w.in_offset.data(), epsilon);
    for (int64_t t = 0; t < H2; ++t) {
      float gs = 0.0f, ps = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        gs += row[c] * w.gate_in[c * H2 + t];
        ps += row[c] * w.projection_in[c * H2 + t];
      }
      g[pos * H2 + t] = gs;
      pr[pos * H2 + t] = ps;
      v[pos * H2 + t] = mask[pos] ? sigmoidf(gs) * ps : 0.0f;
    }
    for (int64_t d = 0; d < D; ++d) {
      float s = 0.0f;
      for (int64_t c = 0; c < C; ++c) s += row[c] * w.gate_out[c * D + d];
      q[pos * D + d] = s;
    }
  }
  // left[i, k] of channel h is v[(i N + k) H2 + h], right's at + H.
  auto left = [&](int64_t r, int64_t c, int64_t h) { return (r * N + c) * H2 + h; };
  auto right = [&](int64_t r, int64_t c, int64_t h) { return (r * N + c) * H2 + H + h; };
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t h = 0; h < H; ++h) {
        float sum = 0.0f;
        for (int64_t k = 0; k < N; ++k) {
          sum += p.outgoing ? v[left(i, k, h)] * v[right(j, k, h)]
                            : v[left(k, j, h)] * v[right(k, i, h)];
        }
        act[(i * N + j) * H + h] = sum;
      }
    }
  }
  std::vector<float> b(act);
  for (int64_t pos = 0; pos < P; ++pos) {
    out_stats[pos] = row_stats(act.data() + pos * H, H, epsilon);
    layer_norm_row(b.data() + pos * H, H, w.out_scale.data(), w.out_offset.data(), epsilon);
  }

  // The output side: do, dq, db, projection_out's gradient, the output norm's.
  std::vector<float> dq(P * D), db(P * H), dact(P * H);
  std::vector<float> dw_out(H * D, 0.0f), dout_scale(H, 0.0f), dout_offset(H, 0.0f);
  std::vector<float> d_o(D);
  for (int64_t pos = 0; pos < P; ++pos) {
    for (int64_t d = 0; d < D; ++d) {
      float o = 0.0f;
      for (int64_t h = 0; h < H; ++h) o += b[pos * H + h] * w.projection_out[h * D + d];
      const float s = sigmoidf(q[pos * D + d]), dy = dout[pos * D + d];
      d_o[d] = dy * s;
      dq[pos * D + d] = dy * o * s * (1.0f - s);
    }
    for (int64_t h = 0; h < H; ++h) {
      float sum = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        sum += d_o[d] * w.projection_out[h * D + d];
        dw_out[h * D + d] += b[pos * H + h] * d_o[d];
      }
      db[pos * H + h] = sum;
    }
    layer_norm_vjp_row(act.data() + pos * H, out_stats[pos], w.out_scale.data(),
                       db.data() + pos * H, H, dact.data() + pos * H, dout_scale.data(),
                       dout_offset.data());
  }

  // The triangle product's gradient: dv [P, 2H] (left then right per position).
  std::vector<float> dv(P * H2, 0.0f);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < N; ++c) {
      for (int64_t h = 0; h < H; ++h) {
        float dl = 0.0f, dr = 0.0f;
        for (int64_t m = 0; m < N; ++m) {
          if (p.outgoing) {  // dL[r, c] = sum_j dact[r, j] R[j, c]; dR[r, c] = sum_i dact[i, r]
                             // L[i, c]
            dl += dact[(r * N + m) * H + h] * v[right(m, c, h)];
            dr += dact[(m * N + r) * H + h] * v[left(m, c, h)];
          } else {  // dL[r, c] = sum_i R[r, i] dact[i, c]; dR[r, c] = sum_j L[r, j] dact[c, j]
            dl += v[right(r, m, h)] * dact[(m * N + c) * H + h];
            dr += v[left(r, m, h)] * dact[(c * N + m) * H + h];
          }
        }
        dv[left(r, c, h)] = dl;
        dv[right(r, c, h)] = dr;
      }
    }
  }

  // The input side: Z = [dg | dpr | dq], the input weights' gradients, da, the input norm's.
  std::vector<float> dw_gate(C * H2, 0.0f), dw_proj(C * H2, 0.0f), dw_gate_out(C * D, 0.0f);
  std::vector<float> dx(P * C), din_scale(C, 0.0f), din_offset(C, 0.0f), da(C), dg(H2), dpr(H2);
  for (int64_t pos = 0; pos < P; ++pos) {
    for (int64_t t = 0; t < H2; ++t) {
      const float s = sigmoidf(g[pos * H2 + t]), d = mask[pos] ? dv[pos * H2 + t] : 0.0f;
      dg[t] = d * pr[pos * H2 + t] * s * (1.0f - s);
      dpr[t] = d * s;
    }
    const float* a_row = a.data() + pos * C;
    const float* dq_row = dq.data() + pos * D;
    for (int64_t c = 0; c < C; ++c) {
      float sum = 0.0f;
      for (int64_t t = 0; t < H2; ++t) {
        sum += dg[t] * w.gate_in[c * H2 + t] + dpr[t] * w.projection_in[c * H2 + t];
        dw_gate[c * H2 + t] += a_row[c] * dg[t];
        dw_proj[c * H2 + t] += a_row[c] * dpr[t];
      }
      for (int64_t d = 0; d < D; ++d) {
        sum += dq_row[d] * w.gate_out[c * D + d];
        dw_gate_out[c * D + d] += a_row[c] * dq_row[d];
      }
      da[c] = sum;
    }
    layer_norm_vjp_row(x.data() + pos * C, in_stats[pos], w.in_scale.data(), da.data(), C,
                       dx.data() + pos * C, din_scale.data(), din_offset.data());
  }

  store(dx, outputs.at("dx"));
  store(dw_proj, outputs.at(vjp_name("projection_in_weights")));
  store(dw_gate, outputs.at(vjp_name("gate_in_weights")));
  store(dw_out, outputs.at(vjp_name("projection_out_weights")));
  store(dw_gate_out, outputs.at(vjp_name("gate_out_weights")));
  store(din_scale, outputs.at(vjp_name("layernorm_in_scale")));
  store(din_offset, outputs.at(vjp_name("layernorm_in_offset")));
  store(dout_scale, outputs.at(vjp_name("layernorm_out_scale")));
  store(dout_offset, outputs.at(vjp_name("layernorm_out_offset")));
}

namespace {

void run_reference(const TriangleVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  triangle_multiplication_vjp_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& triangle_multiplication_vjp_reference_implementation() {
  static const ReferenceImplementation<TriangleVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
