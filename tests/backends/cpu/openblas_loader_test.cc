// Tests for the lazy OpenBLAS loader: core-type choice, respect for the user's variable, loading.
#include "backends/cpu/openblas_loader.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_device.h"

using namespace tokamax;

namespace {

constexpr char kVariable[] = "OPENBLAS_CORETYPE";
constexpr char kMissingLibrary[] = "libtokamax-no-such-openblas.so.0";

cpu::CpuInfo x86_with(std::vector<std::string> isa, std::string vendor = "GenuineIntel") {
  cpu::CpuInfo device;
  device.arch = "x86_64";
  device.vendor = std::move(vendor);
  device.isa = std::move(isa);
  return device;
}

std::string env_or_empty() {
  const char* value = std::getenv(kVariable);
  return value ? value : "";
}

}  // namespace

TEST_CASE("OPENBLAS_CORETYPE is chosen from the CPU's ISA", "[openblas]") {
  using cpu::choose_openblas_coretype;
  const cpu::CpuInfo zen5 = x86_with(
      {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"},
      "AuthenticAMD");
  CHECK(choose_openblas_coretype(zen5) == "SkylakeX");
  CHECK(choose_openblas_coretype(x86_with({"avx2", "fma", "avx512f", "avx512bw", "avx512vl"})) ==
        "SkylakeX");
  // AVX-512 F alone (Xeon Phi) lacks what the SkylakeX kernels use.
  CHECK(choose_openblas_coretype(x86_with({"avx2", "fma", "avx512f"})) == "Haswell");
  CHECK(choose_openblas_coretype(x86_with({"avx", "avx2", "fma"}, "AuthenticAMD")) == "Haswell");
  CHECK(choose_openblas_coretype(x86_with({"sse4_2", "avx"})).empty());
  CHECK(choose_openblas_coretype(x86_with({"avx2"})).empty());  // no FMA: not a Haswell
  cpu::CpuInfo arm = x86_with({"neon"});
  arm.arch = "aarch64";
  CHECK(choose_openblas_coretype(arm).empty());
}

TEST_CASE("the loader never overrides a user's OPENBLAS_CORETYPE", "[openblas]") {
  // The admins' value stays as it is; only when none is set does the test set (and then remove)
  // one of its own, so that the rule is exercised either way.
  const std::string before = env_or_empty();
  if (before.empty()) setenv(kVariable, "Haswell", 1);
  const std::string user_value = env_or_empty();
  const cpu::CpuInfo avx512 = x86_with({"avx2", "fma", "avx512f", "avx512bw", "avx512vl"});
  // A missing library: the variable logic runs, nothing loads.
  const cpu::OpenBlas blas = cpu::load_openblas(kMissingLibrary, avx512);
  CHECK(env_or_empty() == user_value);
  CHECK(blas.coretype_env == user_value);
  CHECK_FALSE(blas.coretype_set_by_us);
  CHECK_THAT(blas.error, Catch::Contains(kMissingLibrary));
  CHECK(blas.cblas_sgemm == nullptr);
  if (before.empty()) unsetenv(kVariable);
}

TEST_CASE("the loader sets OPENBLAS_CORETYPE when nobody did", "[openblas]") {
  if (!env_or_empty().empty()) {
    WARN("OPENBLAS_CORETYPE=" << env_or_empty() << " is set here; not touching it");
    return;
  }
  const cpu::OpenBlas blas = cpu::load_openblas(kMissingLibrary, x86_with({"avx2", "fma"}));
  CHECK(env_or_empty() == "Haswell");
  CHECK(blas.coretype_env == "Haswell");
  CHECK(blas.coretype_set_by_us);
  unsetenv(kVariable);
}

TEST_CASE("the process-wide OpenBLAS loads and reports its core type", "[openblas]") {
  const cpu::OpenBlas* blas = cpu::openblas();
  if (blas == nullptr) {
    WARN("OpenBLAS unavailable, skipping: " << cpu::openblas_error());
    CHECK_FALSE(cpu::openblas_error().empty());
    CHECK_THAT(cpu::openblas_description(), Catch::Contains("unavailable"));
    return;
  }
  CHECK(cpu::openblas_error().empty());
  CHECK(blas->cblas_sgemm != nullptr);
  CHECK(blas->set_num_threads != nullptr);
  CHECK(blas->get_num_threads() >= 1);
  CHECK_FALSE(blas->core_type.empty());
  const std::string description = cpu::openblas_description();
  INFO(description);
  CHECK_THAT(description, Catch::Contains("core=" + blas->core_type));
  if (!blas->coretype_set_by_us) {
    // Set by the user (or unset): the loader left the environment exactly as it found it.
    CHECK(blas->coretype_env == env_or_empty());
    if (!blas->coretype_env.empty()) CHECK_THAT(description, Catch::Contains("set by the user"));
  } else {
    CHECK(blas->coretype_env == cpu::choose_openblas_coretype(cpu::host_cpu()));
    // A name we chose is one OpenBLAS knows: it must run those kernels.
    CHECK_THAT(blas->core_type, Catch::Equals(blas->coretype_env, Catch::CaseSensitive::No));
  }
  // A tiny sgemm through the loaded pointer: [2,3] x [3,2].
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
  float c[4] = {-1, -1, -1, -1};
  blas->cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, 2, 2, 3, 1.0f, a,
                    3, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 4);
  CHECK(c[1] == 5);
  CHECK(c[2] == 10);
  CHECK(c[3] == 11);
}
