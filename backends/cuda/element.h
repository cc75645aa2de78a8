// The element types the CUDA vendor libraries are called with (cuBLAS, cuDNN).
#pragma once

namespace tokamax::cuda {

enum class Element { kF32, kF16, kBF16 };

}  // namespace tokamax::cuda
