// dot_product_attention_vjp: seeded inputs and the error model of the float64 oracle of every
// gradient (oracle.cc; the reference is in reference.cc).
//
// Dimensions.
//   *B, T, t, H, h, D, d   as base.h; b, hq, r, j as there, i = hq / g, x a column of D,
//                          c a column of d
//   u      the accumulator's unit roundoff (f32; f64 for f64 inputs)
//
// Error model (every quantity in units of u, per row (b, hq, r) of the exact problem).
//  - Logits and P: as the forward's (base_numerics.cc): each visible logit is off by at most
//    Delta (its D-term dot product, scale, bias, cap), so each P_j = exp(s_j - lse) is off by a
//    relative eP = expm1(2 Delta u) / u + 3t + 2R + 32 + |lse| + 4 (the forward's bracket, plus
//    lse's own rounding when it comes as an f32 input; R the row's logit range).
//  - dP_j = dout . v_j, a d-term dot product: off by (d + 1) A_j, A_j = sum_c |dout_c v_jc|.
//  - Dr = rowsum(dout * out) = sum_j P_j dP_j: every term carries P's and dP's error and one of
//    (t + d + 4) roundings in whichever order it is summed (out recomputed, or P . dP):
//    E_D = M_D (eP + t + d + 4), M_D = sum_j P_j A_j (>= |Dr|), plus u_bf16 / u for bf16
//    inputs (out recomputed with P in bf16); when out is an input, rounded to q's dtype, plus
//    (u_out / u) sum_c |dout_c out_c|.
//  - dS_j = P_j (dP_j - Dr) G_j with G_j = 1 - tanh^2 under the cap (else 1, G <= 1): off by
//    E_j = P_j [ (eP + 4 + kCap) |dP_j - Dr| + (d + 1) A_j + E_D ], kCap = Delta / c + 4 for
//    G's error (|dG/dz| <= 1/c, z off by Delta) and its evaluation, 0 without a cap.
//  - Each gradient element is then a sum of n products of dS (or P) with an input, in any
//    order, one rounding per product and the scale's: n' sum |terms| + sum E |input|, with
//    n = t + 2 for dq, g T + 2 for dk (the q heads of a kv head, every row), g T + 1 for dv
//    (whose P terms carry eP), and the count of broadcast positions + 1 for dbias. For bf16
//    inputs, + u_bf16 / u on the dq, dk and dv terms: P and dS may be rounded to bf16 for those
//    products (as the forward's bound allows P in bf16).
// The four outputs sum different numbers of terms, so accumulation_length is 1 and each
// sampled point's magnitude is its bracket (times 1.05 for second-order terms), as the other
// VJP ops do; output_roundoff is the coarser of the q and bias dtypes' (each output rounds
// once), and f16's subnormal spacing an absolute floor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/dot_product_attention/vjp/oracle_rows.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/vjp.h"

namespace tokamax {
namespace {

DType accumulator(const AttentionProblem& p) {
  return p.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace

template <>
TensorMap ProblemOp<AttentionVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (q, k, v, bias ~ N(0, 1), mask ~80% kept), a cotangent ~ N(0, 1), and
  // lse and out, when asked for, exactly as the forward defines them (f64, rounded once to
  // their dtypes).
  const DotProductAttentionOp& fwd = dot_product_attention_op();
  TensorMap inputs = fwd.make_inputs(primal_args(fwd, args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  const bool has_lse = args.has("lse"), has_out = args.has("out");
  if (has_lse || has_out) {
    const AttentionProblem p = with_range_mask(AttentionProblem::from(args), inputs);
    const AttentionMasks masks = load_attention_masks(p, inputs);
    Tensor lse(attention_lse_spec(p));
    Tensor out(dot_product_attention_op()
                   .outputs(primal_args(dot_product_attention_op(), args, cotangents()))[0]
                   .spec);
    VjpRowOptions options;  // P, lse and out only
    options.with_cotangent = false;
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(p.t, 1));
    std::vector<int64_t> rows;
    F64Matrix out_rows;
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < p.H; ++hq) {
        for (int64_t r0 = 0; r0 < p.T; r0 += chunk) {
          rows.clear();
          for (int64_t r = r0; r < std::min(p.T, r0 + chunk); ++r) rows.push_back(r);
          const std::vector<VjpRow> vr =
              attention_vjp_rows(p, inputs, masks, b, hq, rows, options, &out_rows);
          for (size_t n = 0; n < rows.size(); ++n) {
            const int64_t r = rows[n];
            lse.set((b * p.H + hq) * p.T + r, vr[n].lse);
            for (int64_t c = 0; c < p.d; ++c)
              out.set(((b * p.T + r) * p.H + hq) * p.d + c, out_rows.row(n)[c]);
          }
        }
      }
    }
    if (has_lse) inputs.emplace("lse", std::move(lse));
    if (has_out) inputs.emplace("out", std::move(out));
  }
  return inputs;
}

template <>
double ProblemOp<AttentionVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A dq sample costs its row (t (D + d)); dk, dv and dbias samples share whole sweeps, which
  // this ignores.
  const AttentionProblem p = AttentionProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + p.d + 1.0);
}

template <>
ErrorModel ProblemOp<AttentionVjpProblem>::error_model(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term counts are in its magnitude
  model.output_roundoff = unit_roundoff(p.dtype);
  if (p.bias) model.output_roundoff = std::max(model.output_roundoff, unit_roundoff(p.bias->dtype));
  return model;
}

}  // namespace tokamax
