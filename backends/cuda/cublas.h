// cuBLAS for the vendor baselines, loaded at run time: the binary starts without libcublas, and
// the baselines are then unsupported with the reason. Row-major interface, f32 accumulation, on
// the device's stream; no CUDA header needed to include this (built with the CUDA backend only).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cuda/element.h"
#include "backends/device.h"

namespace tokamax::cuda {

// CUBLAS_STATUS_NOT_SUPPORTED: cuBLAS declines these types or this device (a baseline reports
// it as unsupported, not as an error); other failures are std::runtime_error.
class CublasNotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "" when libcublas.so.13 loaded and has what the baselines call; otherwise why not.
const std::string& cublas_unavailable();
// "cuBLAS 13.1.0 (libcublas.so.13)".
std::string cublas_description();

// C[m, n] = op(A) @ op(B), all row-major with leading dimensions lda, ldb, ldc (elements, the
// row strides of what is stored): A stored [m, k] (transpose_a: stored [k, m], op(A) its
// transpose), B stored [k, n] (transpose_b: stored [n, k]). A and B of `in`, C of `out`,
// accumulated in f32 (cublasGemmEx), on `device`'s stream. Throws CublasNotSupported or
// std::runtime_error with cuBLAS's status name.
void gemm(const Device& device, Element in, Element out, int m, int n, int k, const void* a,
          int lda, const void* b, int ldb, void* c, int ldc, bool transpose_a = false,
          bool transpose_b = false);

// One row-major C_i[m_i, n] = A_i[m_i, k] @ B_i[k, n] per entry (cublasGemmGroupedBatchedEx), with
// the pointer arrays copied to the device first: the copy is part of the call, as for any user of
// the API. Entries of m_i = 0 are dropped.
struct GemmGroup {
  int m = 0;
  const void* a = nullptr;  // [m, k], row stride k
  const void* b = nullptr;  // [k, n], row stride n
  void* c = nullptr;        // [m, n], row stride n
};
void grouped_gemm(const Device& device, Element in, Element out, int n, int k,
                  const std::vector<GemmGroup>& groups);

// The rate of one n x n x n cublasGemmEx with `in` inputs and outputs and f32 accumulation (what
// wgmma reaches on Hopper: mma.sync chains measure about 2/3 of it), best of `repetitions` timed
// calls after a warm-up, in GFLOP/s; 0 when cuBLAS or the memory is not there. For the device's
// tensor-core ceiling.
double measure_cublas_gemm_gflops(const Device& device, Element in, int n, int repetitions);

}  // namespace tokamax::cuda
