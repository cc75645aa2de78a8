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
#include <cstring>
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// One primitive per distinct group shape: MoE routing repeats a handful of m_g values across
// calls.
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, dt, dt>;  // m_g, K, N, input, output
// Past this many shapes (a long tune over many workloads) the cache starts over rather than grow.
constexpr size_t kMaxCachedPrimitives = 4096;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

class OneDnnRaggedDot final : public TypedImplementation<RaggedDotProblem> {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override { return cpu::onednn_describe(); }

  void check(const RaggedDotProblem& p, const Device&) const override {
    require_plain_ragged_dot(p, name());
    const std::string lhs(dtype_name(p.lhs_dtype)), rhs(dtype_name(p.rhs_dtype));
    const std::string out(dtype_name(p.out_dtype));
    if (p.lhs_dtype != p.rhs_dtype) {
      throw NotImplemented("onednn: lhs is " + lhs + " but rhs is " + rhs +
                           "; the baseline wires one input dtype");
    }
    const bool f32 = p.lhs_dtype == DType::kF32 && p.out_dtype == DType::kF32;
    const bool bf16 =
        p.lhs_dtype == DType::kBF16 && (p.out_dtype == DType::kF32 || p.out_dtype == DType::kBF16);
    if (!f32 && !bf16) {
      throw NotImplemented("onednn: " + lhs + " inputs with a " + out +
                           " output; the baseline wires f32->f32 and bf16->f32/bf16 only" +
                           (p.lhs_dtype == DType::kF64 ? " (oneDNN has no f64 matmul)" : ""));
    }
    // Ask the library rather than guess from the ISA: bf16 needs avx512_core in oneDNN 2.x.
    const std::string why =
        cpu::onednn_matmul_unavailable(onednn_type(p.lhs_dtype), onednn_type(p.out_dtype));
    if (!why.empty()) throw NotImplemented("onednn: " + lhs + "->" + out + " matmul: " + why);
  }

  void run(const RaggedDotProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
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
  // The primitive of one group shape, created on first use.
  dnnl::matmul primitive(const MatmulKey& key) const {
    return primitives_.get(key, [&] {
      const auto& [m_g, K, N, in_type, out_type] = key;
      const dnnl::matmul::desc desc(cpu::onednn_plain_desc(m_g, K, in_type),
                                    cpu::onednn_plain_desc(K, N, in_type),
                                    cpu::onednn_plain_desc(m_g, N, out_type));
      try {
        return dnnl::matmul(dnnl::matmul::primitive_desc(desc, cpu::onednn_engine()));
      } catch (const dnnl::error& e) {
        if (e.status == dnnl_unimplemented) {
          throw NotImplemented("onednn: no matmul for m_g=" + std::to_string(m_g) + ", K=" +
                               std::to_string(K) + ", N=" + std::to_string(N) + ": " + e.what());
        }
        throw;
      }
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
