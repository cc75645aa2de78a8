// Tests for the oneMKL loader: the pinned wheel's library loads and multiplies; a wrong path is
// described, never thrown.
#include "backends/cpu/mkl_loader.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>

#include "backends/cpu/openblas_loader.h"

using namespace tokamax;

TEST_CASE("the oneMKL loader multiplies with the pinned library, or says why it cannot", "[mkl]") {
  const std::string path = cpu::mkl_library_path();
  if (!std::filesystem::exists(path)) {
    WARN("oneMKL not unpacked at " << path << " (scripts/install_deps.sh): only the error path");
    CHECK(cpu::mkl() == nullptr);
    CHECK_THAT(cpu::mkl_error(), Catch::Contains("install_deps.sh"));
    return;
  }
  const cpu::Mkl* mkl = cpu::mkl();
  REQUIRE(mkl != nullptr);
  CHECK_THAT(mkl->version, Catch::Contains("Math Kernel Library"));
  // [2, 3] x [3, 2] in f32 and bf16 (1, 2, 3 are exact in bf16).
  const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
  float c[4] = {};
  mkl->cblas_sgemm(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, 2, 2, 3, 1.0f, a, 3,
                   b, 2, 0.0f, c, 2);
  CHECK(c[0] == 4);
  CHECK(c[1] == 5);
  CHECK(c[2] == 10);
  CHECK(c[3] == 11);
  const uint16_t one = 0x3F80, two = 0x4000;
  const uint16_t a16[2] = {one, two}, b16[2] = {two, one};
  float d = 0;
  mkl->cblas_gemm_bf16bf16f32(cpu::kCblasRowMajor, cpu::kCblasNoTrans, cpu::kCblasNoTrans, 1, 1, 2,
                              1.0f, a16, 2, b16, 1, 0.0f, &d, 1);
  CHECK(d == 4);
}

TEST_CASE("the oneMKL loader describes a library it cannot load", "[mkl]") {
  const cpu::Mkl missing = cpu::load_mkl("/nonexistent/libmkl_rt.so.3");
  CHECK(missing.cblas_sgemm == nullptr);
  CHECK_THAT(missing.error,
             Catch::Contains("/nonexistent/libmkl_rt.so.3") && Catch::Contains("install_deps.sh"));
  // A library that is not oneMKL: the first missing entry point is named.
  const cpu::Mkl wrong = cpu::load_mkl("libm.so.6");
  CHECK_THAT(wrong.error, Catch::Contains("oneMKL library has no"));
}
