// The delta rule's passes over one recurrent state (kimi_delta_attention, gated_delta_rule):
// per token, S = diag(d) S with the prediction k^T S, then S += (beta k) r^T with the output
// q^T S, vectorized on the dispatched SIMD target.
//
// Dimensions.
//   K      key (state row) dimension;  V  value (state column) dimension
#pragma once

#include <cstdint>

#include "ops/framework/dtype.h"

namespace tokamax {

// y_r = scale x_r / sqrt(|x_r|^2 + 1e-6) for `rows` rows of n elements (upstream's
// use_qk_l2norm / l2_normalize_ref in f32; q's scale folded in): tokens' q and k before their
// passes. Vectorized; in place when y = x.
void delta_rule_l2_normalize(const float* x, int64_t ldx, int64_t rows, int64_t n, float scale,
                             // Outputs.
                             float* y, int64_t ldy);

// sum_i a_i b_i over n elements, vectorized (in f32, in the target's order).
float delta_rule_dot(const float* a, const float* b, int64_t n);

// The two passes over a state [K, V] (row stride V):
//   decay: S_i *= d_i for every row i, pred = sum_i k_i S_i ([V]);
//   update: S_i += bk_i r for every row i, out = sum_i q_i S_i ([V]).
void delta_rule_decay_predict(float* S,                        // [K, V], updated in place
                                                               // Inputs.
                              const float* d, const float* k,  // [K] each
                              int64_t K, int64_t V,
                              // Outputs.
                              float* pred,             // [V]
                              float* copy = nullptr);  // [K, V] the decayed S too, when given
void delta_rule_update_output(float* S,                // [K, V], updated in place
                                                       // Inputs.
                              const float* bk, const float* r, const float* q,  // [K], [V], [K]
                              int64_t K, int64_t V,
                              // Outputs.
                              float* out);  // [V]
// Both in one pass when the next token uses the same state: token t's update and output, then
// the next token's decay and prediction (one read and write of the state per token).
void delta_rule_update_decay(float* S,  // [K, V], updated in place
                                        // Inputs.
                             const float* bk, const float* r, const float* q,  // [K], [V], [K]
                             const float* d_next, const float* k_next,         // [K] each
                             int64_t K, int64_t V,
                             // Outputs.
                             float* out, float* pred_next,  // [V] each
                             float* copy = nullptr);        // [K, V] the decayed S too, when given

// A token whose state comes from memory, or goes back to it, or both (decode), in two passes
// instead of a load, the two passes above and a store:
//   decay_predict_from reads the stored state (f32, bf16 or f16) and computes pred = k^T
//   diag(d) state, writing S = diag(d) state in f32 when S is given (the run goes on from S);
//   update_output_to writes v = diag(d) src + bk r^T rounded to `dtype` into dst
//   (non-temporally where whole lines allow) with out = q^T v: src is S in f32 with d null after
//   a run's tokens, or, for a run of one token, the stored state again with its decay d (read
//   from cache: no f32 copy written and read back). `next`, when given, is the state (in src's
//   dtype, [K, V]) that the caller's next pass reads first: prefetched row by row, so that the
//   next state's reads overlap this pass's stores.
void delta_rule_decay_predict_from(DType dtype,
                                   // Inputs.
                                   const void* src,  // [K, V] in dtype
                                   // Outputs.
                                   float* S,  // [K, V] or null
                                   // Inputs.
                                   const float* d, const float* k,  // [K] each
                                   int64_t K, int64_t V,
                                   // Outputs.
                                   float* pred);  // [V]
void delta_rule_update_output_to(DType src_dtype,
                                 // Inputs.
                                 const void* src,  // [K, V] in src_dtype
                                 const float* d,   // [K] or null
                                 const float* bk, const float* r, const float* q,  // [K], [V], [K]
                                 int64_t K, int64_t V,
                                 // Outputs.
                                 float* out,              // [V]
                                 DType dtype, void* dst,  // [K, V] in dtype
                                 // Inputs.
                                 const void* next = nullptr);  // [K, V] in src_dtype, or null

// A state stored in f32, bf16 or f16 widened into f32 (n elements): vectorized.
void delta_rule_load_state(DType dtype,
                           // Inputs.
                           const void* src,
                           // Outputs.
                           float* dst, int64_t n);

// The f32 state stored in f32, bf16 or f16 (n elements, rounded to nearest even): vectorized,
// by non-temporal stores where dst is 64-byte aligned (the state is not read again soon).
void delta_rule_store_state(DType dtype,
                            // Inputs.
                            const float* src,
                            // Outputs.
                            void* dst, int64_t n);

}  // namespace tokamax
