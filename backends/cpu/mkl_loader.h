// oneMKL loaded lazily with dlopen, from the pinned wheel scripts/install_deps.sh unpacks
// (.deps/mkl/lib), for the `mkl` vendor baselines.
//
// Not linked: the kernel library and its installed package stay free of a 500 MB dependency,
// and a build without the wheel still builds and says why the baselines are unavailable. The
// threading layer is chosen before the first call: GNU OpenMP (libgomp, the compiler's own
// runtime) rather than Intel's, so no second OpenMP runtime enters the process.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace tokamax::cpu {

// The oneMKL entry points the baselines use (LP64: 32-bit integers, as the loader sets the
// interface layer). The CBLAS enum values are kCblasRowMajor / kCblasNoTrans
// (openblas_loader.h); MKL_BF16 is the raw 16 bits of a bf16.
struct Mkl {
  using Sgemm = void (*)(int layout, int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);
  using GemmBf16 = void (*)(int layout, int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                            float* c, int ldc);

  // MKL's grouped batch: group_count groups of group_size[i] gemms sharing the i-th entry of
  // every *_array (transposes as CBLAS enum values), a/b/c one pointer per gemm, in order.
  using SgemmBatch = void (*)(int layout, const int* trans_a, const int* trans_b, const int* m,
                              const int* n, const int* k, const float* alpha, const float** a,
                              const int* lda, const float** b, const int* ldb, const float* beta,
                              float** c, const int* ldc, int group_count, const int* group_size);

  Sgemm cblas_sgemm = nullptr;
  SgemmBatch cblas_sgemm_batch = nullptr;
  GemmBf16 cblas_gemm_bf16bf16f32 = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*get_max_threads)() = nullptr;

  std::string threading;  // "GNU OpenMP", or "sequential" (TOKAMAX_MKL_THREADING=sequential)
  std::string path;       // what was dlopen()ed
  std::string version;    // MKL_Get_Version_String()
  std::string error;      // why loading failed; empty on success
};

// Where the loader looks: $TOKAMAX_MKL_LIBRARY when set, else libmkl_rt.so.3 in the folder the
// build was configured with (.deps/mkl/lib).
std::string mkl_library_path();

// dlopen()s `path`, sets the LP64 interface and the GNU threading layer (the sequential one with
// TOKAMAX_MKL_THREADING=sequential: the sanitizer suite's, whose LeakSanitizer crashes scanning
// MKL's OpenMP threads at exit, scripts/test_sanitized.sh), and resolves the entry points.
// Never throws; failures are described in `error`. For tests: use mkl() instead.
Mkl load_mkl(const std::string& path);

// The process-wide oneMKL, loaded on first use; nullptr when it cannot be loaded, with the reason
// in mkl_error().
const Mkl* mkl();
const std::string& mkl_error();

// oneMKL's thread count is process-global: sets it to `threads` and returns the lock that keeps
// it so until the caller's calls are done, so that concurrent runs each get what they asked for.
std::unique_lock<std::mutex> mkl_threads(const Mkl& mkl, int threads);

// What records say about the library: version and threading, or why it is unavailable.
nlohmann::json mkl_describe();

}  // namespace tokamax::cpu
