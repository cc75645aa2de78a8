// ragged_dot on CPU: maybe_quantize_lhs's operands.
//
// Dimensions: as cpu_quantize_lhs.h.
#include "ops/ragged_dot/cpu_quantize_lhs.h"

#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"
#include "ops/ragged_dot/quantize.h"

namespace tokamax {
namespace {

// Runs fn(row, x) for every owned row on the pool, x the row as f32 (a per-thread buffer).
template <typename Fn>
void for_each_owned_row(const RaggedDotProblem& p, const Tensor& lhs, int num_threads,
                        const Fn& fn) {
  const int64_t K = p.K, first = p.first_row();
  dispatch_float(p.lhs_dtype, [&](auto lhs_type) {
    using L = decltype(lhs_type);
    const L* data = lhs.data<L>();
    cpu::parallel_for(p.owned_rows(), num_threads, [&](int64_t i, int) {
      thread_local std::vector<float> x;
      x.resize(static_cast<size_t>(K));
      const int64_t row = first + i;
      const L* src = data + row * K;
      for (int64_t k = 0; k < K; ++k) x[k] = static_cast<float>(to_double(src[k]));
      fn(row, x.data());
    });
  });
}

}  // namespace

void quantize_lhs_codes(const RaggedDotProblem& p, const Tensor& lhs, int num_threads, int64_t Kq,
                        uint8_t* codes, float* scales) {
  const int64_t K = p.K, bk = p.block_k(), blocks = p.scale_blocks, first = p.first_row();
  if ((p.lhs_dtype == DType::kBF16 || p.lhs_dtype == DType::kF32) && int8_vnni_available()) {
    // bf16 / f32 rows straight into the operand, vectorized (the same codes and scales).
    const char* data = static_cast<const char*>(lhs.raw());
    const size_t row_bytes = static_cast<size_t>(K) * dtype_size(p.lhs_dtype);
    const bool bf16 = p.lhs_dtype == DType::kBF16;
    cpu::parallel_for(p.owned_rows(), num_threads, [&](int64_t i, int) {
      const int64_t row = first + i;
      quantize_row_u8(data + row * row_bytes, bf16, K, bk, codes + i * Kq, scales + i * blocks);
    });
    return;
  }
  for_each_owned_row(p, lhs, num_threads, [&](int64_t row, const float* x) {
    thread_local std::vector<int8_t> q;
    q.resize(static_cast<size_t>(K));
    quantize_row_int8(x, K, bk, q.data(), scales + (row - first) * blocks);
    uint8_t* dst = codes + (row - first) * Kq;
    for (int64_t k = 0; k < K; ++k) dst[k] = static_cast<uint8_t>(q[k] + 128);
  });
}

void quantize_lhs_int8(const RaggedDotProblem& p, const Tensor& lhs, int num_threads, int8_t* codes,
                       float* scales) {
  const int64_t K = p.K, bk = p.block_k(), blocks = p.scale_blocks;
  for_each_owned_row(p, lhs, num_threads, [&](int64_t row, const float* x) {
    quantize_row_int8(x, K, bk, codes + row * K, scales + row * blocks);
  });
}

void quantize_lhs_values(const RaggedDotProblem& p, const Tensor& lhs, int num_threads,
                         float* values) {
  const int64_t K = p.K, bk = p.block_k(), blocks = p.scale_blocks;
  for_each_owned_row(p, lhs, num_threads, [&](int64_t row, const float* x) {
    thread_local std::vector<float> scales;
    scales.resize(static_cast<size_t>(blocks));
    quantize_row_values(p.rhs_dtype, x, K, bk, values + row * K, scales.data());
  });
}

}  // namespace tokamax
