// gated_linear_unit_vjp: the oneDNN baseline ("onednn"): the composite a user would write with
// oneDNN matmuls around the elementwise backward.
//
// Dimensions.
//   M, K, N   as base.h; W = [Wg | Wp] viewed as [K, 2N]; H [M, 2N] = [dg | dp]
//
// Y = x W (f32, one matmul fused, one per half unfused), H from Y and dout in place (the cpu
// kernel's glu_vjp_h_row, so the comparison isolates the products and their scheduling), then
// dx = H W^T (W read through a transposed memory descriptor; unfused, the second half's matmul
// adds to the first with a sum post-op) and dW = x^T H (x transposed likewise; one matmul per
// half unfused). H is f32 and oneDNN 2.6's matmul takes one src/weights type, so the baseline
// wires f32 x and weights; bf16 would need H rounded to bf16, a different (less accurate)
// computation. Threads are oneDNN's (OpenMP); the H pass runs on our pool.
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/vjp/base.h"
#include "ops/gated_linear_unit/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// A [rows, cols] f32 matrix with element (r, c) at r * row_stride + c * col_stride.
dnnl::memory::desc f32_desc(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return dnnl::memory::desc(dims{rows, cols}, dt::f32, dims{row_stride, col_stride});
}

struct MatmulShape {
  dnnl::memory::desc src, weights, dst;
  bool accumulate;
};

class OneDnnGatedLinearUnitVjp final : public OneDnnImplementation<GluVjpProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json d = cpu::onednn_describe();
    d["composite"] = "matmul x W, H pass, matmul H W^T, matmul x^T H";
    return d;
  }

  void check(const GluVjpProblem& p, const Device&) const override {
    if (p.fwd.x_dtype != DType::kF32 || p.fwd.w_dtype != DType::kF32) {
      throw NotImplemented("onednn: " + std::string(dtype_name(p.fwd.x_dtype)) + " x and " +
                           std::string(dtype_name(p.fwd.w_dtype)) +
                           " weights; the composite wires f32 (its H is f32, and oneDNN 2.6's "
                           "matmul takes one src/weights type)");
    }
  }

  void run(const GluVjpProblem& vp, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(vp, device);
    const GluProblem& p = vp.fwd;
    const int64_t M = p.M, K = p.K, N = p.N, N2 = 2 * N;
    Tensor& dx = outputs.at("dx");
    const GluWeightGrads dw = glu_weight_grads(p, outputs);
    if (M == 0 || K == 0 || N == 0) {
      // Empty products: zero gradients (oneDNN wants non-empty shapes).
      for (auto& [name, tensor] : outputs) tensor.fill_zero();
      return;
    }
    const GluWeights w = glu_weights(p, inputs);
    float* x = static_cast<float*>(const_cast<void*>(inputs.at("x").raw()));
    float* gate = static_cast<float*>(const_cast<void*>(w.gate));
    float* proj = static_cast<float*>(const_cast<void*>(w.proj));
    const Tensor& dout = inputs.at("dout");
    // H in a buffer that only grows, as the cpu kernel's (no page faults per call in either).
    thread_local cpu::ScratchBuffer h_buffer;
    float* h = h_buffer.floats(static_cast<size_t>(M * N2));
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    auto matmul = [&](const MatmulShape& s, void* src, void* weights, void* dst) {
      primitive(s).execute(stream, {{DNNL_ARG_SRC, dnnl::memory(s.src, engine, src)},
                                    {DNNL_ARG_WEIGHTS, dnnl::memory(s.weights, engine, weights)},
                                    {DNNL_ARG_DST, dnnl::memory(s.dst, engine, dst)}});
    };
    const int64_t ld = w.ld;
    const bool fused = p.fused_weights;
    const int64_t cols = fused ? N2 : N;  // columns of one weights matmul
    // Y = x W.
    const MatmulShape forward{f32_desc(M, K, K, 1), f32_desc(K, cols, ld, 1),
                              f32_desc(M, cols, N2, 1), false};
    matmul(forward, x, gate, h);
    if (!fused) matmul(forward, x, proj, h + N);
    stream.wait();
    // H in place, rows over our pool.
    const char* d = static_cast<const char*>(dout.raw());
    const int64_t d_row = N * static_cast<int64_t>(dtype_size(dout.dtype()));
    cpu::parallel_for(M, 0, [&](int64_t m, int) {
      glu_vjp_h_row(p.activation, dout.dtype(), d + m * d_row, N, h + m * N2, h + m * N2 + N);
    });
    // dx = H W^T (unfused: + the second half's product).
    float* dx_data = dx.data<float>();
    matmul({f32_desc(M, cols, N2, 1), f32_desc(cols, K, 1, ld), f32_desc(M, K, K, 1), false}, h,
           gate, dx_data);
    if (!fused) {
      matmul({f32_desc(M, N, N2, 1), f32_desc(N, K, 1, ld), f32_desc(M, K, K, 1), true}, h + N,
             proj, dx_data);
    }
    // dW = x^T H, written in place of the gradients' [K, cols] (row stride ld).
    const MatmulShape backward{f32_desc(K, M, 1, K), f32_desc(M, cols, N2, 1),
                               f32_desc(K, cols, ld, 1), false};
    matmul(backward, x, h, dw.gate);
    if (!fused) matmul(backward, x, h + N, dw.proj);
    stream.wait();
  }

 private:
  // Keyed by the descriptors' dims and strides (the shapes of one problem: at most five).
  using Key = std::tuple<dims, dims, dims, dims, dims, dims, bool>;
  dnnl::matmul primitive(const MatmulShape& s) const {
    const Key key{s.src.dims(), strides(s.src), s.weights.dims(), strides(s.weights),
                  s.dst.dims(), strides(s.dst), s.accumulate};
    return primitives_.get(key, [&] {
      dnnl::primitive_attr attr;
      if (s.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::desc desc(s.src, s.weights, s.dst);
      return create_onednn("matmul for this layout", [&] {
        return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu::onednn_engine()));
      });
    });
  }
  static dims strides(const dnnl::memory::desc& d) {
    const auto& s = d.data.format_desc.blocking.strides;
    return dims(s, s + d.data.ndims);
  }

  mutable cpu::OneDnnPrimitiveCache<Key, dnnl::matmul> primitives_{1024};
};

}  // namespace

const Implementation& gated_linear_unit_vjp_onednn_implementation() {
  static const OneDnnGatedLinearUnitVjp impl;
  return impl;
}

}  // namespace tokamax
