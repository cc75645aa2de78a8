// ragged_dot: the float64 oracle of `out`: each sampled point's K-term products (blocked or the
// plain loop), then the epilogue and the error bound's magnitude.
//
// Dimensions: as base.h (G, M, K, N, out_N); S sampled points.
#include "ops/ragged_dot/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common/f64_matrix.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/quantize.h"

namespace tokamax {
namespace {

// Rows of lhs converted to f64 at once: bounds the copy at 32 Mi doubles (256 MiB).
constexpr int64_t kChunkElements = int64_t{1} << 25;

// Each point's products: y (the gate with fuse_gateup_activation) and up (the second half of
// rhs's columns), each with its magnitude; with maybe_quantize_lhs the magnitudes hold the
// quantization term too. Bias and epilogue come after.
struct Products {
  std::vector<double> y, My, up, Mp;
  explicit Products(size_t S) : y(S), My(S), up(S), Mp(S) {}
};

// The oracle's definition: one K-term sum per product, the dequantized weights times the
// unquantized lhs; with maybe_quantize_lhs the quantization error of lhs (at most s_b / 2 per
// element) joins the magnitude, scaled so that the bound's gamma gives it back.
void loop_products(const RaggedDotProblem& p, const TensorMap& inputs,
                   std::span<const int64_t> index, double gamma, Products& out) {
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& rhs = inputs.find("rhs")->second;
  const Tensor* scale = p.quantized() ? &inputs.find("rhs_scale")->second : nullptr;
  const int64_t out_N = p.out_N(), bk = p.block_k();
  std::vector<float> lhs_row(static_cast<size_t>(p.K)),
      lhs_scales(static_cast<size_t>(p.scale_blocks));
  std::vector<float> values(static_cast<size_t>(p.K));
  int64_t scaled_row = -1;
  auto column = [&](int64_t row, int64_t g, int64_t col, double& magnitude) {
    if (p.quantize_lhs && scaled_row != row) {
      for (int64_t k = 0; k < p.K; ++k) lhs_row[k] = static_cast<float>(lhs.get(row * p.K + k));
      quantize_row_values(p.rhs_dtype, lhs_row.data(), p.K, bk, values.data(), lhs_scales.data());
      scaled_row = row;
    }
    double value = 0.0, quantization = 0.0;
    magnitude = 0.0;
    for (int64_t k = 0; k < p.K; ++k) {
      double w = rhs.get((g * p.K + k) * p.N + col);
      if (scale != nullptr) w *= scale->get((g * p.scale_blocks + k / bk) * p.N + col);
      const double term = lhs.get(row * p.K + k) * w;
      value += term;
      magnitude += std::fabs(term);
      if (p.quantize_lhs) {
        quantization +=
            quantization_error(p.rhs_dtype, lhs_row[k], lhs_scales[k / bk]) * std::fabs(w);
      }
    }
    if (p.quantize_lhs) magnitude += quantization / gamma;
    return value;
  };
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / out_N, col = index[s] % out_N;
    if (!p.owns(row)) continue;
    const int64_t g = p.group_of(row);
    out.y[s] = column(row, g, col, out.My[s]);
    if (p.gate_up != GateUp::kNone) out.up[s] = column(row, g, col + out_N, out.Mp[s]);
  }
}

// The same sums by f64_dot_rows, group by group: the group's weights W_g^T [N, K] in f64
// (dequantized) against its sampled lhs rows, in chunks of rows.
void blocked_products(const RaggedDotProblem& p, const TensorMap& inputs,
                      std::span<const int64_t> index, double gamma, Products& out) {
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& rhs = inputs.find("rhs")->second;
  const Tensor* scale = p.quantized() ? &inputs.find("rhs_scale")->second : nullptr;
  const int64_t K = p.K, N = p.N, out_N = p.out_N(), bk = p.block_k();
  const bool gated = p.gate_up != GateUp::kNone;
  std::vector<std::vector<size_t>> by_group(static_cast<size_t>(p.G));
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / out_N;
    if (p.owns(row)) by_group[p.group_of(row)].push_back(s);
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(K, 1));
  for (int64_t g = 0; g < p.G; ++g) {
    std::vector<size_t>& samples = by_group[g];
    if (samples.empty()) continue;
    std::stable_sort(samples.begin(), samples.end(),
                     [&](size_t x, size_t y) { return index[x] / out_N < index[y] / out_N; });
    // W_g^T: element (n, k) is rhs[g, k, n].
    F64Matrix w = to_f64(rhs, {g * K * N, 1, N}, N, K);
    if (scale != nullptr) {
      const F64Matrix s = to_f64(*scale, {g * p.scale_blocks * N, 1, N}, N, p.scale_blocks);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) w.row(n)[k] *= s.row(n)[k / bk];
      }
    }
    const F64Matrix w_abs = p.quantize_lhs ? abs_of(w) : F64Matrix{};
    for (size_t begin = 0; begin < samples.size();) {
      // The next chunk_rows distinct rows and their samples.
      std::vector<int64_t> rows;
      std::vector<DotPoint> points;
      std::vector<size_t> point_sample;
      size_t end = begin;
      for (; end < samples.size(); ++end) {
        const int64_t row = index[samples[end]] / out_N;
        if (rows.empty() || rows.back() != row) {
          if (static_cast<int64_t>(rows.size()) == chunk_rows) break;
          rows.push_back(row);
        }
        const int64_t local = static_cast<int64_t>(rows.size()) - 1,
                      col = index[samples[end]] % out_N;
        points.push_back({local, col});
        if (gated) points.push_back({local, col + out_N});
      }
      const F64Matrix x = to_f64(lhs, {0, K, 1}, 0, K, rows);
      std::vector<double> value(points.size()), magnitude(points.size());
      f64_dot_rows(x.rows_view(), w.rows_view(), points, value, magnitude);
      if (p.quantize_lhs) {
        // Each row's quantization error bound per element, as the plain loop takes it.
        F64Matrix q;
        q.rows = x.rows;
        q.cols = K;
        q.data.resize(x.data.size());
        std::vector<float> row_f32(static_cast<size_t>(K)), values(static_cast<size_t>(K));
        std::vector<float> scales(static_cast<size_t>(p.scale_blocks));
        for (int64_t r = 0; r < x.rows; ++r) {
          for (int64_t k = 0; k < K; ++k) row_f32[k] = static_cast<float>(x.row(r)[k]);
          quantize_row_values(p.rhs_dtype, row_f32.data(), K, bk, values.data(), scales.data());
          for (int64_t k = 0; k < K; ++k) {
            q.row(r)[k] = quantization_error(p.rhs_dtype, row_f32[k], scales[k / bk]);
          }
        }
        std::vector<double> quantization(points.size());
        f64_dot_rows(q.rows_view(), w_abs.rows_view(), points, quantization, {});
        for (size_t i = 0; i < points.size(); ++i) magnitude[i] += quantization[i] / gamma;
      }
      const size_t per_sample = gated ? 2 : 1;
      for (size_t i = 0; i < end - begin; ++i) {
        const size_t s = samples[begin + i];
        out.y[s] = value[i * per_sample];
        out.My[s] = magnitude[i * per_sample];
        if (gated) {
          out.up[s] = value[i * per_sample + 1];
          out.Mp[s] = magnitude[i * per_sample + 1];
        }
      }
      begin = end;
    }
  }
}

}  // namespace

// The error bound with an epilogue. The product y^ of each column is a K-term contraction
// plus the bias, in the accumulator (u = its unit roundoff, gamma = n u / (1 - n u), n = K + 2:
// the +2 covers rounding inputs and the bias addition): |y^ - y| <= gamma My, with
// My = sum |terms| + |bias|. Then
//   activation: out = act(y): |act~(y^) - act(y)| <= L gamma My + c u (|y| + |act(y)|)
//     (L = activation_lipschitz, c = kActivationEvalUlps), so magnitude = L My + c (|y| + |a|) / n;
//   fuse_gateup_activation: out = a p with a = act(gate), p = up (the clamped forms: a =
//     h(min(g, limit)), h(x) = x sigmoid(alpha x), whose slope is silu's, and p = clamp(up,
//     -limit, limit) + offset, one more rounding of u |p|; situ: a = beta tanh(g / beta)
//     sigmoid(g), Lipschitz kSituLipschitz, p soft-capped to lb tanh(up / lb), Lipschitz 1 and
//     six roundings of |p|); as gated_linear_unit's bound
//     (ops/gated_linear_unit/oracle.cc) with Mg, Mp the gate's and up's My.
// A 1% margin covers the second-order terms, and f16's subnormal spacing is an absolute floor.
OracleSample ragged_dot_oracle(const BoundArgs& args, const TensorMap& inputs,
                               std::span<const int64_t> index, OracleMethod method) {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  if (p.dims != RaggedDims::kDefault) return ragged_dot_general_oracle(p, inputs, index);
  const Tensor* bias = p.has_bias ? &inputs.find("rhs_bias")->second : nullptr;
  const int64_t out_N = p.out_N();
  const ErrorModel model = ragged_dot_op().error_model(args);
  const double n = model.accumulation_length;
  const double n_u = n * model.accumulation_roundoff;
  const double gamma = term_gamma(model);  // the operands' rounding included
  const double floor_term =
      p.has_epilogue() || p.quantized() ? subnormal_floor(p.out_dtype) / n_u : 0.0;
  Products products(index.size());
  if (method == OracleMethod::kLoop) {
    loop_products(p, inputs, index, gamma, products);
  } else {
    blocked_products(p, inputs, index, gamma, products);
  }
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / out_N, col = index[s] % out_N;
    if (!p.owns(row)) continue;  // outside the owned groups' rows: exactly zero
    const int64_t g = p.group_of(row);
    double y = products.y[s], My = products.My[s];
    double up = products.up[s], Mp = products.Mp[s];
    if (bias != nullptr) {
      const double b = bias->get(g * p.N + col);
      y += b;
      My += std::fabs(b);
      if (p.gate_up != GateUp::kNone) {
        const double b_up = bias->get(g * p.N + col + out_N);
        up += b_up;
        Mp += std::fabs(b_up);
      }
    }
    if (p.gate_up != GateUp::kNone) {
      double gate = y, extra = 0.0, L = activation_lipschitz(gate_activation(p.gate_up));
      const ClampedGlu* form = clamped_form(p.gate_up);
      if (form != nullptr) {
        gate = std::min(y, form->limit);
        up = std::clamp(up, -form->limit, form->limit) + form->up_offset;
        extra = std::fabs(up) / n;  // the rounding of up + offset
      } else if (p.gate_up == GateUp::kSitu) {
        L = kSituLipschitz;
        if (p.situ.linear_beta > 0.0) {
          // Soft-capped: as slopes go, no larger (Lipschitz 1); its evaluation (tanh within 4
          // ulps, a division and a product) is 6 more roundings of |up'|.
          up = p.situ.linear_beta * std::tanh(up / p.situ.linear_beta);
          extra = 6.0 * std::fabs(up) / n;
        }
      }
      // The gate's factor alone (up, transformed above, is the other).
      const double a = form != nullptr ? gate * sigmoid(form->alpha * gate)
                       : p.gate_up == GateUp::kSitu
                           ? situ_glu(SituGlu{p.situ.beta, 0.0}, gate, 1.0)
                           : apply_gate_up<double>(p.gate_up, p.situ, gate, 1.0);
      // The roundings of up's transform (extra, in units of u) count as that much more Mp. situ's
      // gate factor, |a| <= |g|, is evaluated within kActivationEvalUlps of |g| + |a| as the
      // other activations (tanh 4 ulps, sigmoid, three products).
      sample.value[s] = a * up;
      sample.magnitude[s] =
          gated_product_magnitude(gate, a, up, My, Mp + extra * n, L, gamma, n) + floor_term;
    } else if (p.activation != Activation::kNone) {
      const double a = apply_activation<double>(p.activation, y);
      const double L = activation_lipschitz(p.activation);
      sample.value[s] = a;
      sample.magnitude[s] =
          1.01 * (L * My + kActivationEvalUlps * (std::fabs(y) + std::fabs(a)) / n) + floor_term;
    } else {
      sample.value[s] = y;
      sample.magnitude[s] = My + floor_term;
    }
  }
  return sample;
}

template <>
OracleSample ProblemOp<RaggedDotProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                 std::string_view output,
                                                 std::span<const int64_t> index) const {
  if (output != "out")
    throw InvalidArgument("ragged_dot has no output '" + std::string(output) + "'");
  return ragged_dot_oracle(args, inputs, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
