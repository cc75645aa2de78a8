// Tests for ragged_dot's cuda implementation that need no GPU: its checks, its configs against the
// compiled variants, its heuristics and search space (on a stand-in CUDA device), and how it is
// reported where there is no CUDA device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cuda/cuda_device.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/cuda_kernel.h"
#include "tests/ops/impl_calls.h"
#include "tests/support/fake_device.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Implementation& cuda_impl() { return ragged_dot_op().implementation("cuda"); }

BoundArgs moe(const std::string& dtype, const std::string& out, int64_t M, int64_t K, int64_t N,
              const std::vector<int64_t>& sizes) {
  return ragged_dot_op().bind(
      {{"lhs", dtype + "[" + std::to_string(M) + "," + std::to_string(K) + "]"},
       {"rhs", dtype + "[" + std::to_string(sizes.size()) + "," + std::to_string(K) + "," +
                   std::to_string(N) + "]"},
       {"group_sizes", sizes},
       {"preferred_element_type", out}});
}

}  // namespace

TEST_CASE("cuda ragged_dot runs on CUDA devices only, and says why not elsewhere", "[cuda]") {
  const testing::FakeDevice gpu("cuda");
  CHECK(cuda_impl().supported_on(gpu).ok);
  const Support on_host = cuda_impl().supported_on(cpu::host_device());
  CHECK_FALSE(on_host.ok);
  CHECK_FALSE(on_host.reason.empty());
  CHECK(cuda_impl().backend() == "cuda");
}

TEST_CASE("cuda ragged_dot takes bf16/f16 with 16-byte rows and declines the rest", "[cuda]") {
  const testing::FakeDevice gpu("cuda");
  CHECK_NOTHROW(check_args(cuda_impl(), moe("bf16", "bf16", 64, 128, 256, {32, 0, 32}), gpu));
  CHECK_NOTHROW(check_args(cuda_impl(), moe("f16", "f32", 64, 128, 256, {64}), gpu));
  CHECK_THROWS_AS(check_args(cuda_impl(), moe("f32", "f32", 64, 128, 256, {64}), gpu),
                  NotImplemented);
  CHECK_THROWS_AS(check_args(cuda_impl(), moe("bf16", "f16", 64, 128, 256, {64}), gpu),
                  NotImplemented);
  CHECK_THROWS_WITH(check_args(cuda_impl(), moe("bf16", "bf16", 64, 12, 256, {64}), gpu),
                    Catch::Contains("16 bytes"));
}

TEST_CASE("cuda ragged_dot configs name compiled variants", "[cuda]") {
  const testing::FakeDevice gpu("cuda");
  const BoundArgs args = moe("bf16", "bf16", 512, 256, 512, {200, 0, 312});
  // A tile that was not compiled is refused, naming the field and the compiled ones.
  json odd = heuristics_config_json(cuda_impl(), args, gpu);
  odd["tile_m"] = 256;
  try {
    check_config_json(cuda_impl(), args, odd, gpu);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "tile_m");
    CHECK_THAT(e.what(), Catch::Contains("128x128x64"));
  }
  CHECK_THROWS_AS(check_config_json(cuda_impl(), args, {{"raster", "diagonal"}}, gpu),
                  InvalidArgument);
  CHECK_THROWS_AS(check_config_json(cuda_impl(), args, {{"swizzle", 3}}, gpu), InvalidArgument);
  // Every dtype pair the implementation accepts has compiled variants, so the heuristics and
  // every config of the search space name one.
  for (const auto& [in, out] : {std::pair{"bf16", "bf16"}, std::pair{"bf16", "f32"},
                                std::pair{"f16", "f16"}, std::pair{"f16", "f32"}}) {
    const BoundArgs a = moe(in, out, 256, 128, 256, {100, 0, 156});
    const json heuristics = heuristics_config_json(cuda_impl(), a, gpu);
    CAPTURE(in, out, heuristics.dump());
    CHECK_NOTHROW(check_config_json(cuda_impl(), a, heuristics, gpu));
    std::set<std::string> distinct;
    for (const json& config : autotuning_configs_json(cuda_impl(), a, gpu)) {
      CAPTURE(config.dump());
      CHECK(cuda_impl().canonical_config(config) == config);
      CHECK_NOTHROW(check_config_json(cuda_impl(), a, config, gpu));
      // swizzle changes nothing under the grouped scheduler: never searched.
      CHECK(config["swizzle"] == 1);
      distinct.insert(config.dump());
    }
    // Every compiled variant of the dtypes with both rasters.
    CHECK(distinct.size() >= 2);
  }
}

TEST_CASE("cuda ragged_dot heuristics follow the groups", "[cuda]") {
  const testing::FakeDevice gpu("cuda");
  // Decode: a few rows per expert -> the 64-row ping-pong tile.
  const json decode = heuristics_config_json(
      cuda_impl(), moe("bf16", "bf16", 64, 7168, 2048, {8, 8, 8, 8, 8, 8, 8, 8}), gpu);
  CHECK(decode["tile_m"] == 64);
  CHECK(decode["schedule"] == "pingpong");
  // Prefill with a wide N -> 128x256 on a 2x1 cluster.
  const json prefill = heuristics_config_json(
      cuda_impl(), moe("bf16", "bf16", 8192, 4096, 14336, {4096, 4096}), gpu);
  CHECK(prefill["tile_n"] == 256);
  CHECK(prefill["cluster_m"] == 2);
  // f32 outputs have one compiled variant.
  const json f32 =
      heuristics_config_json(cuda_impl(), moe("bf16", "f32", 8192, 4096, 4096, {4096, 4096}), gpu);
  CHECK(f32["tile_m"] == 128);
  CHECK(f32["tile_n"] == 128);
}

TEST_CASE("the compiled variant table is what cuda.cc and the kernels agree on", "[cuda]") {
  std::set<std::string> keys;
  for (const CudaGemmVariant& v : kCudaGemmVariants) {
    const std::string key = std::to_string(static_cast<int>(v.in)) + "/" +
                            std::to_string(static_cast<int>(v.out)) + "/" +
                            std::to_string(v.tile_m) + "x" + std::to_string(v.tile_n) + "x" +
                            std::to_string(v.tile_k) + "/" + std::to_string(v.cluster_m) + "x" +
                            std::to_string(v.cluster_n) + "/" + v.schedule;
    CHECK(keys.insert(key).second);  // no variant twice
    CHECK(v.tile_k * 2 % 128 == 0);  // a 128-byte swizzle row of 16-bit elements
  }
  CHECK(keys.size() == static_cast<size_t>(kNumCudaGemmVariants));
}

TEST_CASE("cublas_grouped declines 16-bit inputs with an f32 output, which cublas runs", "[cuda]") {
  const testing::FakeDevice gpu("cuda");
  const Implementation& grouped = ragged_dot_op().implementation("cublas_grouped");
  const Implementation& per_group = ragged_dot_op().implementation("cublas");
  for (const char* in : {"bf16", "f16"}) {
    const BoundArgs mixed = moe(in, "f32", 64, 128, 64, {30, 34});
    try {
      check_args(grouped, mixed, gpu);
      FAIL("no decline");
    } catch (const NotImplemented& e) {
      CHECK_THAT(e.what(), Catch::Contains("cublasGemmGroupedBatchedEx takes one type"));
    }
    CHECK_NOTHROW(check_args(per_group, mixed, gpu));
    CHECK_NOTHROW(check_args(grouped, moe(in, in, 64, 128, 64, {30, 34}), gpu));
  }
}

TEST_CASE("the tensor-core peak is probed with the widest compiled variant of each 16-bit type",
          "[cuda]") {
  const int bf16 = widest_cuda_gemm_variant(CudaElement::kBF16);
  REQUIRE(bf16 >= 0);
  CHECK(kCudaGemmVariants[bf16].out == CudaElement::kBF16);
  CHECK(kCudaGemmVariants[bf16].tile_n == 256);
  CHECK(kCudaGemmVariants[bf16].cluster_m == 2);
  const int f16 = widest_cuda_gemm_variant(CudaElement::kF16);
  REQUIRE(f16 >= 0);
  CHECK(kCudaGemmVariants[f16].in == CudaElement::kF16);
  CHECK(kCudaGemmVariants[f16].out == CudaElement::kF16);
  CHECK(widest_cuda_gemm_variant(CudaElement::kF32) == -1);
#if TOKAMAX_WITH_CUDA
  // Offered to the device at static initialization, so `info` takes it into the ceiling.
  const std::vector<std::string> names = cuda::tensor_core_probe_names();
  CHECK(std::find(names.begin(), names.end(), "our widest ragged_dot variant") != names.end());
#endif
}
