// A small application calling tokamax::ragged_dot on a few MoE-like shapes (try TOKAMAX_RECORD).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into groups
//   K      contraction extent
//   N      output features
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "ops/framework/random.h"
#include "ops/ragged_dot/api.h"

namespace {

// A tensor with reproducible values in [-1, 1).
tokamax::Tensor random_tensor(tokamax::TensorSpec spec, uint64_t stream) {
  tokamax::Tensor tensor(std::move(spec));
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    tensor.set(i, 2.0 * tokamax::uniform01(/*seed=*/0, stream, i) - 1.0);
  }
  return tensor;
}

struct Layer {
  tokamax::DType dtype;
  int64_t M, K, N;
  std::vector<int32_t> group_sizes;  // [G], sums to at most M
};

}  // namespace

int main() {
  using tokamax::DType;
  // A prefill step and two decode steps of a small MoE layer; the second decode step repeats the
  // first's shapes, so a recording holds it twice and `tune --from` tunes it once.
  const std::vector<Layer> layers = {
      {DType::kBF16, 128, 64, 96, {40, 0, 56, 32}},
      {DType::kF32, 16, 64, 96, {5, 3, 0, 8}},
      {DType::kF32, 16, 64, 96, {5, 3, 0, 8}},
      {DType::kF32, 96, 32, 48, {30, 30, 36}},
  };
  try {
    for (const Layer& layer : layers) {
      const int64_t G = static_cast<int64_t>(layer.group_sizes.size());
      const tokamax::Tensor lhs = random_tensor({layer.dtype, {layer.M, layer.K}}, 1);
      const tokamax::Tensor rhs = random_tensor({layer.dtype, {G, layer.K, layer.N}}, 2);
      tokamax::Tensor group_sizes({DType::kI32, {G}});
      for (int64_t g = 0; g < G; ++g) group_sizes.data<int32_t>()[g] = layer.group_sizes[g];
      const tokamax::Tensor out = tokamax::ragged_dot(lhs, rhs, group_sizes);
      std::printf("ragged_dot %s x %s -> %s, out[0] = %.4f\n", lhs.spec().to_string().c_str(),
                  rhs.spec().to_string().c_str(), out.spec().to_string().c_str(), out.get(0));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ragged_dot_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
