// fused_moe: the oneDNN baseline ("onednn"), the layer as a oneDNN user writes it around our
// router: the tokens gathered into expert order, then per expert a cached oneDNN matmul for the
// gate/up product, our bias + activation loop (oneDNN has no "act(one half) * other half"
// post-op), a second matmul for the down product, and our weighted combine (combine.h).
//
// Dimensions.
//   T, H, E, I, k   as in base.h
//   R      routes, T k
//   m      routes of one expert
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/fused_moe/base.h"
#include "ops/fused_moe/combine.h"
#include "ops/fused_moe/routing.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;

// m, K, N, input type: one primitive per expert size seen (the sizes repeat across calls of one
// workload; the cache is bounded).
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, dt>;
constexpr size_t kMaxCachedPrimitives = 4096;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

class OneDnnFusedMoe final : public OneDnnImplementation<FusedMoeProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] =
        "tokamax router and gather, per expert oneDNN matmul (gate/up), tokamax "
        "cpu_biased_glu_row, oneDNN matmul (down), tokamax weighted combine";
    description["epilogue"] = std::string(cpu::simd_target_name());
    return description;
  }

  void check(const FusedMoeProblem& p, const Device&) const override {
    const std::string x(dtype_name(p.x_dtype));
    if (p.quantized()) {
      throw NotImplemented("onednn: " + std::string(dtype_name(p.w_dtype)) +
                           " experts; oneDNN 2.6 has no weight-decompression matmul");
    }
    if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
      throw NotImplemented("onednn: " + x + " layers; the baseline wires f32 and bf16 only");
    }
    const std::string why = cpu::onednn_matmul_unavailable(onednn_type(p.x_dtype));
    if (!why.empty()) throw NotImplemented("onednn: " + x + "->f32 matmul: " + why);
  }

  void run(const FusedMoeProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const MoeRouting routing = route_tokens(p, inputs.at("gating"), device);
    const int64_t H = p.H, I = p.I, N1 = 2 * I, R = p.routes();
    const size_t x_size = dtype_size(p.x_dtype);
    const dt type = onednn_type(p.x_dtype);
    // The tokens in expert order (the dispatch a oneDNN user writes before per-expert matmuls).
    std::vector<char> dispatched(static_cast<size_t>(R * H) * x_size);
    const char* xs = static_cast<const char*>(inputs.at("x").raw());
    cpu::parallel_for(R, 0, [&](int64_t s, int) {
      std::memcpy(dispatched.data() + s * H * x_size, xs + (routing.sorted[s] / p.k) * H * x_size,
                  H * x_size);
    });
    int64_t most = 0;
    for (int64_t e = 0; e < p.E; ++e)
      most = std::max(most, routing.expert_start[e + 1] - routing.expert_start[e]);
    std::vector<float> gate(static_cast<size_t>(most * N1)), down(static_cast<size_t>(most * H));
    std::vector<char> act(static_cast<size_t>(most * I) * x_size);
    std::vector<float> act32(static_cast<size_t>(most * I));
    const std::vector<float> b1 = optional_f32(find_tensor(inputs, "w1_bias"));
    const std::vector<float> b2 = optional_f32(find_tensor(inputs, "w2_bias"));
    const GluForm form{.clamped = moe_clamped_form(p.act)};
    const char* w1 = static_cast<const char*>(inputs.at("w1").raw());
    const char* w2 = static_cast<const char*>(inputs.at("w2").raw());
    const RoutedRows routed(p);
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    for (int64_t e = 0; e < p.E; ++e) {
      const int64_t first = routing.expert_start[e], m = routing.expert_start[e + 1] - first;
      if (m == 0) continue;
      matmul(stream, type, m, H, N1, dispatched.data() + first * H * x_size,
             w1 + e * H * N1 * x_size, gate.data());
      const float* gb = b1.empty() ? nullptr : b1.data() + e * N1;
      for (int64_t i = 0; i < m; ++i) {
        cpu_biased_glu_row(Activation::kSilu, form, gate.data() + i * N1, gb,
                           gate.data() + i * N1 + I, gb ? gb + I : nullptr, act32.data() + i * I,
                           I);
      }
      store_rows(act32.data(), I, m, I, p.x_dtype, act.data(), I);
      matmul(stream, type, m, I, H, act.data(), w2 + e * I * H * x_size, down.data());
      const float* db = b2.empty() ? nullptr : b2.data() + e * H;
      for (int64_t i = 0; i < m; ++i) {
        store_route_row(p, routing, routing.sorted[first + i], db, down.data() + i * H, routed);
      }
    }
    combine_routes(p, routed, outputs.at("out"), 0);
  }

 private:
  // dst[m, N] f32 = src[m, K] weights[K, N], both of `type`.
  void matmul(dnnl::stream& stream, dt type, int64_t m, int64_t K, int64_t N, const void* src,
              const void* weights, float* dst) const {
    const dnnl::engine& engine = cpu::onednn_engine();
    const dnnl::matmul primitive = primitives_.get(MatmulKey{m, K, N, type}, [&] {
      const dnnl::matmul::desc desc(cpu::onednn_plain_desc(m, K, type),
                                    cpu::onednn_plain_desc(K, N, type),
                                    cpu::onednn_plain_desc(m, N, dt::f32));
      return create_onednn(
          "matmul for M=" + std::to_string(m) + ", K=" + std::to_string(K) +
              ", N=" + std::to_string(N),
          [&] { return dnnl::matmul(dnnl::matmul::primitive_desc(desc, engine)); });
    });
    // dnnl::memory wants non-const handles; the primitive only reads src and weights.
    dnnl::memory a(cpu::onednn_plain_desc(m, K, type), engine, const_cast<void*>(src));
    dnnl::memory b(cpu::onednn_plain_desc(K, N, type), engine, const_cast<void*>(weights));
    dnnl::memory c(cpu::onednn_plain_desc(m, N, dt::f32), engine, dst);
    primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  }

  mutable cpu::OneDnnPrimitiveCache<MatmulKey, dnnl::matmul> primitives_{kMaxCachedPrimitives};
};

}  // namespace

const Implementation& fused_moe_onednn_implementation() {
  static const OneDnnFusedMoe impl;
  return impl;
}

}  // namespace tokamax
