// splash_attention_vjp: seeded inputs, the oracle's cost and the error model (the rows' terms
// are in oracle_rows.cc, the sums in oracle.cc).
//
// Dimensions: as base.h.
#include <algorithm>

#include "ops/framework/random.h"
#include "ops/framework/vjp.h"
#include "ops/splash_attention/api.h"
#include "ops/splash_attention/vjp/oracle_rows.h"

namespace tokamax {

// The forward's inputs, a cotangent dout ~ N(0, 1), and logsumexp and out, when asked for,
// exactly as the forward defines them (f64, rounded once to their dtypes).
template <>
TensorMap ProblemOp<SplashAttentionVjpProblem>::make_inputs(const BoundArgs& args,
                                                            uint64_t seed) const {
  const SplashAttentionOp& fwd = splash_attention_op();
  TensorMap inputs = fwd.make_inputs(primal_args(fwd, args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  const SplashAttentionVjpProblem vp = SplashAttentionVjpProblem::from(args);
  if (!vp.has_lse && !vp.has_out) return inputs;
  const SplashAttentionProblem& p = vp.fwd;
  Tensor lse(TensorSpec{DType::kF32, {p.Hq, p.T}});
  Tensor out(args.tensor("dout"));
  {
    SplashAttentionVjpProblem plain = vp;  // the rows must not read the inputs being made
    plain.has_lse = plain.has_out = false;
    const SplashVjpRows rows(plain, inputs);
    for (int64_t hq = 0; hq < p.Hq; ++hq) {
      for (int64_t r = 0; r < p.T; ++r) {
        const SplashVjpRow row = rows.row(hq, r, /*with_cotangent=*/false);
        lse.set(hq * p.T + r, row.lse);
        for (int64_t c = 0; c < p.d; ++c) out.set((hq * p.T + r) * p.d + c, row.out[c]);
      }
    }
  }
  if (vp.has_lse) inputs.emplace("logsumexp", std::move(lse));
  if (vp.has_out) inputs.emplace("out", std::move(out));
  return inputs;
}

template <>
double ProblemOp<SplashAttentionVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A dq sample costs its row's keys (t (D + d)); dk, dv and dsinks samples share sweeps over
  // every row, which this ignores.
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + p.d + 1.0);
}

// One unit per rounding of the f32 arithmetic, each point's term counts in its magnitude
// (oracle.cc); each output rounds once to its dtype (q's, or the sinks').
template <>
ErrorModel ProblemOp<SplashAttentionVjpProblem>::error_model(const BoundArgs& args) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(DType::kF32);
  model.accumulation_length = 1.0;
  model.output_roundoff = unit_roundoff(p.dtype);
  if (p.has_sinks) {
    model.output_roundoff =
        std::max(model.output_roundoff, unit_roundoff(args.tensor("sinks").dtype));
  }
  return model;
}

}  // namespace tokamax
