// Seeded tensors of approximately normal values.
#include "ops/framework/random.h"

namespace tokamax {

Tensor normal_tensor(const TensorSpec& spec, uint64_t seed, std::string_view name, double stddev,
                     double mean) {
  Tensor tensor(spec);
  const uint64_t stream = stream_id(name);
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    tensor.set(i, mean + stddev * normalish(seed, stream, i));
  }
  return tensor;
}

}  // namespace tokamax
