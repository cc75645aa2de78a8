// ragged_dot_vjp: the oneDNN baseline ("onednn"), two cached matmul primitives per non-empty
// group: the per-group vendor loop a user would write.
//
// Dimensions.
//   G, M, K, N   as base.h
//   m_g    rows of group g, s_g its first row
//
// dlhs_g = dout_g [m_g, N] x rhs[g]^T and drhs[g] = lhs_g^T x dout_g [m_g, N], the calls of
// ragged_dot_vjp_gemm_plan (gemm_plan.h; the cublas baseline runs the same plan); the
// transposes are strided memory descriptors over the caller's buffers (rhs[g] read as [N, K]
// with strides (1, N), lhs_g as [K, m_g] with strides (1, K)), so nothing is copied and oneDNN
// picks its own kernels for the layouts. One input dtype (lhs = rhs = dout, f32 or bf16),
// gradients in it.
// Threads are oneDNN's (OpenMP), so the config is empty.
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/gemm_plan.h"
#include "ops/ragged_dot/vjp/precision.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// m, k, n, whether A and B are read transposed, their row strides and C's, data type: one
// planned product's shape and layout (gemm_plan.h).
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, dt>;
constexpr size_t kMaxCachedPrimitives = 4096;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

// [rows, cols] with element (r, c) at r * row_stride + c * col_stride.
dnnl::memory::desc strided(int64_t rows, int64_t cols, dt type, int64_t row_stride,
                           int64_t col_stride) {
  return dnnl::memory::desc(dims{rows, cols}, type, dims{row_stride, col_stride});
}

class OneDnnRaggedDotVjp final : public OneDnnImplementation<RaggedDotVjpProblem> {
 public:
  void check(const RaggedDotVjpProblem& p, const Device&) const override {
    if (vjp_precision_rounds(p)) {
      throw NotImplemented("onednn: precision=" + std::string(precision_name(p.fwd.precision)) +
                           "; the baseline multiplies the operands as given");
    }
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
    const dt type = onednn_type(vp.fwd.lhs_dtype);
    const int64_t size = static_cast<int64_t>(dtype_size(vp.fwd.lhs_dtype));
    // dnnl::memory wants non-const handles; the primitives only read lhs, rhs and dout. One
    // dtype for all five tensors (check), so an offset in elements is offset * size bytes.
    auto at = [&](RaggedDotVjpTensor t, int64_t offset) {
      const char* name = ragged_dot_vjp_tensor_name(t);
      char* base = is_output(t) ? static_cast<char*>(outputs.at(name).raw())
                                : static_cast<char*>(const_cast<void*>(inputs.at(name).raw()));
      return base + offset * size;
    };
    // The per-group loop of gemm_plan.h (the cublas baseline runs the same calls).
    const RaggedDotVjpGemmPlan plan = ragged_dot_vjp_gemm_plan(vp);
    for (const RaggedDotVjpZeros& z : plan.zeros) {
      std::memset(at(z.tensor, z.offset), 0, static_cast<size_t>(z.count * size));
    }
    if (plan.gemms.empty()) return;
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    for (const RaggedDotVjpGemm& g : plan.gemms) {
      const MatmulKey key{g.m, g.k, g.n, g.a_transposed, g.b_transposed, g.lda, g.ldb, g.ldc, type};
      dnnl::memory a(a_desc(key), engine, at(g.a, g.a_offset));
      dnnl::memory b(b_desc(key), engine, at(g.b, g.b_offset));
      dnnl::memory c(c_desc(key), engine, at(g.c, g.c_offset));
      primitive(key).execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    }
    stream.wait();
  }

 private:
  // op(A) [m, k], op(B) [k, n] and C [m, n] of one planned product: the transposes are strided
  // descriptors over the stored rows (lda, ldb, ldc), so nothing is copied.
  static dnnl::memory::desc a_desc(const MatmulKey& key) {
    const auto& [m, k, n, a_t, b_t, lda, ldb, ldc, type] = key;
    return a_t ? strided(m, k, type, 1, lda) : strided(m, k, type, lda, 1);
  }
  static dnnl::memory::desc b_desc(const MatmulKey& key) {
    const auto& [m, k, n, a_t, b_t, lda, ldb, ldc, type] = key;
    return b_t ? strided(k, n, type, 1, ldb) : strided(k, n, type, ldb, 1);
  }
  static dnnl::memory::desc c_desc(const MatmulKey& key) {
    const auto& [m, k, n, a_t, b_t, lda, ldb, ldc, type] = key;
    return strided(m, n, type, ldc, 1);
  }

  // The primitive of one product shape and layout, created on first use.
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const dnnl::matmul::desc desc(a_desc(key), b_desc(key), c_desc(key));
      const auto& [m, k, n, a_t, b_t, lda, ldb, ldc, type] = key;
      const std::string what =
          "matmul for " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      return create_onednn(what, [&] {
        return dnnl::matmul(dnnl::matmul::primitive_desc(desc, cpu::onednn_engine()));
      });
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
