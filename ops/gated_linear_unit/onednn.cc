// gated_linear_unit: the oneDNN baseline ("onednn"): a cached oneDNN matmul of x with the weights
// viewed as [K, 2N], then the activation and the product in our own loop.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features; W = weights viewed as [K, 2N] (gate columns 0..N-1, projection N..)
//   mc     rows of one chunk (the last chunk may be shorter)
//
// The composite the issue names: Y[mc, 2N] = x[chunk] @ W in f32 (one matmul primitive per chunk
// shape, cached: at most two shapes per problem), then out = act(Y[:, :N]) * Y[:, N:] rounded to
// x's dtype. oneDNN has no primitive for "activation of one half times the other half" (an
// eltwise post-op would hit the projection columns too, and its eltwise/binary kernels want dense
// operands, not the strided halves of Y), so the second step is our own loop: cpu_glu_row (the
// same vectorized activations as the cpu implementation, so the comparison isolates the fusion
// and the GEMM) and ragged_dot's store_rows, threaded over rows on our pool. Rows are chunked only
// to bound the f32 intermediate (chunk_rows, by default kChunkElements); each chunk is a full-size
// oneDNN matmul. The matmul's threads are oneDNN's OpenMP runtime (see onednn_engine.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// mc, K, columns (2N fused, N per half unfused), input type, dst row stride (2N).
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, dt, int64_t>;
constexpr size_t kMaxCachedPrimitives = 4096;
// The f32 intermediate of one chunk: at most 2^25 elements (128 MiB) by default, so the largest
// catalog shapes (4M rows x 2N) do not need gigabytes next to their inputs.
constexpr int64_t kChunkElements = int64_t{1} << 25;
// Rows of the epilogue's tasks on our pool.
constexpr int64_t kEpilogueRows = 64;

struct OneDnnGluConfig {
  int64_t chunk_rows = 0;  // mc: rows of x per matmul; 0 = as many as fit kChunkElements

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

class OneDnnGatedLinearUnit final : public TypedImplementation<GluProblem, OneDnnGluConfig> {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["epilogue"] = std::string("tokamax cpu_glu_row (") + cpu::simd_target_name() + ")";
    return description;
  }

  void check(const GluProblem& p, const Device&) const override {
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
    const int64_t M = p.M, K = p.K, N = p.N;
    Tensor& out = outputs.at("out");
    const size_t x_bytes = dtype_size(p.x_dtype);
    char* out_data = static_cast<char*>(out.raw());
    if (M == 0 || N == 0) return;
    if (K == 0) {  // empty sums: act(0) * 0 = 0 for every activation (all-zero bits are +0)
      std::memset(out_data, 0, out.size_bytes());
      return;
    }
    // dnnl::memory wants non-const handles; the primitive only reads src and weights.
    char* x_data = static_cast<char*>(const_cast<void*>(inputs.at("x").raw()));
    // Fused weights: one matmul with W [K, 2N]; unfused: one per half, Wg and Wp [K, N], into
    // the two halves of Y (row stride 2N), so the epilogue is the same.
    const GluWeights w = glu_weights(p, inputs);
    char* gate_data = static_cast<char*>(const_cast<void*>(w.gate));
    char* proj_data = static_cast<char*>(const_cast<void*>(w.proj));
    const dt in_type = onednn_type(p.x_dtype);
    const int64_t mc = std::clamp<int64_t>(
        config.chunk_rows > 0 ? config.chunk_rows : kChunkElements / (2 * N), 1, M);
    // Grow-only scratch, reused across calls: a bench calls back to back, and first-touch page
    // faults on a fresh buffer would be charged to the baseline.
    thread_local cpu::ScratchBuffer scratch;
    float* y = scratch.floats(static_cast<size_t>(mc * 2 * N));
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    const int64_t cols = p.fused_weights ? 2 * N : N;
    dnnl::memory gate_weights(cpu::onednn_plain_desc(K, cols, in_type), engine, gate_data);
    dnnl::memory proj_weights(cpu::onednn_plain_desc(K, cols, in_type), engine, proj_data);
    for (int64_t m0 = 0; m0 < M; m0 += mc) {
      const int64_t rows = std::min(mc, M - m0);
      const dnnl::matmul matmul = primitive({rows, K, cols, in_type, 2 * N});
      dnnl::memory src(cpu::onednn_plain_desc(rows, K, in_type), engine, x_data + m0 * K * x_bytes);
      const dnnl::memory::desc dst_desc({rows, cols}, dt::f32, {2 * N, 1});
      dnnl::memory dst(dst_desc, engine, y);
      matmul.execute(stream,
                     {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, gate_weights}, {DNNL_ARG_DST, dst}});
      if (!p.fused_weights) {
        dnnl::memory proj_dst(dst_desc, engine, y + N);
        matmul.execute(stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, proj_weights},
                                {DNNL_ARG_DST, proj_dst}});
      }
      stream.wait();
      // act(Y[:, :N]) * Y[:, N:], in place over the gate half, then rounded to x's dtype.
      const Activation activation = p.activation;
      const DType out_dtype = p.x_dtype;
      char* out_chunk = out_data + m0 * N * static_cast<int64_t>(x_bytes);
      cpu::parallel_for((rows + kEpilogueRows - 1) / kEpilogueRows, 0, [&](int64_t task, int) {
        const int64_t r0 = task * kEpilogueRows, r1 = std::min(rows, r0 + kEpilogueRows);
        for (int64_t r = r0; r < r1; ++r) {
          float* gate = y + r * 2 * N;
          cpu_glu_row(activation, gate, gate + N, gate, N);
        }
        store_rows(y + r0 * 2 * N, 2 * N, r1 - r0, N, out_dtype,
                   out_chunk + r0 * N * static_cast<int64_t>(x_bytes), N);
      });
    }
  }

 private:
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [rows, K, cols, in_type, ld_dst] = key;
      const dnnl::matmul::desc desc(cpu::onednn_plain_desc(rows, K, in_type),
                                    cpu::onednn_plain_desc(K, cols, in_type),
                                    dnnl::memory::desc({rows, cols}, dt::f32, {ld_dst, 1}));
      try {
        return dnnl::matmul(dnnl::matmul::primitive_desc(desc, cpu::onednn_engine()));
      } catch (const dnnl::error& e) {
        if (e.status == dnnl_unimplemented) {
          throw NotImplemented("onednn: no matmul for M=" + std::to_string(rows) +
                               ", K=" + std::to_string(K) + ", 2N=" + std::to_string(cols) + ": " +
                               e.what());
        }
        throw;
      }
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
