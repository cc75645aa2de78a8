// gated_linear_unit: the oneMKL baseline ("mkl"): cblas_sgemm or cblas_gemm_bf16bf16f32 of x with
// the weights viewed as [K, 2N], then the activation and the product in our own loop
// (composite.h), oneMKL loaded from the pinned wheel (backends/cpu/mkl_loader.h).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features; W = weights viewed as [K, 2N] (gate columns 0..N-1, projection N..)
#include <climits>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/mkl_loader.h"
#include "backends/cpu/openblas_loader.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/composite.h"

namespace tokamax {
namespace {

struct MklGluConfig {
  int num_threads = 0;     // 0 = all cores; MKL_Set_Num_Threads before the calls
  int64_t chunk_rows = 0;  // rows of x per gemm; 0 = kGluCompositeChunkElements / 2N

  void validate() const {
    require_config(num_threads >= 0, "num_threads", [&] {
      return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
    });
    require_config(chunk_rows >= 0, "chunk_rows", [&] {
      return "chunk_rows is " + std::to_string(chunk_rows) + "; expected >= 0 (0 = automatic)";
    });
  }
  template <class V>
  void visit(V&& v) {
    v("chunk_rows", chunk_rows);
    v("num_threads", num_threads);
  }
};

class MklGatedLinearUnit final : public TypedImplementation<GluProblem, MklGluConfig> {
 public:
  std::string_view name() const override { return "mkl"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::mkl_describe();
    description["epilogue"] = std::string("tokamax cpu_glu_row (") + cpu::simd_target_name() + ")";
    return description;
  }

  Support supported_on(const Device& device) const override {
    return mkl_support(Implementation::supported_on(device));
  }

  void check(const GluProblem& p, const Device&) const override {
    if (!p.precision_plan().identity()) {
      throw NotImplemented("mkl: precision=" + std::string(precision_name(p.precision)) +
                           "; the composite multiplies the operands as given");
    }
    require_mkl();
    const std::string x(dtype_name(p.x_dtype)), w(dtype_name(p.w_dtype));
    if (p.x_dtype != p.w_dtype) {
      throw NotImplemented("mkl: x is " + x + " but weights are " + w +
                           "; the baseline wires one input dtype");
    }
    if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
      throw NotImplemented("mkl: " + x + " inputs; the baseline wires f32 and bf16 only");
    }
    if (p.M > INT_MAX || p.K > INT_MAX || 2 * p.N > INT_MAX) {
      throw NotImplemented("mkl: extents exceed the 32-bit BLAS integer");
    }
  }

  void check_config(const GluProblem&, const MklGluConfig& c, const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }

  void run(const GluProblem& p, const MklGluConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const cpu::Mkl& mkl = require_mkl();
    const auto threads = cpu::mkl_threads(
        mkl, config.num_threads > 0 ? config.num_threads : cpu::cpu_info(device).cores);
    const int K = static_cast<int>(p.K);
    const bool bf16 = p.x_dtype == DType::kBF16;
    run_glu_composite(
        p, config.chunk_rows,
        [&](int64_t rows, int64_t cols, const void* x, const void* w, float* y, int64_t ld_y) {
          const int m = static_cast<int>(rows), n = static_cast<int>(cols);
          if (bf16) {
            mkl.cblas_gemm_bf16bf16f32(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans,
                                       m, n, K, 1.0f, static_cast<const uint16_t*>(x), K,
                                       static_cast<const uint16_t*>(w), n, 0.0f, y,
                                       static_cast<int>(ld_y));
          } else {
            mkl.cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, m, n, K,
                            1.0f, static_cast<const float*>(x), K, static_cast<const float*>(w), n,
                            0.0f, y, static_cast<int>(ld_y));
          }
        },
        inputs, outputs);
  }
};

}  // namespace

const Implementation& gated_linear_unit_mkl_implementation() {
  static const MklGatedLinearUnit impl;
  return impl;
}

}  // namespace tokamax
