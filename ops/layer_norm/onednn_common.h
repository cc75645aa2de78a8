// layer_norm on oneDNN: what the forward baseline (onednn.cc) and the VJP's (vjp/onednn.cc)
// share: the data layout and the arguments oneDNN 2.6's layer_normalization cannot take.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/base.h"

namespace tokamax {

// x (and out, dout, dx) as oneDNN sees it: normalized over the last logical dimension. The last
// axis is the plain [O, C]; another axis the strided view [O, I, C] with strides (C*I, 1, I).
inline dnnl::memory::desc layer_norm_onednn_data_desc(int64_t O, int64_t I, int64_t C,
                                                      dnnl::memory::data_type type) {
  if (I == 1) return dnnl::memory::desc({O, C}, type, dnnl::memory::dims{C, 1});
  return dnnl::memory::desc({O, I, C}, type, dnnl::memory::dims{C * I, 1, I});
}

// NotImplemented for RMSNorm and for x dtypes oneDNN 2.6 has no layer_normalization for.
inline void check_layer_norm_onednn_args(const LayerNormProblem& p) {
  if (!p.subtract_mean) {
    throw NotImplemented(
        "onednn: RMSNorm (subtract_mean=false); oneDNN 2.6 layer_normalization always "
        "subtracts the mean (its rms flag arrived in 3.x)");
  }
  if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
    throw NotImplemented("onednn: " + std::string(dtype_name(p.x_dtype)) +
                         " x; oneDNN 2.6 layer_normalization on CPU takes f32 or bf16 data" +
                         (p.x_dtype == DType::kF64 ? " (no f64 at all)" : ""));
  }
}

}  // namespace tokamax
