// ragged_dot: the OpenBLAS baseline ("openblas"), one cblas_sgemm (or sbgemm) per non-empty group
// (blas_groups.h).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   m_g    rows of group g
#include <mutex>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/openblas_loader.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/blas_groups.h"

namespace tokamax {
namespace {

// openblas_set_num_threads is process-global: hold this across setting it and the gemm calls so
// that concurrent runs with different configs each get the thread count they asked for.
std::mutex& openblas_call_mutex() {
  static std::mutex mutex;
  return mutex;
}

const cpu::OpenBlas& loaded_openblas() {
  const cpu::OpenBlas* blas = cpu::openblas();
  if (blas == nullptr) throw NotImplemented("openblas: " + cpu::openblas_error());
  return *blas;
}

// "OpenBLAS 0.3.21": the first two words of openblas_get_config().
std::string version(const cpu::OpenBlas& blas) {
  const size_t space = blas.config.find(' ', blas.config.find(' ') + 1);
  return blas.config.empty() ? "this OpenBLAS" : blas.config.substr(0, space);
}

class OpenBlasRaggedDot final : public TypedImplementation<RaggedDotProblem, BlasRaggedDotConfig> {
 public:
  std::string_view name() const override { return "openblas"; }
  bool is_vendor() const override { return true; }
  // The core type matters as much as the version: a misdetected one is ~6x slower.
  nlohmann::json describe() const override {
    const cpu::OpenBlas* blas = cpu::openblas();
    if (blas == nullptr) return {{"library", "OpenBLAS"}, {"error", cpu::openblas_error()}};
    return {{"library", "OpenBLAS"},
            {"description", cpu::openblas_description()},
            {"config", blas->config},
            {"core_type", blas->core_type},
            {"openblas_coretype", blas->coretype_env},
            {"coretype_set_by", blas->coretype_env.empty() ? "nobody"
                                : blas->coretype_set_by_us ? "tokamax"
                                                           : "user"},
            {"sbgemm", blas->cblas_sbgemm != nullptr}};
  }

  Support supported_on(const Device& device) const override {
    Support support = Implementation::supported_on(device);
    if (support.ok && cpu::openblas() == nullptr) return {false, cpu::openblas_error()};
    return support;
  }

  void check(const RaggedDotProblem& p, const Device&) const override {
    const cpu::OpenBlas& blas = loaded_openblas();
    check_blas_ragged_dot(p, std::string(name()), blas.cblas_sbgemm != nullptr,
                          "bf16 inputs need cblas_sbgemm, which " + version(blas) + " (" +
                              blas.soname +
                              ") lacks: it exists only in builds with BUILD_BFLOAT16=1");
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
    const cpu::OpenBlas& blas = loaded_openblas();
    const int threads = config.num_threads > 0 ? config.num_threads : cpu::cpu_info(device).cores;
    std::lock_guard<std::mutex> lock(openblas_call_mutex());
    if (blas.get_num_threads() != threads) blas.set_num_threads(threads);
    BlasGemms gemms;
    gemms.f32 = [&](int M, int N, int K, const float* a, int lda, const float* b, int ldb, float* c,
                    int ldc) {
      blas.cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, M, N, K, 1.0f,
                       a, lda, b, ldb, 0.0f, c, ldc);
    };
    gemms.bf16 = [&](int M, int N, int K, const uint16_t* a, int lda, const uint16_t* b, int ldb,
                     float* c, int ldc) {
      blas.cblas_sbgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, M, N, K, 1.0f,
                        a, lda, b, ldb, 0.0f, c, ldc);
    };
    run_blas_ragged_dot(p, gemms, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
  }
};

}  // namespace

const Implementation& ragged_dot_openblas_implementation() {
  static const OpenBlasRaggedDot impl;
  return impl;
}

}  // namespace tokamax
