// linear_softmax_cross_entropy_loss on oneDNN: what the forward composite (onednn.cc) and the
// VJP's (vjp/onednn.cc) share: the input type and the arguments their matmuls cannot take.
//
// Dimensions.
//   B      rows of x (tokens)
//   H      hidden size (x's columns, w's rows)
//   V      vocabulary (w's columns)
#pragma once

#include <string>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

// oneDNN's type for x and w (f32 or bf16: what check_lsce_onednn_args lets through).
inline dnnl::memory::data_type lsce_onednn_type(DType dtype) {
  return dtype == DType::kBF16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// NotImplemented for mixed x / w types, types other than f32 and bf16, and empty matmuls.
inline void check_lsce_onednn_args(const LinearSoftmaxCrossEntropyProblem& p) {
  if (!p.precision_plan().identity()) {
    throw NotImplemented("onednn: precision=" + std::string(precision_name(p.precision)) +
                         "; the composite multiplies the operands as given");
  }
  const std::string x(dtype_name(p.x_dtype)), w(dtype_name(p.w_dtype));
  if (p.x_dtype != p.w_dtype) {
    throw NotImplemented("onednn: x is " + x + " but w is " + w +
                         "; oneDNN 2.x's matmul takes one src/weights type, and converting w "
                         "[H,V] would add a copy as large as the vocabulary projection");
  }
  if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
    throw NotImplemented("onednn: " + x + " inputs; the composite wires f32 and bf16 only" +
                         (p.x_dtype == DType::kF64 ? " (oneDNN has no f64 matmul)" : ""));
  }
  if (p.B == 0 || p.H == 0) {
    throw NotImplemented("onednn: B=" + std::to_string(p.B) + ", H=" + std::to_string(p.H) +
                         "; oneDNN rejects zero-sized matmuls");
  }
}

}  // namespace tokamax
