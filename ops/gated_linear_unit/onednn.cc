// gated_linear_unit: the oneDNN baseline ("onednn"): a cached oneDNN matmul of x with the weights
// viewed as [K, 2N], then the activation and the product in our own loop (composite.h).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features; W = weights viewed as [K, 2N] (gate columns 0..N-1, projection N..)
//
// oneDNN has no primitive for "activation of one half times the other half" (an eltwise
// post-op would hit the projection columns too, and its eltwise/binary kernels want dense
// operands, not the strided halves of Y), so the second step is our own loop. One matmul
// primitive per chunk shape, cached (at most two shapes per problem); its threads are oneDNN's
// OpenMP runtime (see onednn_engine.h).
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/composite.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// mc, K, columns (2N fused, N per half unfused), input type, dst row stride (2N).
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, dt, int64_t>;
constexpr size_t kMaxCachedPrimitives = 4096;

struct OneDnnGluConfig {
  int64_t chunk_rows = 0;  // mc: rows of x per matmul; 0 = kGluCompositeChunkElements / 2N

  void validate() const {
    require_config(chunk_rows >= 0, "chunk_rows", [&] {
      return "chunk_rows is " + std::to_string(chunk_rows) + "; expected >= 0 (0 = automatic)";
    });
  }
  template <class V>
  void visit(V&& v) {
    v("chunk_rows", chunk_rows);
  }
};

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

class OneDnnGatedLinearUnit final : public OneDnnImplementation<GluProblem, OneDnnGluConfig> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["epilogue"] = std::string("tokamax cpu_glu_row (") + cpu::simd_target_name() + ")";
    return description;
  }

  void check(const GluProblem& p, const Device&) const override {
    if (!p.precision_plan().identity()) {
      throw NotImplemented("onednn: precision=" + std::string(precision_name(p.precision)) +
                           "; the composite multiplies the operands as given");
    }
    const std::string x(dtype_name(p.x_dtype)), w(dtype_name(p.w_dtype));
    if (p.x_dtype != p.w_dtype) {
      throw NotImplemented("onednn: x is " + x + " but weights are " + w +
                           "; the baseline wires one input dtype");
    }
    if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
      throw NotImplemented("onednn: " + x + " inputs; the baseline wires f32 and bf16 only" +
                           (p.x_dtype == DType::kF64 ? " (oneDNN has no f64 matmul)" : ""));
    }
    const std::string why = cpu::onednn_matmul_unavailable(onednn_type(p.x_dtype));
    if (!why.empty()) throw NotImplemented("onednn: " + x + "->f32 matmul: " + why);
  }

  void run(const GluProblem& p, const OneDnnGluConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const int64_t K = p.K;
    const dt in_type = onednn_type(p.x_dtype);
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    run_glu_composite(
        p, config.chunk_rows,
        [&](int64_t rows, int64_t cols, const void* x, const void* w, float* y, int64_t ld_y) {
          // dnnl::memory wants non-const handles; the primitive only reads src and weights.
          const dnnl::matmul matmul = primitive({rows, K, cols, in_type, ld_y});
          dnnl::memory src(cpu::onednn_plain_desc(rows, K, in_type), engine, const_cast<void*>(x));
          dnnl::memory weights(cpu::onednn_plain_desc(K, cols, in_type), engine,
                               const_cast<void*>(w));
          dnnl::memory dst(dnnl::memory::desc({rows, cols}, dt::f32, {ld_y, 1}), engine, y);
          matmul.execute(stream,
                         {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
          stream.wait();
        },
        inputs, outputs);
  }

 private:
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [rows, K, cols, in_type, ld_dst] = key;
      const dnnl::matmul::desc desc(cpu::onednn_plain_desc(rows, K, in_type),
                                    cpu::onednn_plain_desc(K, cols, in_type),
                                    dnnl::memory::desc({rows, cols}, dt::f32, {ld_dst, 1}));
      return create_onednn(
          "matmul for M=" + std::to_string(rows) + ", K=" + std::to_string(K) +
              ", 2N=" + std::to_string(cols),
          [&] { return dnnl::matmul(dnnl::matmul::primitive_desc(desc, cpu::onednn_engine())); });
    });
  }

  mutable cpu::OneDnnPrimitiveCache<MatmulKey, dnnl::matmul> primitives_{kMaxCachedPrimitives};
};

}  // namespace

const Implementation& gated_linear_unit_onednn_implementation() {
  static const OneDnnGatedLinearUnit impl;
  return impl;
}

}  // namespace tokamax
