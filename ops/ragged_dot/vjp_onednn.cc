// ragged_dot_vjp: the oneDNN baseline ("onednn"), two cached matmul primitives per non-empty
// group: the per-group vendor loop a user would write.
//
// Dimensions.
//   G, M, K, N   as vjp_base.h
//   m_g    rows of group g, s_g its first row
//
// dlhs_g = dout_g [m_g, N] x rhs[g]^T and drhs[g] = lhs_g^T x dout_g [m_g, N]; the transposes are
// strided memory descriptors over the caller's buffers (rhs[g] read as [N, K] with strides
// (1, N), lhs_g as [K, m_g] with strides (1, K)), so nothing is copied and oneDNN picks its own
// kernels for the layouts. One input dtype (lhs = rhs = dout, f32 or bf16), gradients in it.
// Threads are oneDNN's (OpenMP), so the config is empty.
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/vjp_base.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// rows, contraction, cols, whether A is lhs^T (the drhs product), data type.
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, bool, dt>;
constexpr size_t kMaxCachedPrimitives = 4096;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

// [rows, cols] with element (r, c) at r * row_stride + c * col_stride.
dnnl::memory::desc strided(int64_t rows, int64_t cols, dt type, int64_t row_stride,
                           int64_t col_stride) {
  return dnnl::memory::desc(dims{rows, cols}, type, dims{row_stride, col_stride});
}

class OneDnnRaggedDotVjp final : public TypedImplementation<RaggedDotVjpProblem> {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override { return cpu::onednn_describe(); }

  void check(const RaggedDotVjpProblem& p, const Device&) const override {
    const DType in = p.fwd.lhs_dtype;
    if (p.fwd.rhs_dtype != in || p.dout_dtype != in) {
      throw NotImplemented("onednn: lhs " + std::string(dtype_name(in)) + ", rhs " +
                           std::string(dtype_name(p.fwd.rhs_dtype)) + ", dout " +
                           std::string(dtype_name(p.dout_dtype)) +
                           "; the baseline wires one dtype for all three");
    }
    if (in != DType::kF32 && in != DType::kBF16) {
      throw NotImplemented("onednn: " + std::string(dtype_name(in)) +
                           " operands; the baseline wires f32 and bf16" +
                           (in == DType::kF64 ? " (oneDNN has no f64 matmul)" : ""));
    }
    const std::string why = cpu::onednn_matmul_unavailable(onednn_type(in), onednn_type(in));
    if (!why.empty()) {
      throw NotImplemented("onednn: " + std::string(dtype_name(in)) + " matmul: " + why);
    }
  }

  void run(const RaggedDotVjpProblem& vp, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(vp, device);
    const RaggedDotProblem& p = vp.fwd;
    const int64_t M = p.M, K = p.K, N = p.N;
    const dt type = onednn_type(p.lhs_dtype);
    const int64_t size = static_cast<int64_t>(dtype_size(p.lhs_dtype));
    // dnnl::memory wants non-const handles; the primitives only read lhs, rhs and dout.
    char* lhs = static_cast<char*>(const_cast<void*>(inputs.at("lhs").raw()));
    char* rhs = static_cast<char*>(const_cast<void*>(inputs.at("rhs").raw()));
    char* dout = static_cast<char*>(const_cast<void*>(inputs.at("dout").raw()));
    char* dlhs = static_cast<char*>(outputs.at("dlhs").raw());
    char* drhs = static_cast<char*>(outputs.at("drhs").raw());
    // Rows without a forward output, and every row when N = 0 (an empty sum): zero gradients.
    const int64_t first = N == 0 ? p.rows() : p.first_row();
    std::memset(dlhs, 0, static_cast<size_t>(first * K * size));
    std::memset(dlhs + p.rows() * K * size, 0, static_cast<size_t>((M - p.rows()) * K * size));
    if (K == 0) return;
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = p.group_sizes[g], s_g = p.group_starts[g];
      char* drhs_g = drhs + g * K * N * size;
      if (m_g == 0 || N == 0) {
        std::memset(drhs_g, 0, static_cast<size_t>(K * N * size));
        continue;
      }
      // dlhs_g [m_g, K] = dout_g [m_g, N] x rhs[g]^T [N, K].
      dnnl::memory d_src(strided(m_g, N, type, N, 1), engine, dout + s_g * N * size);
      dnnl::memory w_t(strided(N, K, type, 1, N), engine, rhs + g * K * N * size);
      dnnl::memory dx(strided(m_g, K, type, K, 1), engine, dlhs + s_g * K * size);
      primitive({m_g, N, K, false, type})
          .execute(stream, {{DNNL_ARG_SRC, d_src}, {DNNL_ARG_WEIGHTS, w_t}, {DNNL_ARG_DST, dx}});
      // drhs[g] [K, N] = lhs_g^T [K, m_g] x dout_g [m_g, N].
      dnnl::memory x_t(strided(K, m_g, type, 1, K), engine, lhs + s_g * K * size);
      dnnl::memory d_w(strided(m_g, N, type, N, 1), engine, dout + s_g * N * size);
      dnnl::memory dw(strided(K, N, type, N, 1), engine, drhs_g);
      primitive({K, m_g, N, true, type})
          .execute(stream, {{DNNL_ARG_SRC, x_t}, {DNNL_ARG_WEIGHTS, d_w}, {DNNL_ARG_DST, dw}});
    }
    stream.wait();
  }

 private:
  // The primitive of one product shape, created on first use.
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [rows, depth, cols, lhs_transposed, type] = key;
      // dlhs: src dout [rows, depth] plain, weights rhs^T [depth, cols] strides (1, depth's
      // row length = cols); drhs: src lhs^T [rows, depth] strides (1, rows), weights plain.
      const dnnl::memory::desc src = lhs_transposed ? strided(rows, depth, type, 1, rows)
                                                    : strided(rows, depth, type, depth, 1);
      const dnnl::memory::desc weights = lhs_transposed ? strided(depth, cols, type, cols, 1)
                                                        : strided(depth, cols, type, 1, depth);
      const dnnl::matmul::desc desc(src, weights, strided(rows, cols, type, cols, 1));
      try {
        return dnnl::matmul(dnnl::matmul::primitive_desc(desc, cpu::onednn_engine()));
      } catch (const dnnl::error& e) {
        if (e.status == dnnl_unimplemented) {
          throw NotImplemented("onednn: no matmul for " + std::to_string(rows) + "x" +
                               std::to_string(depth) + "x" + std::to_string(cols) + ": " +
                               e.what());
        }
        throw;
      }
    });
  }

  mutable cpu::OneDnnPrimitiveCache<MatmulKey, dnnl::matmul> primitives_{kMaxCachedPrimitives};
};

}  // namespace

const Implementation& ragged_dot_vjp_onednn_implementation() {
  static const OneDnnRaggedDotVjp impl;
  return impl;
}

}  // namespace tokamax
