// Tests of the delta rule's state passes (ops/common/delta_rule_rows.h) on every SIMD target:
// the copies of the decayed state they write when asked, and a decode token's two passes from
// and to a stored state (f32, bf16, f16; widths with and without whole lines to stream) against
// the load, the two passes in f32 and the store.
#include "ops/common/delta_rule_rows.h"

#include <catch2/catch.hpp>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("delta_rule state passes copy the decayed state when asked", "[delta_rule]") {
  const int64_t K = 9, V = 70;
  std::vector<float> S(K * V), d(K), k(K), bk(K), r(V), q(K);
  for (int64_t e = 0; e < K * V; ++e) S[e] = 0.01f * static_cast<float>(e % 31) - 0.1f;
  for (int64_t i = 0; i < K; ++i) {
    d[i] = 0.5f + 0.05f * static_cast<float>(i);
    k[i] = 0.1f * static_cast<float>(i);
    bk[i] = 0.2f - 0.03f * static_cast<float>(i);
    q[i] = 0.3f;
  }
  for (int64_t c = 0; c < V; ++c) r[c] = 0.02f * static_cast<float>(c) - 0.5f;
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    std::vector<float> a = S, copy(K * V, -1.0f), pred(V), out(V);
    delta_rule_decay_predict(a.data(), d.data(), k.data(), K, V, pred.data(), copy.data());
    CHECK(copy == a);
    std::vector<float> b = a, copy2(K * V, -1.0f), pred2(V);
    delta_rule_update_decay(b.data(), bk.data(), r.data(), q.data(), d.data(), k.data(), K, V,
                            out.data(), pred2.data(), copy2.data());
    CHECK(copy2 == b);
    // The copy is the state after this token's update and the next token's decay.
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) {
        CHECK(b[i * V + c] ==
              Approx((a[i * V + c] + bk[i] * r[c]) * d[i]).epsilon(1e-6).margin(1e-6));
      }
    }
  });
}

TEST_CASE("delta_rule decode passes read and write the stored state as load and store do",
          "[delta_rule]") {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const int64_t V : {int64_t{70}, int64_t{96}, int64_t{128}}) {
      const int64_t K = 12;
      Tensor stored(TensorSpec{dtype, {K, V}});
      for (int64_t e = 0; e < K * V; ++e) stored.set(e, 0.01 * static_cast<double>(e % 53) - 0.2);
      std::vector<float> d(K), k(K), bk(K), q(K), r(V);
      for (int64_t i = 0; i < K; ++i) {
        d[i] = 0.6f + 0.03f * static_cast<float>(i);
        k[i] = 0.05f * static_cast<float>(i) - 0.2f;
        bk[i] = 0.1f - 0.02f * static_cast<float>(i);
        q[i] = 0.25f;
      }
      for (int64_t c = 0; c < V; ++c) r[c] = 0.03f * static_cast<float>(c % 17) - 0.2f;
      for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
        CAPTURE(dtype_name(dtype), V);
        // Load, decay and predict, update and output, store.
        std::vector<float> S(K * V), pred(V), out(V);
        delta_rule_load_state(dtype, stored.raw(), S.data(), K * V);
        delta_rule_decay_predict(S.data(), d.data(), k.data(), K, V, pred.data());
        delta_rule_update_output(S.data(), bk.data(), r.data(), q.data(), K, V, out.data());
        Tensor want(TensorSpec{dtype, {K, V}});
        delta_rule_store_state(dtype, S.data(), want.raw(), K * V);
        // The same in two passes through S.
        std::vector<float> S2(K * V), pred2(V), out2(V);
        delta_rule_decay_predict_from(dtype, stored.raw(), S2.data(), d.data(), k.data(), K, V,
                                      pred2.data());
        Tensor got(TensorSpec{dtype, {K, V}});
        delta_rule_update_output_to(DType::kF32, S2.data(), nullptr, bk.data(), r.data(), q.data(),
                                    K, V, out2.data(), dtype, got.raw());
        // And in two passes over the stored state, with no S (a single token), prefetching a
        // next state.
        std::vector<float> pred3(V), out3(V);
        delta_rule_decay_predict_from(dtype, stored.raw(), nullptr, d.data(), k.data(), K, V,
                                      pred3.data());
        Tensor got3(TensorSpec{dtype, {K, V}});
        delta_rule_update_output_to(dtype, stored.raw(), d.data(), bk.data(), r.data(), q.data(), K,
                                    V, out3.data(), dtype, got3.raw(), stored.raw());
        // From the stored state into f32 (kimi_delta_attention's final state).
        std::vector<float> pred4(V), out4(V), got4(K * V);
        delta_rule_update_output_to(dtype, stored.raw(), d.data(), bk.data(), r.data(), q.data(), K,
                                    V, out4.data(), DType::kF32, got4.data());
        for (int64_t c = 0; c < V; ++c) {
          CHECK(pred2[c] == Approx(pred[c]).epsilon(1e-6).margin(1e-7));
          CHECK(out2[c] == Approx(out[c]).epsilon(1e-6).margin(1e-7));
          CHECK(pred3[c] == pred2[c]);
          CHECK(out3[c] == out2[c]);
          CHECK(out4[c] == out2[c]);
        }
        int64_t differ = 0, differ3 = 0, differ4 = 0;
        for (int64_t e = 0; e < K * V; ++e) {
          differ += want.get(e) != got.get(e);
          differ3 += got3.get(e) != got.get(e);
          differ4 += S[e] != got4[e];
        }
        CHECK(differ == 0);
        CHECK(differ3 == 0);
        CHECK(differ4 == 0);
      });
    }
  }
}
