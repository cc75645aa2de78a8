// ragged_dot: the oneMKL baseline ("mkl"), one cblas_sgemm (or cblas_gemm_bf16bf16f32) per
// non-empty group (blas_groups.h), or one cblas_sgemm_batch over all of them (MKL's grouped
// batch API, f32), oneMKL loaded from the pinned wheel (mkl_loader.h).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
#include <string>
#include <vector>

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

// The thread count (process-global in MKL, set under mkl_threads' lock) and how the groups are
// called: one gemm each (per_group), or all in one cblas_sgemm_batch (batch), each group an MKL
// group of one gemm, so that MKL schedules the groups itself. oneMKL has no bf16 batch call.
struct MklRaggedDotConfig {
  int num_threads = 0;              // 0 = all cores
  std::string calls = "per_group";  // "per_group" | "batch"

  void validate() const {
    BlasRaggedDotConfig{num_threads}.validate();
    require_config(calls == "per_group" || calls == "batch", "calls",
                   [&] { return "calls is '" + calls + "'; expected 'per_group' or 'batch'"; });
  }
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
    v("calls", calls);
  }
};

// Whether `p`'s gemms are f32 ones (a preset's tf32 values included), which batch can run.
bool runs_f32(const RaggedDotProblem& p) { return p.computed().lhs_dtype == DType::kF32; }

// Non-empty groups: batch calls MKL once instead of once per group, so it matters from two.
int64_t non_empty_groups(const RaggedDotProblem& p) {
  int64_t count = 0;
  for (const int64_t size : p.group_sizes) count += size > 0;
  return count;
}

class MklRaggedDot final : public TypedImplementation<RaggedDotProblem, MklRaggedDotConfig> {
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

  void check_config(const RaggedDotProblem& p, const MklRaggedDotConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
    if (c.calls == "batch" && !runs_f32(p)) {
      throw NotImplemented(
          "mkl: calls=batch runs cblas_sgemm_batch, f32 only (oneMKL has no "
          "bf16 batch gemm); use calls=per_group");
    }
  }

  // A vendor baseline runs as it ships: all cores, and for f32 with several groups the grouped
  // batch call MKL provides for exactly this.
  MklRaggedDotConfig heuristics_config(const RaggedDotProblem& p, const Device&) const override {
    MklRaggedDotConfig c;
    if (runs_f32(p) && non_empty_groups(p) > 1) c.calls = "batch";
    return c;
  }

  std::vector<MklRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                     const Device& device) const override {
    std::vector<MklRaggedDotConfig> configs;
    for (const BlasRaggedDotConfig& threads : blas_autotuning_configs(device)) {
      configs.push_back({threads.num_threads, "per_group"});
      if (runs_f32(p)) configs.push_back({threads.num_threads, "batch"});
    }
    return configs;
  }

  void run(const RaggedDotProblem& given, const MklRaggedDotConfig& config, const Device& device,
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
    if (config.calls == "batch") {
      gemms.f32_grouped = [&](int N, int K, const std::vector<BlasF32Group>& groups) {
        // One MKL group per ragged group (each has its own m); the other arrays repeat.
        const size_t count = groups.size();
        const std::vector<int> no_trans(count, cpu::kCblasNoTrans), ks(count, K), ns(count, N);
        const std::vector<int> ones(count, 1);
        const std::vector<float> alpha(count, 1.0f), beta(count, 0.0f);
        std::vector<int> ms(count);
        std::vector<const float*> a(count), b(count);
        std::vector<float*> c(count);
        for (size_t i = 0; i < count; ++i) {
          ms[i] = groups[i].m;
          a[i] = groups[i].a;
          b[i] = groups[i].b;
          c[i] = groups[i].c;
        }
        mkl.cblas_sgemm_batch(cpu::kCblasRowMajor, no_trans.data(), no_trans.data(), ms.data(),
                              ns.data(), ks.data(), alpha.data(), a.data(), ks.data(), b.data(),
                              ns.data(), beta.data(), c.data(), ns.data(), static_cast<int>(count),
                              ones.data());
      };
    }
    run_blas_ragged_dot(p, gemms, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
  }
};

}  // namespace

const Implementation& ragged_dot_mkl_implementation() {
  static const MklRaggedDot impl;
  return impl;
}

}  // namespace tokamax
