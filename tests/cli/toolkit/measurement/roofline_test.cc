// Tests for the roofline bound over a device's ceilings.
#include "cli/toolkit/measurement/roofline.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "ops/framework/errors.h"

using namespace tokamax;

namespace {

Ceilings sample_ceilings() {
  return {.f32_fma_gflops = 100,
          .f64_fma_gflops = 40,
          .bf16_dot_gflops = 200,
          .f16_dot_gflops = 0,
          .bandwidth_gbps = 10,
          .device_id = "",
          .measured_at = ""};
}

}  // namespace

TEST_CASE("roofline_gflops is the lower of the compute and the memory ceiling", "[roofline]") {
  const Ceilings ceilings = sample_ceilings();
  // 1 flop/byte x 10 GB/s = 10 GFLOP/s < 100: memory-bound.
  CHECK(roofline_gflops(ceilings, 1e9, 1e9, DType::kF32) == Approx(10));
  // 50 flop/byte x 10 GB/s = 500 GFLOP/s > 100: compute-bound.
  CHECK(roofline_gflops(ceilings, 50e9, 1e9, DType::kF32) == Approx(100));
  // Exactly at the ridge point (10 flop/byte) both ceilings agree.
  CHECK(roofline_gflops(ceilings, 10e9, 1e9, DType::kF32) == Approx(100));
  // No memory traffic: compute-bound.
  CHECK(roofline_gflops(ceilings, 1e9, 0, DType::kF32) == Approx(100));
}

TEST_CASE("peak_gflops picks the ceiling of the compute dtype", "[roofline]") {
  Ceilings ceilings = sample_ceilings();
  CHECK(peak_gflops(ceilings, DType::kF32) == 100);
  CHECK(peak_gflops(ceilings, DType::kF16) == 100);  // no native f16 dot: f32 FMA
  ceilings.f16_dot_gflops = 400;                     // a GPU's tensor cores
  CHECK(peak_gflops(ceilings, DType::kF16) == 400);
  ceilings.f16_dot_gflops = 0;
  CHECK(peak_gflops(ceilings, DType::kF64) == 40);
  // bf16: the native dot when it is faster than converting to f32 and using FMAs ...
  CHECK(peak_gflops(ceilings, DType::kBF16) == 200);
  CHECK(roofline_gflops(ceilings, 100e9, 1e9, DType::kBF16) == Approx(200));
  // ... and the f32 FMA path when there is no native dot (or it is slower).
  ceilings.bf16_dot_gflops = 0;
  CHECK(peak_gflops(ceilings, DType::kBF16) == 100);
  ceilings.bf16_dot_gflops = 60;
  CHECK(peak_gflops(ceilings, DType::kBF16) == 100);
  // An unmeasured f64 peak falls back to half the f32 one (half the lanes per vector).
  ceilings.f64_fma_gflops = 0;
  CHECK(peak_gflops(ceilings, DType::kF64) == 50);
  CHECK_THROWS_AS(peak_gflops(ceilings, DType::kI32), InvalidArgument);
  // int8 x int8: the native int8 dot where measured, else the bf16 ceiling.
  CHECK(peak_gflops(ceilings, DType::kI8) == 100);
  ceilings.int8_dot_gflops = 450;
  CHECK(peak_gflops(ceilings, DType::kI8) == 450);
}

TEST_CASE("on a CPU with AMX every bf16 and int8 roofline is the tiles' peak", "[roofline]") {
  // A Sapphire Rapids' figures: the tiles run 13x the vector bf16 dot. A vendor GEMM at 1332
  // GFLOP/s would read 294% of a roofline that knew only the vector units; it must stay below 1.
  Ceilings amx = sample_ceilings();
  amx.f32_fma_gflops = 453;
  amx.bf16_dot_gflops = 223;
  amx.int8_dot_gflops = 900;
  amx.amx_bf16_gflops = 6000;
  amx.amx_int8_gflops = 12100;
  CHECK(peak_gflops(amx, DType::kBF16) == 6000);
  CHECK(peak_gflops(amx, DType::kI8) == 12100);
  CHECK(peak_gflops(amx, DType::kF32) == 453);  // no f32 tiles
  const double vendor_fraction =
      1332 / roofline_gflops(amx, 2.0 * 2048 * 2048 * 2048, 3.0 * 2048 * 2048 * 2, DType::kBF16);
  CHECK(vendor_fraction == Approx(0.222).epsilon(0.01));
  // Without the int8 tiles an int8 product can still run on the bf16 ones.
  amx.amx_int8_gflops = 0;
  CHECK(peak_gflops(amx, DType::kI8) == 6000);
}

TEST_CASE("roofline_fraction: of the roofline, or of the bandwidth for an op without arithmetic",
          "[roofline]") {
  const Ceilings c = sample_ceilings();
  // 1 flop per byte at 10 GB/s: a 10 GFLOP/s roofline, of which 5 is half.
  CHECK(roofline_fraction(c, 1e9, 1e9, DType::kF32, 5.0, 5.0) == Approx(0.5));
  // A selection moves bytes only: 7.5 GB/s of a 10 GB/s ceiling.
  CHECK(roofline_fraction(c, 0.0, 1e9, DType::kI32, 0.0, 7.5) == Approx(0.75));
  CHECK(std::isnan(roofline_fraction(c, 0.0, 0.0, DType::kI32, 0.0, 0.0)));
}
