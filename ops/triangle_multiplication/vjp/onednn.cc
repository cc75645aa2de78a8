// triangle_multiplication_vjp: the oneDNN baseline ("onednn"), the backward as a oneDNN user
// writes it: the forward run again saving its stages (a, [g | pr | q], the planes, act, b, o),
// then every product of the gradient as a oneDNN f32 matmul (transposed operands as strides;
// the triangle products batched over H) and our loops for the norms' gradients, the gating and
// the layout changes. f32 matmuls for every input dtype, as the forward's baseline.
//
// Dimensions: as base.h.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/onednn_matmul.h"
#include "ops/triangle_multiplication/rows.h"
#include "ops/triangle_multiplication/vjp/base.h"

namespace tokamax {
namespace {

using Dims = dnnl::memory::dims;
constexpr int64_t kRows = 64;  // positions per task of the loops

class OneDnnTriangleMultiplicationVjp final : public OneDnnImplementation<TriangleVjpProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] =
        "the forward saving its stages, then oneDNN f32 matmuls for every product of the "
        "gradient around tokamax loops for the norms' gradients, the gating and the layouts";
    return description;
  }

  void check(const TriangleVjpProblem&, const Device&) const override {
    const std::string why = cpu::onednn_matmul_unavailable(dnnl::memory::data_type::f32);
    if (!why.empty()) throw NotImplemented("onednn: f32 matmul: " + why);
  }

  void run(const TriangleVjpProblem& problem, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(problem, device);
    const TriangleMultiplicationProblem& p = problem.fwd;
    const int64_t N = p.N, C = p.C, H = p.H, D = p.D, P = p.positions(), W = 4 * H + D;
    const float epsilon = static_cast<float>(p.epsilon);
    TriangleWeightsF32 w = triangle_weights_f32(p, inputs);  // non-const: oneDNN takes float*
    const std::vector<float> x = f32_values(inputs.at("x"));
    const std::vector<float> dout = f32_values(inputs.at("dout"));
    const bool* mask = inputs.at("mask").data<bool>();
    const int64_t tasks = (P + kRows - 1) / kRows;
    auto for_tasks = [&](auto&& fn) {
      cpu::parallel_for(tasks, 0, [&](int64_t task, int) {
        fn(task, task * kRows, std::min(P, (task + 1) * kRows));
      });
    };

    // The forward, saving a [P, C] and its stats, y = [g | pr | q] [P, W], the planes [2][H][P],
    // act [H][P], b [P, H] and its stats, o [P, D].
    std::vector<float> a(x);
    std::vector<RowStats> in_stats(P), out_stats(P);
    for_tasks([&](int64_t, int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        in_stats[q] = row_stats(a.data() + q * C, C, epsilon);
        layer_norm_row(a.data() + q * C, C, w.in_scale.data(), w.in_offset.data(), epsilon);
      }
    });
    std::vector<float> y(static_cast<size_t>(P * W));
    matmul_.run({{P, C}, {C, 1}, {C, W}, {W, 1}, {P, W}, {W, 1}}, a.data(), w.w_in.data(),
                y.data());
    std::vector<float> planes(static_cast<size_t>(2 * H * P));
    for_tasks([&](int64_t, int64_t q0, int64_t q1) {
      std::vector<float> s(static_cast<size_t>(2 * H));
      for (int64_t q = q0; q < q1; ++q) {
        const float* row = y.data() + q * W;
        std::copy_n(row, 2 * H, s.data());
        cpu_activation_row(Activation::kSigmoid, s.data(), 2 * H);
        for (int64_t t = 0; t < 2 * H; ++t) {
          planes[t * P + q] = mask[q] ? s[t] * row[2 * H + t] : 0.0f;
        }
      }
    });
    std::vector<float> act(static_cast<size_t>(H * P));
    float* L = planes.data();
    float* R = planes.data() + H * P;
    const Dims plain = {P, N, 1}, transposed = {P, 1, N}, cube = {H, N, N};
    if (p.outgoing) {
      matmul_.run({cube, plain, cube, transposed, cube, plain}, L, R, act.data());
    } else {
      matmul_.run({cube, transposed, cube, plain, cube, plain}, R, L, act.data());
    }
    std::vector<float> act_rows(static_cast<size_t>(P * H)), b(static_cast<size_t>(P * H));
    for_tasks([&](int64_t, int64_t q0, int64_t q1) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t q = q0; q < q1; ++q) act_rows[q * H + h] = act[h * P + q];
      }
      for (int64_t q = q0; q < q1; ++q) {
        std::copy_n(act_rows.data() + q * H, H, b.data() + q * H);
        out_stats[q] = row_stats(b.data() + q * H, H, epsilon);
        layer_norm_row(b.data() + q * H, H, w.out_scale.data(), w.out_offset.data(), epsilon);
      }
    });
    std::vector<float> o(static_cast<size_t>(P * D));
    matmul_.run({{P, H}, {H, 1}, {H, D}, {D, 1}, {P, D}, {D, 1}}, b.data(), w.projection_out.data(),
                o.data());

    // The output side: do, dq (over o), projection_out's gradient, db, the output norm's.
    std::vector<float> d_o(static_cast<size_t>(P * D));
    for_tasks([&](int64_t, int64_t q0, int64_t q1) {
      std::vector<float> s(static_cast<size_t>(D));
      for (int64_t q = q0; q < q1; ++q) {
        std::copy_n(y.data() + q * W + 4 * H, D, s.data());
        cpu_activation_row(Activation::kSigmoid, s.data(), D);
        for (int64_t d = 0; d < D; ++d) {
          const float dy = dout[q * D + d];
          d_o[q * D + d] = dy * s[d];
          o[q * D + d] = dy * o[q * D + d] * s[d] * (1.0f - s[d]);
        }
      }
    });
    std::vector<float>& dq = o;
    std::vector<float> dw_out(static_cast<size_t>(H * D)), db(static_cast<size_t>(P * H));
    matmul_.run({{H, P}, {1, H}, {P, D}, {D, 1}, {H, D}, {D, 1}}, b.data(), d_o.data(),
                dw_out.data());
    matmul_.run({{P, D}, {D, 1}, {D, H}, {1, D}, {P, H}, {H, 1}}, d_o.data(),
                w.projection_out.data(), db.data());
    std::vector<float> out_partials(static_cast<size_t>(tasks * 2 * H), 0.0f);
    for_tasks([&](int64_t task, int64_t q0, int64_t q1) {
      float* sums = out_partials.data() + task * 2 * H;
      std::vector<float> dact(static_cast<size_t>(H));
      for (int64_t q = q0; q < q1; ++q) {
        layer_norm_vjp_row(act_rows.data() + q * H, out_stats[q], w.out_scale.data(),
                           db.data() + q * H, H, dact.data(), sums, sums + H);
        for (int64_t h = 0; h < H; ++h) act[h * P + q] = dact[h];
      }
    });

    // The triangle products' gradients, batched over H: dv [2][H][P].
    std::vector<float> dv(static_cast<size_t>(2 * H * P));
    float* dL = dv.data();
    float* dR = dv.data() + H * P;
    if (p.outgoing) {  // dL = dact R, dR = dact^T L
      matmul_.run({cube, plain, cube, plain, cube, plain}, act.data(), R, dL);
      matmul_.run({cube, transposed, cube, plain, cube, plain}, act.data(), L, dR);
    } else {  // dL = R dact, dR = L dact^T
      matmul_.run({cube, plain, cube, plain, cube, plain}, R, act.data(), dL);
      matmul_.run({cube, plain, cube, transposed, cube, plain}, L, act.data(), dR);
    }

    // The input side: Z = [dg | dpr | dq] over y, the input weights' gradient, da, dx.
    for_tasks([&](int64_t, int64_t q0, int64_t q1) {
      std::vector<float> s(static_cast<size_t>(2 * H));
      for (int64_t q = q0; q < q1; ++q) {
        float* row = y.data() + q * W;
        std::copy_n(row, 2 * H, s.data());
        cpu_activation_row(Activation::kSigmoid, s.data(), 2 * H);
        for (int64_t t = 0; t < 2 * H; ++t) {
          const float d = mask[q] ? dv[t * P + q] : 0.0f;
          row[t] = d * row[2 * H + t] * s[t] * (1.0f - s[t]);
          row[2 * H + t] = d * s[t];
        }
        std::copy_n(dq.data() + q * D, D, row + 4 * H);
      }
    });
    std::vector<float>& z = y;
    std::vector<float> dw_in(static_cast<size_t>(C * W)), da(static_cast<size_t>(P * C));
    matmul_.run({{C, P}, {1, C}, {P, W}, {W, 1}, {C, W}, {W, 1}}, a.data(), z.data(), dw_in.data());
    matmul_.run({{P, W}, {W, 1}, {W, C}, {1, W}, {P, C}, {C, 1}}, z.data(), w.w_in.data(),
                da.data());
    std::vector<float> in_partials(static_cast<size_t>(tasks * 2 * C), 0.0f);
    char* dx = static_cast<char*>(outputs.at("dx").raw());
    const size_t x_size = dtype_size(p.x_dtype);
    for_tasks([&](int64_t task, int64_t q0, int64_t q1) {
      float* sums = in_partials.data() + task * 2 * C;
      for (int64_t q = q0; q < q1; ++q) {
        layer_norm_vjp_row(x.data() + q * C, in_stats[q], w.in_scale.data(), da.data() + q * C, C,
                           a.data() + q * C, sums, sums + C);
      }
      store_rows(a.data() + q0 * C, C, q1 - q0, C, p.x_dtype, dx + q0 * C * x_size, C);
    });

    // The norms' sums over the tasks, in order; every gradient rounded once.
    std::vector<float> out_norms(static_cast<size_t>(2 * H), 0.0f);
    std::vector<float> in_norms(static_cast<size_t>(2 * C), 0.0f);
    for (int64_t task = 0; task < tasks; ++task) {
      for (int64_t i = 0; i < 2 * H; ++i) out_norms[i] += out_partials[task * 2 * H + i];
      for (int64_t i = 0; i < 2 * C; ++i) in_norms[i] += in_partials[task * 2 * C + i];
    }
    store_triangle_weight_grads(p,
                                {dw_in.data(), dw_out.data(), in_norms.data(), in_norms.data() + C,
                                 out_norms.data(), out_norms.data() + H},
                                outputs);
  }

 private:
  TriangleMatmuls matmul_;
};

}  // namespace

const Implementation& triangle_multiplication_vjp_onednn_implementation() {
  static const OneDnnTriangleMultiplicationVjp impl;
  return impl;
}

}  // namespace tokamax
