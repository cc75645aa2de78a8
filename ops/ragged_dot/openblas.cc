// ragged_dot: the OpenBLAS baseline ("openblas"), one cblas_sgemm (or sbgemm) per non-empty group.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   m_g    rows of group g
#include <climits>
#include <cstring>
#include <mutex>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/openblas_loader.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {
namespace {

struct OpenBlasRaggedDotConfig {
  int num_threads = 0;  // 0 = all cores; set with openblas_set_num_threads before the calls

  void validate() const {
    require_config(num_threads >= 0, "num_threads", [&] {
      return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
    });
  }
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
  }
};

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

class OpenBlasRaggedDot final
    : public TypedImplementation<RaggedDotProblem, OpenBlasRaggedDotConfig> {
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
    require_plain_ragged_dot(p, name());
    const std::string lhs(dtype_name(p.lhs_dtype)), rhs(dtype_name(p.rhs_dtype));
    const std::string out(dtype_name(p.out_dtype));
    if (p.lhs_dtype != p.rhs_dtype) {
      throw NotImplemented("openblas: lhs is " + lhs + " but rhs is " + rhs +
                           "; BLAS gemm takes one input dtype");
    }
    if (p.lhs_dtype == DType::kF32) {
      if (p.out_dtype != DType::kF32) {
        throw NotImplemented("openblas: f32 inputs with a " + out +
                             " output; cblas_sgemm writes f32 only");
      }
    } else if (p.lhs_dtype == DType::kBF16) {
      const cpu::OpenBlas& blas = loaded_openblas();
      if (blas.cblas_sbgemm == nullptr) {
        throw NotImplemented("openblas: bf16 inputs need cblas_sbgemm, which " + version(blas) +
                             " (" + blas.soname +
                             ") lacks: it exists only in builds with BUILD_BFLOAT16=1");
      }
      if (p.out_dtype != DType::kF32) {
        throw NotImplemented("openblas: bf16 inputs with a " + out +
                             " output; cblas_sbgemm writes f32 only");
      }
    } else {
      throw NotImplemented("openblas: " + lhs +
                           " inputs; the baseline wires only cblas_sgemm (f32) and cblas_sbgemm "
                           "(bf16), the dtypes whose speed matters");
    }
    // blasint is 32-bit in Debian's LP64 build: extents and leading dimensions must fit.
    if (p.M > INT_MAX || p.K > INT_MAX || p.N > INT_MAX) {
      throw NotImplemented("openblas: M=" + std::to_string(p.M) + ", K=" + std::to_string(p.K) +
                           ", N=" + std::to_string(p.N) + " exceed the 32-bit BLAS integer");
    }
    loaded_openblas();
  }

  void check_config(const RaggedDotProblem&, const OpenBlasRaggedDotConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
  }

  // A vendor baseline runs as it ships: all cores.
  OpenBlasRaggedDotConfig heuristics_config(const RaggedDotProblem&, const Device&) const override {
    return {};
  }

  std::vector<OpenBlasRaggedDotConfig> autotuning_configs(const RaggedDotProblem&,
                                                          const Device& device) const override {
    // All cores and one core; on a one-core machine they are the same config.
    if (cpu::cpu_info(device).cores <= 1) return {{0}};
    return {{0}, {1}};
  }

  void run(const RaggedDotProblem& p, const OpenBlasRaggedDotConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const cpu::OpenBlas& blas = loaded_openblas();
    const Tensor& lhs = inputs.at("lhs");
    const Tensor& rhs = inputs.at("rhs");
    Tensor& out = outputs.at("out");
    const int64_t K = p.K, N = p.N;
    float* out_data = out.data<float>();
    // Rows past the group sum are zero; with K = 0 every row is (an empty sum), and a zero
    // leading dimension is an error to BLAS, so no gemm runs at all.
    const int64_t first_zero_row = K == 0 ? 0 : p.rows();
    std::memset(out_data + first_zero_row * N, 0,
                static_cast<size_t>((p.M - first_zero_row) * N) * sizeof(float));
    if (K == 0 || N == 0) return;

    const int threads = config.num_threads > 0 ? config.num_threads : cpu::cpu_info(device).cores;
    std::lock_guard<std::mutex> lock(openblas_call_mutex());
    if (blas.get_num_threads() != threads) blas.set_num_threads(threads);
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = p.group_sizes[g], row0 = p.group_starts[g];
      if (m_g == 0) continue;
      float* out_g = out_data + row0 * N;  // [m_g, N]
      if (p.lhs_dtype == DType::kF32) {
        const float* lhs_g = lhs.data<float>() + row0 * K;   // [m_g, K]
        const float* rhs_g = rhs.data<float>() + g * K * N;  // [K, N]
        blas.cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans,
                         static_cast<int>(m_g), static_cast<int>(N), static_cast<int>(K), 1.0f,
                         lhs_g, static_cast<int>(K), rhs_g, static_cast<int>(N), 0.0f, out_g,
                         static_cast<int>(N));
      } else {
        // bf16 storage is the raw 16 bits, exactly what cblas_sbgemm's bfloat16 is.
        const auto* lhs_g = reinterpret_cast<const uint16_t*>(lhs.data<bf16>() + row0 * K);
        const auto* rhs_g = reinterpret_cast<const uint16_t*>(rhs.data<bf16>() + g * K * N);
        blas.cblas_sbgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans,
                          static_cast<int>(m_g), static_cast<int>(N), static_cast<int>(K), 1.0f,
                          lhs_g, static_cast<int>(K), rhs_g, static_cast<int>(N), 0.0f, out_g,
                          static_cast<int>(N));
      }
    }
  }
};

}  // namespace

const Implementation& ragged_dot_openblas_implementation() {
  static const OpenBlasRaggedDot impl;
  return impl;
}

}  // namespace tokamax
