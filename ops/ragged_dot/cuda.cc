// ragged_dot: the CUDA implementation class ("cuda"): config, checks, heuristics and search
// space over the compiled CUTLASS grouped-GEMM variants (cuda_kernel.h), and the launch. Host
// C++ only, compiled in every build: without the CUDA backend it is listed, unsupported with why.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   the CTA tile (tile_m, tile_n, tile_k); cm, cn the cluster
#include <algorithm>
#include <climits>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "ops/framework/config.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cuda_kernel.h"
#include "ops/ragged_dot/cuda_peak_probe.h"

#if TOKAMAX_WITH_CUDA
#include "backends/cuda/cuda_device.h"
#endif

namespace tokamax {
namespace {

struct CudaRaggedDotConfig {
  int tile_m = 128;  // tm
  int tile_n = 128;  // tn
  int tile_k = 64;   // tk
  int cluster_m = 1;
  int cluster_n = 1;
  std::string schedule = "cooperative";  // "cooperative" | "pingpong"
  std::string raster = "along_m";  // tile order of the persistent scheduler: along_m | along_n
  // Tiles swizzled together (1, 2, 4 or 8): accepted and passed on, but CUTLASS's grouped
  // scheduler sees one CTA column, so it changes nothing and the search space leaves it at 1.
  int swizzle = 1;

  void validate() const {
    require_range("tile_m", tile_m, 16, 256);
    require_range("tile_n", tile_n, 16, 256);
    require_range("tile_k", tile_k, 16, 256);
    require_range("cluster_m", cluster_m, 1, 2);
    require_range("cluster_n", cluster_n, 1, 2);
    require_config(schedule == "cooperative" || schedule == "pingpong", "schedule", [&] {
      return "schedule is '" + schedule + "'; expected 'cooperative' or 'pingpong'";
    });
    require_config(raster == "along_m" || raster == "along_n", "raster",
                   [&] { return "raster is '" + raster + "'; expected 'along_m' or 'along_n'"; });
    require_config(swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8, "swizzle", [&] {
      return "swizzle is " + std::to_string(swizzle) + "; expected 1, 2, 4 or 8";
    });
  }
  auto key() const {
    return std::make_tuple(tile_m, tile_n, tile_k, cluster_m, cluster_n, schedule, raster, swizzle);
  }
  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("cluster_m", cluster_m);
    v("cluster_n", cluster_n);
    v("schedule", schedule);
    v("raster", raster);
    v("swizzle", swizzle);
  }
};

CudaElement element(DType dtype) {
  return dtype == DType::kBF16  ? CudaElement::kBF16
         : dtype == DType::kF16 ? CudaElement::kF16
                                : CudaElement::kF32;
}

const char* element_name(CudaElement e) {
  return e == CudaElement::kBF16 ? "bf16" : e == CudaElement::kF16 ? "f16" : "f32";
}

// The index of the compiled variant a config names for these dtypes, or -1.
int variant_of(const RaggedDotProblem& p, const CudaRaggedDotConfig& c) {
  for (int i = 0; i < kNumCudaGemmVariants; ++i) {
    const CudaGemmVariant& v = kCudaGemmVariants[i];
    if (v.in == element(p.lhs_dtype) && v.out == element(p.out_dtype) && v.tile_m == c.tile_m &&
        v.tile_n == c.tile_n && v.tile_k == c.tile_k && v.cluster_m == c.cluster_m &&
        v.cluster_n == c.cluster_n && c.schedule == v.schedule) {
      return i;
    }
  }
  return -1;
}

CudaRaggedDotConfig config_of(const CudaGemmVariant& v) {
  CudaRaggedDotConfig c;
  c.tile_m = v.tile_m;
  c.tile_n = v.tile_n;
  c.tile_k = v.tile_k;
  c.cluster_m = v.cluster_m;
  c.cluster_n = v.cluster_n;
  c.schedule = v.schedule;
  return c;
}

class CudaRaggedDot final : public TypedImplementation<RaggedDotProblem, CudaRaggedDotConfig> {
 public:
  std::string_view name() const override { return "cuda"; }
  std::string_view backend() const override { return "cuda"; }
  nlohmann::json describe() const override {
    return {{"kernels",
             "CUTLASS 4.2 grouped GEMM, sm_90a (TMA + wgmma, warp-specialized, "
             "persistent over (group, tile))"},
            {"compiled_variants", kNumCudaGemmVariants}};
  }

  void check(const RaggedDotProblem& p, const Device&) const override {
    require_plain_ragged_dot(p, name());
    const std::string in(dtype_name(p.lhs_dtype)), out(dtype_name(p.out_dtype));
    const bool half = p.lhs_dtype == DType::kBF16 || p.lhs_dtype == DType::kF16;
    if (!half || p.rhs_dtype != p.lhs_dtype) {
      throw NotImplemented("cuda: " + in + " x " + std::string(dtype_name(p.rhs_dtype)) +
                           " inputs; the tensor-core kernels take bf16 x bf16 or f16 x f16");
    }
    if (p.out_dtype != p.lhs_dtype && p.out_dtype != DType::kF32) {
      throw NotImplemented("cuda: " + in + " inputs with a " + out + " output; expected " + in +
                           " or f32");
    }
    // TMA moves 16-byte rows: K and N elements of 2 bytes in multiples of 8.
    if (p.K % 8 != 0 || p.N % 8 != 0) {
      throw NotImplemented("cuda: K=" + std::to_string(p.K) + ", N=" + std::to_string(p.N) +
                           "; TMA needs rows of a multiple of 16 bytes (K and N multiples of 8)");
    }
    if (p.K > INT_MAX || p.N > INT_MAX || p.M > INT_MAX || p.G > INT_MAX) {
      throw NotImplemented("cuda: extents past 32-bit integers");
    }
  }

  void check_config(const RaggedDotProblem& p, const CudaRaggedDotConfig& c,
                    const Device&) const override {
    require_config(variant_of(p, c) >= 0, "tile_m", [&] {
      std::string compiled;
      for (const CudaGemmVariant& v : kCudaGemmVariants) {
        if (v.in != element(p.lhs_dtype) || v.out != element(p.out_dtype)) continue;
        compiled += (compiled.empty() ? "" : ", ") + std::to_string(v.tile_m) + "x" +
                    std::to_string(v.tile_n) + "x" + std::to_string(v.tile_k) + " " +
                    std::to_string(v.cluster_m) + "x" + std::to_string(v.cluster_n) + " " +
                    v.schedule;
      }
      return "no compiled " + std::string(element_name(element(p.lhs_dtype))) + "->" +
             element_name(element(p.out_dtype)) + " variant " + std::to_string(c.tile_m) + "x" +
             std::to_string(c.tile_n) + "x" + std::to_string(c.tile_k) + " " +
             std::to_string(c.cluster_m) + "x" + std::to_string(c.cluster_n) + " " + c.schedule +
             " (compiled: " + (compiled.empty() ? "none for these dtypes" : compiled) + ")";
    });
  }

  // Small groups (decode, many experts) waste most of a 128-row tile: the 64-row ping-pong
  // kernel pads less. Large groups with a wide N take the 128x256 tile on a 2x1 cluster (the
  // B tile multicast to both CTAs). Otherwise 128x128 cooperative, the all-round choice.
  CudaRaggedDotConfig heuristics_config(const RaggedDotProblem& p, const Device&) const override {
    int64_t nonempty = 0;
    for (int64_t size : p.group_sizes) nonempty += size > 0;
    const int64_t rows_per_group = nonempty > 0 ? p.rows() / nonempty : 0;
    std::vector<CudaRaggedDotConfig> candidates = compiled_for(p);
    if (candidates.empty()) return {};
    auto pick = [&](int tile_m, int tile_n, const char* schedule) -> const CudaRaggedDotConfig* {
      for (const CudaRaggedDotConfig& c : candidates) {
        if (c.tile_m == tile_m && c.tile_n == tile_n && c.schedule == schedule) return &c;
      }
      return nullptr;
    };
    const CudaRaggedDotConfig* choice = nullptr;
    if (rows_per_group < 96) choice = pick(64, 128, "pingpong");
    if (choice == nullptr && rows_per_group >= 256 && p.N >= 2048)
      choice = pick(128, 256, "cooperative");
    if (choice == nullptr) choice = pick(128, 128, "cooperative");
    return choice != nullptr ? *choice : candidates.front();
  }

  std::vector<CudaRaggedDotConfig> autotuning_configs(const RaggedDotProblem& p,
                                                      const Device& device) const override {
    std::vector<CudaRaggedDotConfig> configs;
    const CudaRaggedDotConfig heuristics = heuristics_config(p, device);
    configs.push_back(heuristics);
    for (const CudaRaggedDotConfig& base : compiled_for(p)) {
      for (const char* raster : {"along_m", "along_n"}) {
        CudaRaggedDotConfig c = base;
        c.raster = raster;
        if (c.key() != heuristics.key()) configs.push_back(c);
      }
    }
    return configs;
  }

  void run(const RaggedDotProblem& p, const CudaRaggedDotConfig& c, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
#if TOKAMAX_WITH_CUDA
    Tensor& out = outputs.at("out");
    if (p.M == 0 || p.N == 0) return;
    if (p.K == 0) {  // every row is an empty sum; TMA descriptors reject a zero extent
      cuda::memset_async(device, out.raw(), out.size_bytes());
      return;
    }
    CudaRaggedDotLaunch launch;
    launch.variant = variant_of(p, c);
    launch.G = static_cast<int>(p.G);
    launch.M = p.M;
    launch.K = static_cast<int>(p.K);
    launch.N = static_cast<int>(p.N);
    launch.lhs = inputs.at("lhs").raw();
    launch.rhs = inputs.at("rhs").raw();
    launch.group_sizes = static_cast<const int32_t*>(inputs.at("group_sizes").raw());
    launch.out = out.raw();
    launch.raster_along_n = c.raster == "along_n";
    launch.swizzle = c.swizzle;
    launch.device = cuda::ordinal(device);
    launch.sm_count = device.info().properties.value("sm_count", 1);
    launch.stream = cuda::stream(device);
    const std::lock_guard<std::mutex> lock(cuda::scratch_mutex(device));
    launch.workspace = cuda::scratch(device, ragged_dot_cuda_workspace_bytes(launch));
    ragged_dot_cuda_launch(launch);
#else
    (void)c;
    (void)inputs;
    (void)outputs;
    throw NotImplemented("cuda: this build has no CUDA backend");
#endif
  }

 private:
  static std::vector<CudaRaggedDotConfig> compiled_for(const RaggedDotProblem& p) {
    std::vector<CudaRaggedDotConfig> out;
    for (const CudaGemmVariant& v : kCudaGemmVariants) {
      if (v.in == element(p.lhs_dtype) && v.out == element(p.out_dtype))
        out.push_back(config_of(v));
    }
    return out;
  }
};

#if TOKAMAX_WITH_CUDA
// Offered here, at static initialization, because the registry links this file into every
// program that has the implementation.
[[maybe_unused]] const bool kPeakProbeOffered =
    (cuda::add_tensor_core_probe("our widest ragged_dot variant", &ragged_dot_cuda_peak_probe),
     true);
#endif

}  // namespace

const Implementation& ragged_dot_cuda_implementation() {
  static const CudaRaggedDot impl;
  return impl;
}

}  // namespace tokamax
