// Roofline bound math over a device's measured ceilings.
#include "cli/toolkit/measurement/roofline.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {

double peak_gflops(const Ceilings& ceilings, DType compute) {
  switch (compute) {
    case DType::kBF16:
      return std::max(
          {ceilings.bf16_dot_gflops, ceilings.amx_bf16_gflops, ceilings.f32_fma_gflops});
    case DType::kF16:
      return std::max(ceilings.f16_dot_gflops, ceilings.f32_fma_gflops);
    case DType::kF32:
      return ceilings.f32_fma_gflops;
    case DType::kI8:
      // int8 x int8 products: the native dot where measured, else what a kernel converting to
      // the float units could reach.
      return std::max({ceilings.int8_dot_gflops, ceilings.amx_int8_gflops,
                       peak_gflops(ceilings, DType::kBF16)});
    case DType::kF64:
      // f64 vectors hold half the lanes at the same FMA rate.
      return ceilings.f64_fma_gflops > 0 ? ceilings.f64_fma_gflops : ceilings.f32_fma_gflops / 2;
    default:
      throw InvalidArgument("roofline: no compute peak for dtype " +
                            std::string(dtype_name(compute)) +
                            "; expected f64, f32, bf16, f16 or i8");
  }
}

double roofline_gflops(const Ceilings& ceilings, double flops, double bytes, DType compute) {
  const double peak = peak_gflops(ceilings, compute);
  if (bytes <= 0) return peak;
  return std::min(peak, ceilings.bandwidth_gbps * flops / bytes);
}

double roofline_fraction(const Ceilings& ceilings, double flops, double bytes, DType compute,
                         double gflops, double gbps) {
  if (flops <= 0) {
    return bytes > 0 && ceilings.bandwidth_gbps > 0 ? gbps / ceilings.bandwidth_gbps : NAN;
  }
  const double roofline = roofline_gflops(ceilings, flops, bytes, compute);
  return roofline > 0 ? gflops / roofline : NAN;
}

}  // namespace tokamax
