// ragged_dot: the oneMKL baseline ("mkl"), one cblas_sgemm (or cblas_gemm_bf16bf16f32) per
// non-empty group (blas_groups.h), oneMKL loaded from the pinned wheel (mkl_loader.h).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/mkl_loader.h"
#include "backends/cpu/openblas_loader.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/blas_groups.h"

namespace tokamax {
namespace {

class MklRaggedDot final : public TypedImplementation<RaggedDotProblem, BlasRaggedDotConfig> {
 public:
  std::string_view name() const override { return "mkl"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override { return cpu::mkl_describe(); }

  Support supported_on(const Device& device) const override {
    return mkl_support(Implementation::supported_on(device));
  }

  // A precision preset runs as MKL's gemms on the preset's pieces (RaggedDotProblem::computed:
  // bf16 pieces on cblas_gemm_bf16bf16f32, tf32 values on sgemm). MKL's own BF16X3 compute mode
  // (MKL_BLAS_COMPUTE_MODE) is process-wide and read once, and left sgemm's result unchanged on
  // a CPU without AMX (docs/precision.md), so it cannot serve a per-call argument.
  void check(const RaggedDotProblem& p, const Device&) const override {
    require_mkl();
    check_blas_ragged_dot(p.computed(), std::string(name()), /*has_bf16=*/true, "");
  }

  void check_config(const RaggedDotProblem&, const BlasRaggedDotConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }

  // A vendor baseline runs as it ships: all cores.
  BlasRaggedDotConfig heuristics_config(const RaggedDotProblem&, const Device&) const override {
    return {};
  }

  std::vector<BlasRaggedDotConfig> autotuning_configs(const RaggedDotProblem&,
                                                      const Device& device) const override {
    return blas_autotuning_configs(device);
  }

  void run(const RaggedDotProblem& given, const BlasRaggedDotConfig& config, const Device& device,
           const TensorMap& given_inputs, TensorMap& outputs) const override {
    check(given, device);
    const RaggedDotProblem p = given.computed();
    const TensorMap inputs = expand_precision_operands(given, given_inputs);
    const cpu::Mkl& mkl = require_mkl();
    const auto threads = cpu::mkl_threads(
        mkl, config.num_threads > 0 ? config.num_threads : cpu::cpu_info(device).cores);
    BlasGemms gemms;
    gemms.f32 = [&](int M, int N, int K, const float* a, int lda, const float* b, int ldb, float* c,
                    int ldc) {
      mkl.cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, M, N, K, 1.0f, a,
                      lda, b, ldb, 0.0f, c, ldc);
    };
    gemms.bf16 = [&](int M, int N, int K, const uint16_t* a, int lda, const uint16_t* b, int ldb,
                     float* c, int ldc) {
      mkl.cblas_gemm_bf16bf16f32(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, M, N,
                                 K, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
    };
    run_blas_ragged_dot(p, gemms, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
  }
};

}  // namespace

const Implementation& ragged_dot_mkl_implementation() {
  static const MklRaggedDot impl;
  return impl;
}

}  // namespace tokamax
