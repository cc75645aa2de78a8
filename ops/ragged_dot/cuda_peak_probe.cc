// ragged_dot on CUDA: our widest compiled variant as a probe of the device's 16-bit tensor-core
// peak (backends/cuda/cuda_device.h: the ceiling is the fastest probe). mma.sync chains reach
// about 2/3 of what wgmma does on Hopper, and cuBLAS may not load, so without this probe every
// "% of peak" of a wgmma kernel could read too high.
//
// Dimensions.
//   n      the square problem: one group of n rows, K = N = n
#include "ops/ragged_dot/cuda_peak_probe.h"

#if TOKAMAX_WITH_CUDA
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>

#include "backends/cuda/cuda_device.h"
#include "ops/ragged_dot/cuda_kernel.h"
#endif

namespace tokamax {

double ragged_dot_cuda_peak_probe(const Device& device, bool bf16, int n, int repetitions) {
#if TOKAMAX_WITH_CUDA
  const int variant = widest_cuda_gemm_variant(bf16 ? CudaElement::kBF16 : CudaElement::kF16);
  if (variant < 0 || n <= 0) return 0.0;
  const Memory& memory = device.memory();
  const size_t bytes = static_cast<size_t>(n) * n * 2;  // 16-bit elements
  auto release = [&memory](void* p) {
    if (p != nullptr) memory.free(p);
  };
  using Buffer = std::unique_ptr<void, decltype(release)>;
  double best = 0.0;
  try {
    Buffer lhs(memory.allocate(bytes), release), rhs(memory.allocate(bytes), release),
        out(memory.allocate(bytes), release), sizes(memory.allocate(sizeof(int32_t)), release);
    memory.zero(lhs.get(), bytes);  // zeros: no denormal or NaN slow paths
    memory.zero(rhs.get(), bytes);
    const int32_t rows = n;
    memory.copy_from_host(sizes.get(), &rows, sizeof rows);
    CudaRaggedDotLaunch launch;
    launch.variant = variant;
    launch.G = 1;
    launch.M = n;
    launch.K = n;
    launch.N = n;
    launch.lhs = lhs.get();
    launch.rhs = rhs.get();
    launch.group_sizes = static_cast<const int32_t*>(sizes.get());
    launch.out = out.get();
    launch.device = cuda::ordinal(device);
    launch.sm_count = device.info().properties.value("sm_count", 1);
    launch.stream = cuda::stream(device);
    const std::lock_guard<std::mutex> lock(cuda::scratch_mutex(device));
    launch.workspace = cuda::scratch(device, ragged_dot_cuda_workspace_bytes(launch));
    ragged_dot_cuda_launch(launch);  // warm-up: the GEMM's initialization, the clocks
    device.synchronize();
    const std::unique_ptr<Timer> timer = device.timer();
    for (int r = 0; r < repetitions; ++r) {
      timer->start();
      ragged_dot_cuda_launch(launch);
      const double seconds = timer->stop();
      if (seconds > 0) best = std::max(best, 2.0 * n * n * static_cast<double>(n) / seconds * 1e-9);
    }
  } catch (const std::exception&) {
    return 0.0;  // the other probes decide the ceiling
  }
  return best;
#else
  (void)device;
  (void)bf16;
  (void)n;
  (void)repetitions;
  return 0.0;
#endif
}

}  // namespace tokamax
