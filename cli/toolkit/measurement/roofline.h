// The roofline bound of a case: the device's compute peak at the case's dtype, or its memory
// bandwidth times the case's arithmetic intensity, whichever is lower.
#pragma once

#include "backends/ceilings.h"
#include "ops/framework/dtype.h"

namespace tokamax {

// The compute ceiling for kernels whose arithmetic runs in `compute`:
// the fastest engine the device has for it:
//   bf16 -> max(native bf16 dot, AMX bf16 tiles, f32 FMA): a kernel may convert to f32 and use
//   FMAs instead;
//   f16 -> max(native f16 dot, f32 FMA) (the CPU's f16 peak is the f32 FMA one);
//   f32 -> f32 FMA;
//   f64 -> f64 FMA (half the f32 FMA peak when unmeasured);
//   i8 (int8 x int8 products) -> max(native int8 dot, AMX int8 tiles, the bf16 ceiling).
// Throws InvalidArgument for i32 and bool.
double peak_gflops(const Ceilings& ceilings, DType compute);

// Attainable GFLOP/s for `flops` over `bytes` of memory traffic: min(peak, bandwidth x flops /
// bytes). GB/s times flop/byte is GFLOP/s; bytes <= 0 means no traffic, i.e. compute-bound.
double roofline_gflops(const Ceilings& ceilings, double flops, double bytes, DType compute);

// The fraction of its roofline a measured case reached (gflops / roofline_gflops); for a case
// without arithmetic (flops <= 0: a selection, a gather) the fraction of the memory bandwidth
// (gbps / bandwidth). NaN where neither has a ceiling.
double roofline_fraction(const Ceilings& ceilings, double flops, double bytes, DType compute,
                         double gflops, double gbps);

}  // namespace tokamax
