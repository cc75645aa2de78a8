// NumPy .npy writer, so any case can be rechecked with numpy.load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/framework/tensor.h"

namespace tokamax {

// Writes a C-order array. `descr` is NumPy's dtype string ("<f4", "<i8", ...).
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes);
// Writes a tensor; bf16 is widened to exact float32 (NumPy has no bfloat16), f16 stays "<f2".
void write_npy(const std::string& path, const Tensor& tensor);

}  // namespace tokamax
