// ragged_dot: the oneDNN baseline ("onednn"), one cached matmul primitive per non-empty group.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   m_g    rows of group g
//
// Threads are left to oneDNN's runtime (OpenMP in Debian's build, see onednn_engine.h), so the
// config is empty.
//
// With upstream's epilogue arguments (bias, activation, fused gate/up) it is the unfused
// composite a user would write: each group's matmul into an f32 scratch [m_g, N], then a second
// pass over it on our pool with the same f32 epilogue as the cpu kernel (RaggedDotEpilogue; the
// comparison isolates the fusion and the GEMM) and the rounding to the output dtype. oneDNN's
// eltwise post-ops would cover a bias and a plain activation, but not act(gate) * up of the two
// halves; one mechanism for every epilogue keeps the baseline one composite. group_offset: the
// rows of the other shards' groups are zeroed like those past the group sum. The other
// dimension numbers (trans_rhs, ragged_contracting) are onednn_general.h's.
#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_epilogue.h"
#include "ops/ragged_dot/cpu_quantize_lhs.h"
#include "ops/ragged_dot/onednn_general.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// One primitive per distinct group shape: MoE routing repeats a handful of m_g values across
// calls.
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, dt, dt>;  // m_g, K, N, input, output
// Past this many shapes (a long tune over many workloads) the cache starts over rather than grow.
constexpr size_t kMaxCachedPrimitives = 4096;
// Rows of the epilogue pass per pool task.
constexpr int64_t kEpilogueRows = 16;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

class OneDnnRaggedDot final : public OneDnnImplementation<RaggedDotProblem> {
 public:
  void check(const RaggedDotProblem& p, const Device&) const override {
    if (!p.precision_plan().identity()) {
      throw NotImplemented("onednn: precision=" + std::string(precision_name(p.precision)) +
                           "; the baseline multiplies the operands as given");
    }
    if (p.quantized()) {
      // oneDNN 2.6's int8 matmul: s8 x s8 with per-column output scales; float x int8 weights
      // (weight decompression) came in 3.x, and per-K-block scales need one matmul per block.
      if (p.rhs_dtype == DType::kF8E4M3) {
        throw NotImplemented("onednn: f8e4m3 weights; oneDNN 2.6 has no fp8 matmul");
      }
      if (!(p.quantize_lhs && p.rhs_dtype == DType::kI8)) {
        throw NotImplemented("onednn: rhs " + std::string(dtype_name(p.rhs_dtype)) +
                             " with a float lhs; oneDNN 2.6 has no weight decompression (3.x)"
                             ": the int8 baseline needs maybe_quantize_lhs with i8 rhs");
      }
      if (p.scale_blocks > 1) {
        throw NotImplemented("onednn: rhs_scale per " + std::to_string(p.scale_blocks) +
                             " K blocks; the int8 baseline wires per-column scales");
      }
      if (p.out_dtype == DType::kF64) {
        throw NotImplemented("onednn: an f64 output; the int8 baseline writes f32 and 16-bit");
      }
      if (!cpu::onednn_int8_exact()) {
        throw NotImplemented(
            "onednn: int8 matmul on isa=" +
            cpu::onednn_cpu_isa_name(dnnl::get_effective_cpu_isa()) +
            ": without VNNI oneDNN sums pairs of u8 x s8 products in saturating 16-bit "
            "(vpmaddubsw), so its int8 results are not exact");
      }
      return;
    }
    const std::string lhs(dtype_name(p.lhs_dtype)), rhs(dtype_name(p.rhs_dtype));
    const std::string out(dtype_name(p.out_dtype));
    if (p.lhs_dtype != p.rhs_dtype) {
      throw NotImplemented("onednn: lhs is " + lhs + " but rhs is " + rhs +
                           "; the baseline wires one input dtype");
    }
    // With an epilogue the matmul writes f32 and the pass rounds to any float output.
    const bool any_out = p.has_epilogue() && p.out_dtype != DType::kF64;
    const bool f32 = p.lhs_dtype == DType::kF32 && (p.out_dtype == DType::kF32 || any_out);
    const bool bf16 = p.lhs_dtype == DType::kBF16 &&
                      (p.out_dtype == DType::kF32 || p.out_dtype == DType::kBF16 || any_out);
    if (!f32 && !bf16) {
      throw NotImplemented("onednn: " + lhs + " inputs with a " + out +
                           " output; the baseline wires f32->f32 and bf16->f32/bf16 only (any "
                           "16-bit output with an epilogue)" +
                           (p.lhs_dtype == DType::kF64 ? " (oneDNN has no f64 matmul)" : ""));
    }
    // Ask the library rather than guess from the ISA: bf16 needs avx512_core in oneDNN 2.x.
    const DType matmul_out = p.has_epilogue() ? DType::kF32 : p.out_dtype;
    const std::string why =
        cpu::onednn_matmul_unavailable(onednn_type(p.lhs_dtype), onednn_type(matmul_out));
    if (!why.empty()) {
      throw NotImplemented("onednn: " + lhs + "->" + std::string(dtype_name(matmul_out)) +
                           " matmul: " + why);
    }
  }

  void run(const RaggedDotProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    if (p.dims != RaggedDims::kDefault) return run_onednn_general(p, inputs, outputs);
    if (p.has_epilogue() || p.first_row() > 0 || p.quantized() || !p.zero_initialize) {
      return run_composite(p, inputs, outputs);
    }
    const Tensor& lhs = inputs.at("lhs");
    const Tensor& rhs = inputs.at("rhs");
    Tensor& out = outputs.at("out");
    const int64_t K = p.K, N = p.N;
    const size_t in_bytes = dtype_size(p.lhs_dtype), out_bytes = dtype_size(p.out_dtype);
    // dnnl::memory wants non-const handles; the primitive only reads src and weights.
    char* lhs_data = static_cast<char*>(const_cast<void*>(lhs.raw()));
    char* rhs_data = static_cast<char*>(const_cast<void*>(rhs.raw()));
    char* out_data = static_cast<char*>(out.raw());
    // Rows past the group sum are zero (all-zero bits are +0 in f32 and bf16); with K = 0 every
    // row is an empty sum, which is not worth a primitive.
    const int64_t first_zero_row = K == 0 ? 0 : p.rows();
    std::memset(out_data + first_zero_row * N * out_bytes, 0,
                static_cast<size_t>((p.M - first_zero_row) * N) * out_bytes);
    if (K == 0 || N == 0) return;

    const dt in_type = onednn_type(p.lhs_dtype), out_type = onednn_type(p.out_dtype);
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = p.group_sizes[g], row0 = p.group_starts[g];
      if (m_g == 0) continue;
      const dnnl::matmul matmul = primitive({m_g, K, N, in_type, out_type});
      // Wrap the caller's buffers in place: no copies, plain row-major layouts.
      dnnl::memory src(cpu::onednn_plain_desc(m_g, K, in_type), engine,
                       lhs_data + row0 * K * in_bytes);
      dnnl::memory weights(cpu::onednn_plain_desc(K, N, in_type), engine,
                           rhs_data + g * K * N * in_bytes);
      dnnl::memory dst(cpu::onednn_plain_desc(m_g, N, out_type), engine,
                       out_data + row0 * N * out_bytes);
      matmul.execute(stream,
                     {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    }
    stream.wait();
  }

 private:
  // Each group's matmul into an f32 scratch, then the epilogue pass and the rounding.
  void run_composite(const RaggedDotProblem& p, const TensorMap& inputs, TensorMap& outputs) const {
    const int64_t K = p.K, N = p.N, out_N = p.out_N();
    const size_t in_bytes = dtype_size(p.lhs_dtype), out_bytes = dtype_size(p.out_dtype);
    char* lhs_data = static_cast<char*>(const_cast<void*>(inputs.at("lhs").raw()));
    char* rhs_data = static_cast<char*>(const_cast<void*>(inputs.at("rhs").raw()));
    char* out_data = static_cast<char*>(outputs.at("out").raw());
    // The other shards' rows and those past the group sum are zero (zero_initialize).
    if (p.zero_initialize) {
      std::memset(out_data, 0, static_cast<size_t>(p.first_row() * out_N) * out_bytes);
      std::memset(out_data + p.rows() * out_N * out_bytes, 0,
                  static_cast<size_t>((p.M - p.rows()) * out_N) * out_bytes);
    }
    if (N == 0) return;
    const RaggedDotEpilogue epilogue(p, p.has_bias ? &inputs.at("rhs_bias") : nullptr);
    // int8: lhs quantized per row (the shared quantize_row_int8) into s8, once per call; the
    // matmul applies rhs_scale per column and the pass below each row's scale.
    const bool int8 = p.quantized();
    const dt in_type = int8 ? dt::s8 : onednn_type(p.lhs_dtype);
    thread_local std::vector<int8_t> codes;
    thread_local std::vector<float> row_scales, column_scales;
    if (int8) {
      codes.resize(static_cast<size_t>(p.M * K));
      row_scales.assign(static_cast<size_t>(p.M), 0.0f);
      column_scales.resize(static_cast<size_t>(p.G * N));
      const Tensor& scale = inputs.at("rhs_scale");
      for (int64_t i = 0; i < p.G * N; ++i) column_scales[i] = static_cast<float>(scale.get(i));
      // The shared quantization (scale_blocks is 1 here: one scale per row).
      quantize_lhs_int8(p, inputs.at("lhs"), 0, codes.data(), row_scales.data());
      lhs_data = reinterpret_cast<char*>(codes.data());
    }
    const size_t src_bytes = int8 ? 1 : in_bytes;
    const dnnl::engine& engine = cpu::onednn_engine();
    dnnl::stream stream(engine);
    // Grow-only scratch, reused across calls: first-touch page faults of a fresh buffer would
    // be charged to the baseline on every call.
    thread_local cpu::ScratchBuffer scratch;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = p.group_sizes[g], row0 = p.group_starts[g];
      if (m_g == 0) continue;
      float* y = scratch.floats(static_cast<size_t>(m_g * N));
      if (K == 0) {
        std::memset(y, 0, static_cast<size_t>(m_g * N) * sizeof(float));
      } else {
        const dnnl::matmul matmul = primitive({m_g, K, N, in_type, dt::f32});
        dnnl::memory src(cpu::onednn_plain_desc(m_g, K, in_type), engine,
                         lhs_data + row0 * K * src_bytes);
        dnnl::memory weights(cpu::onednn_plain_desc(K, N, in_type), engine,
                             rhs_data + g * K * N * (int8 ? 1 : in_bytes));
        dnnl::memory dst(cpu::onednn_plain_desc(m_g, N, dt::f32), engine, y);
        std::unordered_map<int, dnnl::memory> args = {
            {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
        if (int8) {
          args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES,
                       dnnl::memory({{N}, dt::f32, tag::a}, engine, column_scales.data() + g * N));
        }
        matmul.execute(stream, args);
        stream.wait();
      }
      char* out_rows = out_data + row0 * out_N * static_cast<int64_t>(out_bytes);
      const float* row_scales_data = row_scales.data();
      const bool gate_up = p.gate_up != GateUp::kNone;
      cpu::parallel_for((m_g + kEpilogueRows - 1) / kEpilogueRows, 0, [&](int64_t task, int) {
        const int64_t r0 = task * kEpilogueRows, r1 = std::min(m_g, r0 + kEpilogueRows);
        for (int64_t r = r0; r < r1; ++r) {
          float* row = y + r * N;
          if (int8) {
            const float s = row_scales_data[row0 + r];
            for (int64_t n = 0; n < N; ++n) row[n] *= s;
          }
          epilogue.row(g, 0, out_N, row, gate_up ? row + out_N : nullptr);
        }
        store_rows(y + r0 * N, N, r1 - r0, out_N, p.out_dtype,
                   out_rows + r0 * out_N * static_cast<int64_t>(out_bytes), out_N);
      });
    }
  }

  // The primitive of one group shape, created on first use.
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [m_g, K, N, in_type, out_type] = key;
      const dnnl::matmul::desc desc(cpu::onednn_plain_desc(m_g, K, in_type),
                                    cpu::onednn_plain_desc(K, N, in_type),
                                    cpu::onednn_plain_desc(m_g, N, out_type));
      dnnl::primitive_attr attr;
      // int8: per-column output scales given at run time (mask: dim 1 of dst [m_g, N]).
      if (in_type == dt::s8) attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
      return create_onednn(
          "matmul for m_g=" + std::to_string(m_g) + ", K=" + std::to_string(K) +
              ", N=" + std::to_string(N),
          [&] {
            return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu::onednn_engine()));
          });
    });
  }

  mutable cpu::OneDnnPrimitiveCache<MatmulKey, dnnl::matmul> primitives_{kMaxCachedPrimitives};
};

}  // namespace

const Implementation& ragged_dot_onednn_implementation() {
  static const OneDnnRaggedDot impl;
  return impl;
}

}  // namespace tokamax
