// ragged_dot: the oneMKL baseline ("mkl"), one cblas_sgemm (or cblas_gemm_bf16bf16f32) per
// non-empty group (blas_groups.h), oneMKL loaded from the pinned wheel (mkl_loader.h).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
#include <mutex>
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

// MKL_Set_Num_Threads is process-global: held across setting it and the gemm calls, so that
// concurrent runs with different configs each get the thread count they asked for.
std::mutex& mkl_call_mutex() {
  static std::mutex mutex;
  return mutex;
}

const cpu::Mkl& loaded_mkl() {
  const cpu::Mkl* mkl = cpu::mkl();
  if (mkl == nullptr) throw NotImplemented("mkl: " + cpu::mkl_error());
  return *mkl;
}

class MklRaggedDot final : public TypedImplementation<RaggedDotProblem, BlasRaggedDotConfig> {
 public:
  std::string_view name() const override { return "mkl"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    const cpu::Mkl* mkl = cpu::mkl();
    if (mkl == nullptr) return {{"library", "oneMKL"}, {"error", cpu::mkl_error()}};
    return {{"library", "oneMKL"},
            {"version", mkl->version},
            {"path", mkl->path},
            {"threading", "GNU OpenMP"}};
  }

  Support supported_on(const Device& device) const override {
    Support support = Implementation::supported_on(device);
    if (support.ok && cpu::mkl() == nullptr) return {false, cpu::mkl_error()};
    return support;
  }

  void check(const RaggedDotProblem& p, const Device&) const override {
    loaded_mkl();
    check_blas_ragged_dot(p, std::string(name()), /*has_bf16=*/true, "");
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

  void run(const RaggedDotProblem& p, const BlasRaggedDotConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const cpu::Mkl& mkl = loaded_mkl();
    const int threads = config.num_threads > 0 ? config.num_threads : cpu::cpu_info(device).cores;
    std::lock_guard<std::mutex> lock(mkl_call_mutex());
    if (mkl.get_max_threads() != threads) mkl.set_num_threads(threads);
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
