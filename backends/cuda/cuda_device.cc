// The CUDA devices of this process through the CUDA runtime (linked statically): discovery,
// device memory, a stream per device and process, event timing, measured ceilings.
//
// Without a GPU or a driver the runtime says so on the first call (cudaGetDeviceCount), and the
// backend reports that as the reason it has no device; nothing else is touched.
#include "backends/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/peaks.h"

namespace tokamax::cuda {
namespace {

struct NamedProbe {
  std::string name;
  TensorCoreProbe probe;
};

// Filled at static initialization by the layers above, read when ceilings are measured.
std::mutex& probes_mutex() {
  static std::mutex m;
  return m;
}
std::vector<NamedProbe>& probes() {
  static std::vector<NamedProbe> p;
  return p;
}

// The fastest of mma.sync chains, an n^3 cublasGemmEx where cuBLAS loads, and every offered probe.
double tensor_core_peak(const Device& device, void* stream, int sm_count, bool bf16) {
  constexpr int kN = 8192, kRepetitions = 5;
  double best = std::max(
      measure_mma_gflops(stream, sm_count, bf16),
      measure_cublas_gemm_gflops(device, bf16 ? Element::kBF16 : Element::kF16, kN, kRepetitions));
  std::vector<NamedProbe> offered;
  {
    const std::lock_guard<std::mutex> lock(probes_mutex());
    offered = probes();
  }
  for (const NamedProbe& p : offered)
    best = std::max(best, p.probe(device, bf16, kN, kRepetitions));
  return best;
}

std::string tensor_core_peak_method() {
  std::string text = "measured: max of mma.sync chains, an 8192^3 cublasGemmEx where cuBLAS loads";
  for (const std::string& name : tensor_core_probe_names()) text += ", " + name + " on 8192^3";
  return text + ")";
}

std::string error_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

int attribute(cudaDeviceAttr which, int ordinal) {
  int value = 0;
  if (cudaDeviceGetAttribute(&value, which, ordinal) != cudaSuccess) {
    cudaGetLastError();  // an attribute this runtime lacks is 0, not a sticky error
    return 0;
  }
  return value;
}

std::string fixed(double value, int precision) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", precision, value);
  return text;
}

// Device memory of one device. Copies are synchronous: they happen once per case, untimed.
class DeviceMemory final : public Memory {
 public:
  explicit DeviceMemory(int ordinal) : ordinal_(ordinal) {}
  std::string_view name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  void* allocate(size_t bytes) const override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    void* p = nullptr;
    const cudaError_t error = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    check(error, "cudaMalloc");
    return p;
  }
  void free(void* p) const override { cudaFree(p); }
  void zero(void* p, size_t bytes) const override {
    if (bytes == 0) return;
    check(cudaMemset(p, 0, bytes), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaMemset");
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

 private:
  int ordinal_;
};

// Events recorded on the device's stream around the timed work: kernels run asynchronously, so
// a wall clock would time the launches, not the kernels.
class EventTimer final : public Timer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~EventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() override { check(cudaEventRecord(start_, stream_), "cudaEventRecord"); }
  double stop() override {
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return 1e-3 * ms;
  }
  // cudaEventElapsedTime's documented resolution: "around 0.5 microseconds".
  double resolution_s() const override { return 0.5e-6; }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal), memory_(ordinal) {
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties");
    sm_count_ = props.multiProcessorCount;
    l2_bytes_ = props.l2CacheSize;
    const int major = props.major, minor = props.minor;
    const int clock_khz = attribute(cudaDevAttrClockRate, ordinal);
    const int memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, ordinal);
    const int bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);
    info_.kind = "cuda";
    info_.vendor = "NVIDIA";
    info_.model = props.name;
    info_.arch = "sm_" + std::to_string(major) + std::to_string(minor);
    // "cuda-nvidia-h200-sm90-132sm": what a config is tuned for (the cache's folder).
    info_.id = sanitize_id("cuda " + std::string(props.name) + " sm" + std::to_string(major) +
                           std::to_string(minor) + " " + std::to_string(sm_count_) + "sm");
    info_.description = std::string(props.name) + " (sm_" + std::to_string(major) +
                        std::to_string(minor) + ", " + std::to_string(sm_count_) + " SMs, " +
                        fixed(props.totalGlobalMem / double(1 << 30), 1) + " GiB)";
    info_.properties = {{"ordinal", ordinal},
                        {"compute_capability", std::to_string(major) + "." + std::to_string(minor)},
                        {"sm_count", sm_count_},
                        {"clock_khz", clock_khz},
                        {"memory_bytes", static_cast<int64_t>(props.totalGlobalMem)},
                        {"memory_clock_khz", memory_clock_khz},
                        {"memory_bus_bits", bus_bits},
                        {"l2_bytes", l2_bytes_},
                        {"shared_memory_per_block_optin", props.sharedMemPerBlockOptin},
                        {"registers_per_sm", props.regsPerMultiprocessor}};
    // Double data rate: two transfers per memory clock.
    theoretical_gbps_ = 2.0 * memory_clock_khz * 1e3 * (bus_bits / 8.0) * 1e-9;
  }

  int ordinal() const { return ordinal_; }

  void* scratch(size_t bytes) const {
    if (bytes > scratch_bytes_) {
      // cudaFree waits for the work that may still use the old buffer.
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      scratch_ = memory_.allocate(bytes);
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }
  std::mutex& scratch_mutex() const { return scratch_mutex_; }

  cudaStream_t stream() const {
    std::call_once(stream_once_, [&] {
      check(cudaSetDevice(ordinal_), "cudaSetDevice");
      check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    });
    return stream_;
  }

  const DeviceInfo& info() const override { return info_; }

  const Ceilings& ceilings(bool remeasure) const override {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!ceilings_.empty() && !remeasure) return *ceilings_.back();
    auto measure = [&] {
      std::cerr << "tokamax: measuring the roofline ceilings of " << info_.id
                << " (stored for later runs)\n";
      check(cudaSetDevice(ordinal_), "cudaSetDevice");
      Ceilings measured;
      measured.f32_fma_gflops = measure_f32_fma_gflops(stream(), sm_count_);
      measured.f64_fma_gflops = measure_f64_fma_gflops(stream(), sm_count_);
      measured.bf16_dot_gflops = tensor_core_peak(*this, stream(), sm_count_, /*bf16=*/true);
      measured.f16_dot_gflops = tensor_core_peak(*this, stream(), sm_count_, /*bf16=*/false);
      measured.bandwidth_gbps = probe_bandwidth_gbps();
      return measured;
    };
    const std::string path = ceilings_path();
    Ceilings result;
    if (path.empty()) {
      result = measure();
      result.device_id = info_.id;
      result.measured_at = utc_now();
    } else {
      result = load_or_measure_ceilings(path, info_.id, measure, remeasure, std::cerr).ceilings;
    }
    ceilings_.push_back(std::make_unique<Ceilings>(std::move(result)));
    return *ceilings_.back();
  }

  std::string ceilings_path() const override {
    try {
      return tokamax::ceilings_path(info_.id);
    } catch (const std::exception&) {
      return "";
    }
  }

  // A copy over buffers of 8 x the L2 each (at least 256 MiB), so that it streams from HBM.
  double probe_bandwidth_gbps() const override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    const size_t bytes = std::max<size_t>(size_t{8} * l2_bytes_, size_t{256} << 20);
    return measure_copy_gbps(stream(), bytes, 5);
  }

  const Memory& memory() const override { return memory_; }
  std::unique_ptr<Timer> timer() const override { return std::make_unique<EventTimer>(stream()); }
  // Four launches per sample: the host's launch latency (and a CUTLASS call's initialize) of all
  // but the first hides behind the previous call's kernels, as in an application's stream.
  int64_t min_calls_per_sample() const override { return 4; }
  void synchronize() const override {
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
  CacheSize last_level_cache() const override { return {l2_bytes_, "cudaDevAttrL2CacheSize"}; }

  std::vector<InfoRow> info_rows() const override {
    const Ceilings& c = ceilings(false);
    const nlohmann::json& p = info_.properties;
    auto tflops = [](double gflops) { return fixed(gflops * 1e-3, 1) + " TFLOP/s"; };
    return {{"compute capability", p["compute_capability"].get<std::string>()},
            {"SMs", std::to_string(sm_count_)},
            {"clock", fixed(p["clock_khz"].get<int>() * 1e-3, 0) + " MHz"},
            {"memory", fixed(p["memory_bytes"].get<int64_t>() / double(1 << 30), 1) + " GiB, " +
                           fixed(theoretical_gbps_, 0) + " GB/s theoretical"},
            {"L2", std::to_string(l2_bytes_ >> 20) + " MiB"},
            {"bf16 tensor-core peak", tflops(c.bf16_dot_gflops) + " (" + tensor_core_peak_method()},
            {"f16 tensor-core peak", tflops(c.f16_dot_gflops) + " (" + tensor_core_peak_method()},
            {"f32 FMA peak", tflops(c.f32_fma_gflops)},
            {"f64 FMA peak", tflops(c.f64_fma_gflops)},
            {"memory bandwidth", fixed(c.bandwidth_gbps, 1) + " GB/s (device copy, read + write)"}};
  }
  nlohmann::json info_json() const override {
    return {{"theoretical_bandwidth_gbps", theoretical_gbps_}};
  }
  nlohmann::json measurement_context() const override { return {{"l2_bytes", l2_bytes_}}; }

 private:
  int ordinal_;
  DeviceMemory memory_;
  DeviceInfo info_;
  int sm_count_ = 0;
  int64_t l2_bytes_ = 0;
  double theoretical_gbps_ = 0;
  mutable std::once_flag stream_once_;
  mutable cudaStream_t stream_ = nullptr;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Ceilings>> ceilings_;
  mutable std::mutex scratch_mutex_;
  mutable void* scratch_ = nullptr;
  mutable size_t scratch_bytes_ = 0;
};

struct Discovery {
  std::vector<std::unique_ptr<CudaDevice>> owned;
  std::vector<const Device*> devices;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery found = [] {
    Discovery d;
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();
      d.reason = "no CUDA device: " + error_text(error);
      return d;
    }
    if (count == 0) d.reason = "no CUDA device: the runtime reports none";
    for (int i = 0; i < count; ++i) {
      try {
        d.owned.push_back(std::make_unique<CudaDevice>(i));
        d.devices.push_back(d.owned.back().get());
      } catch (const std::exception& e) {
        if (d.reason.empty()) d.reason = std::string("no usable CUDA device: ") + e.what();
      }
    }
    if (!d.devices.empty()) d.reason.clear();
    return d;
  }();
  return found;
}

const CudaDevice& as_cuda(const Device& device) {
  if (const auto* cuda = dynamic_cast<const CudaDevice*>(&device)) return *cuda;
  throw std::invalid_argument("a CUDA implementation was given the '" + device.kind() +
                              "' device " + device.id());
}

}  // namespace

const std::vector<const Device*>& devices() { return discovery().devices; }

void add_tensor_core_probe(std::string name, TensorCoreProbe probe) {
  const std::lock_guard<std::mutex> lock(probes_mutex());
  probes().push_back({std::move(name), probe});
}

std::vector<std::string> tensor_core_probe_names() {
  const std::lock_guard<std::mutex> lock(probes_mutex());
  std::vector<std::string> names;
  for (const NamedProbe& p : probes()) names.push_back(p.name);
  return names;
}

const std::string& unavailable_reason() { return discovery().reason; }

void* stream(const Device& device) { return as_cuda(device).stream(); }

int ordinal(const Device& device) { return as_cuda(device).ordinal(); }

void memset_async(const Device& device, void* p, size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(p, 0, bytes, static_cast<cudaStream_t>(stream(device))), "cudaMemsetAsync");
}

void copy_to_host(const Device& device, void* host, const void* device_ptr, size_t bytes) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream(device));
  check(cudaMemcpyAsync(host, device_ptr, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void* scratch(const Device& device, size_t bytes) { return as_cuda(device).scratch(bytes); }

std::mutex& scratch_mutex(const Device& device) { return as_cuda(device).scratch_mutex(); }

}  // namespace tokamax::cuda
