// splash_attention_vjp: the rows of the exact backward (P, dS and their error terms) that the
// float64 oracle and the generated logsumexp / out inputs read.
//
// Dimensions: as base.h.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/framework/tensor.h"
#include "ops/splash_attention/mask.h"
#include "ops/splash_attention/vjp/base.h"

namespace tokamax {

// One row (hq, r) of the exact backward; errors in units of u (the f32 roundoff).
struct SplashVjpRow {
  double lse = 0.0;           // the forward's logsumexp
  std::vector<double> out;    // [d] the forward's output row
  double eP = 0.0;            // relative error of each P_j
  std::vector<int64_t> keys;  // the keys with P_j != 0, ascending
  std::vector<double> p;      // P_j per entry of keys
  std::vector<double> ds;     // dS_j per entry of keys
  std::vector<double> es;     // the bound on dS_j's error per entry of keys
  double delta = 0.0;         // Di = sum_j P_j dP_j = out . dout (exactly)
  double e_delta = 0.0;       // the bound on Di's error as a kernel computes it
  double od = 0.0;            // out . dout (dsinks' factor; Di on a row that sees a key)
  double e_od = 0.0;          // the bound on its error as a kernel computes it
};

class SplashVjpRows {
 public:
  SplashVjpRows(const SplashAttentionVjpProblem& p, const TensorMap& inputs);
  // with_cotangent false: lse and out only.
  SplashVjpRow row(int64_t hq, int64_t r, bool with_cotangent = true) const;
  const SplashMask& mask() const { return mask_; }

 private:
  const SplashAttentionVjpProblem& vp_;
  const TensorMap& inputs_;
  SplashMask mask_;
  std::vector<double> q_, k_, v_, dout_;
};

}  // namespace tokamax
