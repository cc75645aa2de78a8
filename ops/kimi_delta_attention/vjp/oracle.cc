// kimi_delta_attention_vjp: the float64 oracle: the backward sweep in double for every (head,
// batch row) a sample needs (sweep.h), with its bound on what an f32 implementation may be off.
//
// Dimensions: as base.h.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/kimi_delta_attention/vjp/base.h"
#include "ops/kimi_delta_attention/vjp/sweep.h"

namespace tokamax {

template <>
OracleSample ProblemOp<KdaVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                              std::string_view output,
                                              std::span<const int64_t> index) const {
  const KdaVjpProblem vp = KdaVjpProblem::from(args);
  const KdaProblem& p = vp.fwd;
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const std::string name(output);
  const bool known = name == "dquery" || name == "dkey" || name == "dvalue" || name == "dgate" ||
                     name == "dbeta" || (name == "da_log" && inputs.contains("a_log")) ||
                     (name == "ddelta_time_bias" && inputs.contains("delta_time_bias")) ||
                     (name == "dinitial_state" && p.has_initial_state);
  if (!known) {
    throw InvalidArgument("kimi_delta_attention_vjp has no output '" + name + "'");
  }
  // The (h, b) tasks each sample needs: one for the per-token gradients and dinitial_state,
  // every batch row of its head for da_log and ddelta_time_bias (summed over them).
  auto tasks_of = [&](int64_t e) -> std::vector<int64_t> {
    int64_t h = 0;
    if (name == "dquery" || name == "dkey" || name == "dgate") return {e / (T * K)};
    if (name == "dvalue") return {e / (T * V)};
    if (name == "dbeta") return {e / T};
    if (name == "dinitial_state") return {(e / KV % H) * B + e / (N * H * KV)};
    h = name == "da_log" ? e : e / K;
    std::vector<int64_t> all;
    for (int64_t b = 0; b < B; ++b) all.push_back(h * B + b);
    return all;
  };
  std::set<int64_t> needed;
  for (const int64_t e : index) {
    for (const int64_t hb : tasks_of(e)) needed.insert(hb);
  }
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  std::vector<double> bound(index.size(), 0.0);
  for (const int64_t hb : needed) {
    KdaVjpGrads<double, true> g;
    kda_vjp_sweep<double, true>(vp, inputs, hb / B, hb % B, g);
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t e = index[s];
      const std::vector<int64_t> tasks = tasks_of(e);
      if (std::find(tasks.begin(), tasks.end(), hb) == tasks.end()) continue;
      double value = 0.0, err = 0.0;
      if (name == "dquery" || name == "dkey" || name == "dgate") {
        const int64_t local = e % (T * K);
        const std::vector<double>& v = name == "dquery" ? g.dq : name == "dkey" ? g.dk : g.dgate;
        const std::vector<double>& ev = name == "dquery" ? g.eq : name == "dkey" ? g.ek : g.egate;
        value = v[local];
        err = ev[local];
      } else if (name == "dvalue") {
        value = g.dv[e % (T * V)];
        err = g.ev[e % (T * V)];
      } else if (name == "dbeta") {
        value = g.dbeta[e % T];
        err = g.ebeta[e % T];
      } else if (name == "dinitial_state") {
        const int64_t local = e / (H * KV) % N * KV + e % KV;
        value = g.dinit[local];
        err = g.einit[local];
      } else if (name == "da_log") {
        value = g.da_log;
        err = g.ea_log;
      } else {
        value = g.ddtb[e % K];
        err = g.edtb[e % K];
      }
      sample.value[s] += value;
      bound[s] += err;
    }
  }
  // Each bound 1.5 times over (second-order terms), in units of u, plus the output dtype's
  // subnormal spacing.
  const double u = unit_roundoff(DType::kF32);
  DType dtype = DType::kF32;
  for (const TensorDecl& decl : outputs(args)) {
    if (decl.name == name) dtype = decl.spec.dtype;
  }
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    sample.magnitude[s] = 1.5 * bound[s] / u + subnormal_floor(dtype) / u;
  }
  return sample;
}

}  // namespace tokamax
