// triangle_multiplication: the oneDNN matmuls of its baselines.
#include "ops/triangle_multiplication/onednn_matmul.h"

namespace tokamax {

void TriangleMatmuls::run(const TriangleMatmulShape& s, float* src, float* weights,
                          float* dst) const {
  using dt = dnnl::memory::data_type;
  const dnnl::engine& engine = cpu::onednn_engine();
  const dnnl::memory::desc src_d(s.src_dims, dt::f32, s.src_strides);
  const dnnl::memory::desc w_d(s.w_dims, dt::f32, s.w_strides);
  const dnnl::memory::desc dst_d(s.dst_dims, dt::f32, s.dst_strides);
  const dnnl::matmul primitive = primitives_.get(s, [&] {
    return create_onednn("matmul for the triangle layer", [&] {
      return dnnl::matmul(
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_d, w_d, dst_d), engine));
    });
  });
  dnnl::stream stream(engine);
  primitive.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(src_d, engine, src)},
                             {DNNL_ARG_WEIGHTS, dnnl::memory(w_d, engine, weights)},
                             {DNNL_ARG_DST, dnnl::memory(dst_d, engine, dst)}});
  stream.wait();
}

}  // namespace tokamax
