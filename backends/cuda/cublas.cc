// cuBLAS through dlopen (libcublas.so.13), a handle per device and process on the device's
// stream, and the row-major calls of the vendor baselines.
#include "backends/cuda/cublas.h"

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_device.h"

namespace tokamax::cuda {
namespace {

using ::tokamax::cuda::check;  // the CUDA runtime's, beside the cuBLAS status overload below

constexpr const char* kSoname = "libcublas.so.13";

// The entry points by their C signatures (cublas_api.h; the C++ header also declares inline
// overloads of some names, so decltype of the name would be ambiguous).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
using GroupedGemmEx = cublasStatus_t (*)(cublasHandle_t, const cublasOperation_t[],
                                         const cublasOperation_t[], const int[], const int[],
                                         const int[], const void*, const void* const[],
                                         cudaDataType_t, const int[], const void* const[],
                                         cudaDataType_t, const int[], const void*, void* const[],
                                         cudaDataType_t, const int[], int, const int[],
                                         cublasComputeType_t);

struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*version)(cublasHandle_t, int*) = nullptr;
  GemmEx gemm_ex = nullptr;
  GroupedGemmEx grouped = nullptr;
  const char* (*status_name)(cublasStatus_t) = nullptr;
  std::string error;  // why loading failed; "" when it did not
};

const Cublas& library() {
  static const Cublas cublas = [] {
    Cublas c;
    void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      c.error = std::string(kSoname) + " not found" + (why ? std::string(": ") + why : "");
      return c;
    }
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (fn == nullptr && c.error.empty()) c.error = std::string(kSoname) + " lacks " + symbol;
    };
    load(c.create, "cublasCreate_v2");
    load(c.set_stream, "cublasSetStream_v2");
    load(c.version, "cublasGetVersion_v2");
    load(c.gemm_ex, "cublasGemmEx");
    load(c.grouped, "cublasGemmGroupedBatchedEx");
    load(c.status_name, "cublasGetStatusName");
    return c;
  }();
  return cublas;
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  check_context(what);  // a kernel before it faulted: the device is lost, not just this call
  const Cublas& c = library();
  const std::string message =
      std::string("cuBLAS ") + what + ": " +
      (c.status_name ? c.status_name(status) : "status " + std::to_string(status));
  // The library's "not for these types or this device" is a decline, not an error.
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) throw CublasNotSupported(message);
  throw std::runtime_error(message);
}

cudaDataType data_type(Element element) {
  switch (element) {
    case Element::kF32:
      return CUDA_R_32F;
    case Element::kF16:
      return CUDA_R_16F;
    case Element::kBF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// One handle per device, bound to the device's stream.
cublasHandle_t handle_for(const Device& device) {
  static std::mutex mutex;
  static std::map<const Device*, cublasHandle_t> handles;
  const Cublas& c = library();
  if (!c.error.empty()) throw std::runtime_error(c.error);
  std::lock_guard<std::mutex> lock(mutex);
  cublasHandle_t& handle = handles[&device];
  if (handle == nullptr) {
    check(cudaSetDevice(ordinal(device)), "cudaSetDevice");
    check(c.create(&handle), "cublasCreate");
    check(c.set_stream(handle, static_cast<cudaStream_t>(stream(device))), "cublasSetStream");
  }
  return handle;
}

}  // namespace

const std::string& cublas_unavailable() { return library().error; }

std::string cublas_description() {
  const Cublas& c = library();
  if (!c.error.empty()) return c.error;
  int version = 0;
  if (!devices().empty()) c.version(handle_for(*devices().front()), &version);
  return "cuBLAS " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
         "." + std::to_string(version % 100) + " (" + kSoname + ")";
}

void gemm(const Device& device, Element in, Element out, int m, int n, int k, const void* a,
          int lda, const void* b, int ldb, void* c, int ldc, bool transpose_a, bool transpose_b) {
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS's (m, n, k) are
  // (n, m, k) with B first. A row-major matrix read column-major is its transpose, so a stored
  // B [k, n] is already op(B)^T (no transpose) and a stored B [n, k] (transpose_b) needs one;
  // likewise A.
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(library().gemm_ex(handle_for(device), op_b, op_a, n, m, k, &alpha, b, data_type(in), ldb,
                          a, data_type(in), lda, &beta, c, data_type(out), ldc,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

double measure_cublas_gemm_gflops(const Device& device, Element in, int n, int repetitions) {
  if (!library().error.empty() || n <= 0) return 0.0;
  const size_t bytes = static_cast<size_t>(n) * n * 2;  // 16-bit elements
  void* buffers[3] = {nullptr, nullptr, nullptr};
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0.0;
  try {
    check(cudaSetDevice(ordinal(device)), "cudaSetDevice");
    for (void*& p : buffers) {
      check(cudaMalloc(&p, bytes), "cudaMalloc");
      check(cudaMemset(p, 0, bytes), "cudaMemset");  // zeros: no denormal or NaN slow paths
    }
    const auto s = static_cast<cudaStream_t>(stream(device));
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    gemm(device, in, in, n, n, n, buffers[0], n, buffers[1], n, buffers[2], n);  // warm-up
    for (int r = 0; r < repetitions; ++r) {
      check(cudaEventRecord(start, s), "cudaEventRecord");
      gemm(device, in, in, n, n, n, buffers[0], n, buffers[1], n, buffers[2], n);
      check(cudaEventRecord(stop, s), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (ms > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / (ms * 1e6));
    }
  } catch (const std::exception&) {
    best = 0.0;  // the ceiling then stays the mma.sync one
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  for (void* p : buffers) {
    if (p != nullptr) cudaFree(p);
  }
  return best;
}

void grouped_gemm(const Device& device, Element in, Element out, int n, int k,
                  const std::vector<GemmGroup>& groups) {
  std::vector<const void*> a, b;
  std::vector<void*> c;
  std::vector<int> m_array, n_array, k_array, lda, ldb, ldc, group_size;
  std::vector<cublasOperation_t> trans;
  std::vector<float> alpha, beta;
  for (const GemmGroup& g : groups) {
    if (g.m == 0) continue;
    // Column-major view, as in gemm(): (n, m, k) with B first.
    a.push_back(g.b);
    b.push_back(g.a);
    c.push_back(g.c);
    m_array.push_back(n);
    n_array.push_back(g.m);
    k_array.push_back(k);
    lda.push_back(n);
    ldb.push_back(k);
    ldc.push_back(n);
    group_size.push_back(1);
    trans.push_back(CUBLAS_OP_N);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
  }
  const int count = static_cast<int>(group_size.size());
  if (count == 0) return;
  // The device arrays of pointers: A, B, C one after the other. The copy from pageable memory
  // returns once the host array is staged, and stream order keeps the scratch in use until the
  // call's kernels have read it.
  const size_t bytes = 3 * count * sizeof(void*);
  const std::lock_guard<std::mutex> lock(scratch_mutex(device));
  void** pointers = static_cast<void**>(scratch(device, bytes));
  std::vector<const void*> host(3 * count);
  for (int i = 0; i < count; ++i) {
    host[i] = a[i];
    host[count + i] = b[i];
    host[2 * count + i] = c[i];
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream(device));
  check(cudaMemcpyAsync(pointers, host.data(), bytes, cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync");
  check(library().grouped(handle_for(device), trans.data(), trans.data(), m_array.data(),
                          n_array.data(), k_array.data(), alpha.data(),
                          reinterpret_cast<const void* const*>(pointers), data_type(in), lda.data(),
                          reinterpret_cast<const void* const*>(pointers + count), data_type(in),
                          ldb.data(), beta.data(), pointers + 2 * count, data_type(out), ldc.data(),
                          count, group_size.data(), CUBLAS_COMPUTE_32F),
        "cublasGemmGroupedBatchedEx");
}

}  // namespace tokamax::cuda
