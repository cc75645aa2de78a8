// ragged_dot's oneDNN baseline for the other dimension numbers.
#include "ops/ragged_dot/onednn_general.h"

#include <cstring>
#include <string>
#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;

// m, k, n, input, output, src transposed, weights transposed.
using GeneralKey = std::tuple<int64_t, int64_t, int64_t, dt, dt, bool, bool>;
constexpr size_t kMaxCachedPrimitives = 4096;

dt onednn_type(DType dtype) { return dtype == DType::kBF16 ? dt::bf16 : dt::f32; }

// [rows, cols] row-major, or stored transposed ([cols, rows] row-major: strides {1, rows}).
dnnl::memory::desc desc(int64_t rows, int64_t cols, dt type, bool transposed) {
  return transposed ? dnnl::memory::desc({rows, cols}, type, {1, rows})
                    : cpu::onednn_plain_desc(rows, cols, type);
}

dnnl::matmul primitive(const GeneralKey& key) {
  static cpu::OneDnnPrimitiveCache<GeneralKey, dnnl::matmul> cache{kMaxCachedPrimitives};
  return cache.get(key, [&] {
    const auto& [m, k, n, in, out, a_t, b_t] = key;
    const dnnl::matmul::desc d(desc(m, k, in, a_t), desc(k, n, in, b_t),
                               cpu::onednn_plain_desc(m, n, out));
    return create_onednn(
        "matmul for M=" + std::to_string(m) + ", K=" + std::to_string(k) +
            ", N=" + std::to_string(n) + (a_t ? " (src transposed)" : "") +
            (b_t ? " (weights transposed)" : ""),
        [&] { return dnnl::matmul(dnnl::matmul::primitive_desc(d, cpu::onednn_engine())); });
  });
}

}  // namespace

void run_onednn_general(const RaggedDotProblem& p, const TensorMap& inputs, TensorMap& outputs) {
  const bool contracting = p.dims == RaggedDims::kRaggedContracting;
  const int64_t M = p.M, K = p.K, N = p.N;
  const size_t in_bytes = dtype_size(p.lhs_dtype), out_bytes = dtype_size(p.out_dtype);
  // dnnl::memory wants non-const handles; the primitive only reads src and weights.
  char* lhs = static_cast<char*>(const_cast<void*>(inputs.at("lhs").raw()));
  char* rhs = static_cast<char*>(const_cast<void*>(inputs.at("rhs").raw()));
  char* out = static_cast<char*>(outputs.at("out").raw());
  if (!contracting) {  // rows outside the groups (and every row of an empty sum) are zero
    const int64_t first_zero = K == 0 ? 0 : p.rows();
    std::memset(out, 0, static_cast<size_t>(p.first_row() * N) * out_bytes);
    std::memset(out + first_zero * N * out_bytes, 0,
                static_cast<size_t>((M - first_zero) * N) * out_bytes);
    if (K == 0) return;
  }
  if (N == 0 || M == 0) return;
  const dt in = onednn_type(p.lhs_dtype), out_type = onednn_type(p.out_dtype);
  const dnnl::engine& engine = cpu::onednn_engine();
  dnnl::stream stream(engine);
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t size = p.group_sizes[g], start = p.group_starts[g];
    if (contracting) {
      char* dst = out + g * M * N * static_cast<int64_t>(out_bytes);
      if (size == 0) {
        std::memset(dst, 0, static_cast<size_t>(M * N) * out_bytes);
        continue;
      }
      // lhs_g^T [M, k_g] read from lhs [K, M] rows [start, start + k_g); rhs_g [k_g, N].
      const dnnl::matmul matmul = primitive({M, size, N, in, out_type, true, false});
      dnnl::memory a(desc(M, size, in, true), engine, lhs + start * M * in_bytes);
      dnnl::memory b(desc(size, N, in, false), engine, rhs + start * N * in_bytes);
      dnnl::memory c(cpu::onednn_plain_desc(M, N, out_type), engine, dst);
      matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      continue;
    }
    if (size == 0) continue;
    // trans_rhs: rhs[g] stored [N, K], read as [K, N] with strides {1, K}.
    const dnnl::matmul matmul = primitive({size, K, N, in, out_type, false, true});
    dnnl::memory a(desc(size, K, in, false), engine, lhs + start * K * in_bytes);
    dnnl::memory b(desc(K, N, in, true), engine, rhs + g * N * K * in_bytes);
    dnnl::memory c(cpu::onednn_plain_desc(size, N, out_type), engine,
                   out + start * N * static_cast<int64_t>(out_bytes));
    matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  }
  stream.wait();
}

}  // namespace tokamax
