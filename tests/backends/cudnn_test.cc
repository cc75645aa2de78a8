// Tests for the cuDNN loader and the MoE grouped matmul graph of the ragged_dot baseline
// (backends/cuda/cudnn.h), without a GPU: cuDNN loads (or says why not), and cudnn-frontend
// accepts the graph for Hopper (sm_90) when it does.
#include <catch2/catch.hpp>

#if TOKAMAX_WITH_CUDA
#include <string>

#include "backends/cuda/cudnn.h"

using namespace tokamax;

TEST_CASE("cuDNN loads at run time or says why not", "[cuda]") {
  const std::string& why = cuda::cudnn_unavailable();
  if (!why.empty()) {
    WARN("cuDNN unavailable here: " << why);
    CHECK((why.rfind("libcudnn.so.9 not found", 0) == 0 || why.rfind("cuDNN ", 0) == 0));
    return;
  }
  CHECK(cuda::cudnn_description().rfind("cuDNN 9.", 0) == 0);
}

TEST_CASE("the MoE grouped matmul graph validates for sm_90 without a device", "[cuda]") {
  if (!cuda::cudnn_unavailable().empty()) {
    WARN("cuDNN unavailable here: " << cuda::cudnn_unavailable());
    return;
  }
  for (const cuda::Element out : {cuda::Element::kBF16, cuda::Element::kF32}) {
    cuda::MoeMatmul shape;
    shape.in = cuda::Element::kBF16;
    shape.out = out;
    shape.E = 8;
    shape.T = 8192;
    shape.K = 4096;
    shape.N = 14336;
    INFO("out f32: " << (out == cuda::Element::kF32));
    CHECK(cuda::moe_graph_error(shape, 90) == "");
  }
}
#endif
