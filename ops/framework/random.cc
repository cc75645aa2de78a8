// Seeded tensors of approximately normal values.
#include "ops/framework/random.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace tokamax {

Tensor normal_tensor(const TensorSpec& spec, uint64_t seed, std::string_view name, double stddev,
                     double mean) {
  Tensor tensor(spec);
  const uint64_t stream = stream_id(name);
  const int64_t n = tensor.num_elements();
  const auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) tensor.set(i, mean + stddev * normalish(seed, stream, i));
  };
  // Each element depends on its index alone, so large tensors (GPU-sized cases hold billions of
  // elements) are filled by every hardware thread, each a contiguous range.
  constexpr int64_t kPerThread = int64_t{1} << 22;
  const int64_t threads = std::clamp<int64_t>(
      n / kPerThread, 1, std::max<int64_t>(1, std::thread::hardware_concurrency()));
  if (threads == 1) {
    fill(0, n);
    return tensor;
  }
  std::vector<std::thread> workers;
  for (int64_t t = 1; t < threads; ++t) {
    workers.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
  }
  fill(0, n / threads);
  for (std::thread& worker : workers) worker.join();
  return tensor;
}

}  // namespace tokamax
