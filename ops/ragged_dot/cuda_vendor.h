// ragged_dot and ragged_dot_vjp on the CUDA vendor libraries: what their baselines (cublas.cc,
// cudnn.cc, vjp/cublas.cc) share. Without the CUDA backend only the cuBLAS description is here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ops/framework/dtype.h"
#include "ops/framework/op.h"

#if TOKAMAX_WITH_CUDA
#include "backends/cuda/cublas.h"
#include "backends/cuda/element.h"
#endif

namespace tokamax {

#if TOKAMAX_WITH_CUDA
// The library element type of bf16 and f16; f32 otherwise (the baselines' checks admit no more).
inline cuda::Element cuda_element(DType dtype) {
  return dtype == DType::kBF16  ? cuda::Element::kBF16
         : dtype == DType::kF16 ? cuda::Element::kF16
                                : cuda::Element::kF32;
}
#endif

// describe() of a cuBLAS baseline that makes `call`.
inline nlohmann::json cublas_describe(std::string_view call) {
#if TOKAMAX_WITH_CUDA
  return {{"library", "cuBLAS"},
          {"description", cuda::cublas_description()},
          {"call", std::string(call)}};
#else
  (void)call;
  return {{"library", "cuBLAS"}};
#endif
}

// supported_on() of a cuBLAS baseline: the device check's answer, unless cuBLAS cannot be
// loaded (then why not).
inline Support cublas_support(Support device_support) {
#if TOKAMAX_WITH_CUDA
  if (device_support.ok && !cuda::cublas_unavailable().empty()) {
    return {false, cuda::cublas_unavailable()};
  }
#endif
  return device_support;
}

}  // namespace tokamax
