// gated_linear_unit: the vendor composite's chunk loop and epilogue (composite.h).
#include "ops/gated_linear_unit/composite.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/pack.h"

namespace tokamax {
namespace {

// Rows of the epilogue's tasks on our pool.
constexpr int64_t kEpilogueRows = 64;

}  // namespace

void run_glu_composite(const GluProblem& p, int64_t chunk_rows, const GluCompositeMatmul& matmul,
                       const TensorMap& inputs, TensorMap& outputs) {
  const int64_t M = p.M, K = p.K, N = p.N;
  Tensor& out = outputs.at("out");
  const int64_t x_bytes = static_cast<int64_t>(dtype_size(p.x_dtype));
  char* out_data = static_cast<char*>(out.raw());
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sums: act(0) * 0 = 0 for every activation (all-zero bits are +0)
    std::memset(out_data, 0, out.size_bytes());
    return;
  }
  const char* x_data = static_cast<const char*>(inputs.at("x").raw());
  const GluWeights w = glu_weights(p, inputs);
  const int64_t mc =
      std::clamp<int64_t>(chunk_rows > 0 ? chunk_rows : kGluCompositeChunkElements / (2 * N), 1, M);
  // Grow-only scratch, reused across calls: a bench calls back to back, and first-touch page
  // faults on a fresh buffer would be charged to the baseline.
  thread_local cpu::ScratchBuffer scratch;
  float* y = scratch.floats(static_cast<size_t>(mc * 2 * N));
  for (int64_t m0 = 0; m0 < M; m0 += mc) {
    const int64_t rows = std::min(mc, M - m0);
    const char* x_chunk = x_data + m0 * K * x_bytes;
    if (p.fused_weights) {
      matmul(rows, 2 * N, x_chunk, w.gate, y, 2 * N);
    } else {
      matmul(rows, N, x_chunk, w.gate, y, 2 * N);
      matmul(rows, N, x_chunk, w.proj, y + N, 2 * N);
    }
    // act(Y[:, :N]) * Y[:, N:], in place over the gate half, then rounded to x's dtype.
    const Activation activation = p.activation;
    const DType out_dtype = p.x_dtype;
    char* out_chunk = out_data + m0 * N * x_bytes;
    cpu::parallel_for((rows + kEpilogueRows - 1) / kEpilogueRows, 0, [&](int64_t task, int) {
      const int64_t r0 = task * kEpilogueRows, r1 = std::min(rows, r0 + kEpilogueRows);
      for (int64_t r = r0; r < r1; ++r) {
        float* gate = y + r * 2 * N;
        cpu_glu_row(activation, gate, gate + N, gate, N);
      }
      store_rows(y + r0 * 2 * N, 2 * N, r1 - r0, N, out_dtype, out_chunk + r0 * N * x_bytes, N);
    });
  }
}

}  // namespace tokamax
