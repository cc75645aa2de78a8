// triangle_multiplication: the oneDNN f32 matmuls its oneDNN baselines (forward and VJP) compose,
// each operand described by dims and strides (a transposed plane is a stride, not a copy), the
// primitives cached by shape.
//
// Dimensions: a matmul's src [*, M, K], weights [*, K, N], dst [*, M, N], batched over the
// leading dimension when there are three.
#pragma once

#include <tuple>

#include "backends/cpu/onednn_engine.h"
#include "ops/common/onednn_primitive.h"

namespace tokamax {

// A matmul src x weights -> dst, all f32, each described by dims and strides.
struct TriangleMatmulShape {
  dnnl::memory::dims src_dims, src_strides, w_dims, w_strides, dst_dims, dst_strides;
  bool operator<(const TriangleMatmulShape& o) const {
    return std::tie(src_dims, src_strides, w_dims, w_strides, dst_dims, dst_strides) <
           std::tie(o.src_dims, o.src_strides, o.w_dims, o.w_strides, o.dst_dims, o.dst_strides);
  }
  bool operator==(const TriangleMatmulShape& o) const = default;
};

class TriangleMatmuls {
 public:
  // dst = src weights for `shape`; NotImplemented where oneDNN has no kernel for it.
  void run(const TriangleMatmulShape& shape, float* src, float* weights, float* dst) const;

 private:
  mutable cpu::OneDnnPrimitiveCache<TriangleMatmulShape, dnnl::matmul> primitives_{64};
};

}  // namespace tokamax
