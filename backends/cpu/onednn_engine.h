// The process-wide oneDNN CPU engine, and a one-line description of the library for metadata.
//
// Threads: Debian's oneDNN 2.6 uses the OpenMP runtime (DNNL_CPU_RUNTIME == OMP, libgomp). Its
// thread count is OpenMP's (OMP_NUM_THREADS, default all cores) and cannot be set per primitive
// without linking OpenMP ourselves, so the baselines leave threads to the runtime.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace tokamax::cpu {

// oneDNN primitives (or groups of them) created once per key and reused: creating one (JIT code
// generation) costs far more than running a small one, and a workload repeats a handful of
// shapes. Creation happens under the lock, so concurrent first calls do not JIT the same kernel
// twice; past `max_entries` (a long tune over many shapes) the cache starts over rather than grow.
// `Value` is returned by value: dnnl primitives are reference-counted handles, and a group that is
// not copyable is held as a shared_ptr.
template <typename Key, typename Value>
class OneDnnPrimitiveCache {
 public:
  explicit OneDnnPrimitiveCache(size_t max_entries) : max_entries_(max_entries) {}

  // The value of `key`, made with create() on first use (what create throws propagates and
  // nothing is cached).
  template <typename Create>
  Value get(const Key& key, Create&& create) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    Value value = create();
    if (entries_.size() >= max_entries_) entries_.clear();
    entries_.emplace(key, value);
    ++created_;
    return value;
  }

  // Values created so far (a repeated key creates none).
  int64_t created() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return created_;
  }

 private:
  const size_t max_entries_;
  mutable std::mutex mutex_;
  std::map<Key, Value> entries_;
  int64_t created_ = 0;
};

// dnnl::engine(cpu, 0), created on first use. Engines are thread-safe; streams are not, so
// callers make their own (a CPU stream is cheap).
const dnnl::engine& onednn_engine();

// "oneDNN 2.6.3 (git 52b5f10) cpu_runtime=OpenMP isa=avx512_core_bf16 threads=OpenMP runtime".
std::string onednn_description();

// "avx512_core_bf16", ...: the ISA oneDNN's JIT kernels target on this CPU.
std::string onednn_cpu_isa_name(dnnl::cpu_isa isa);

// Whether oneDNN's int8 matmul accumulates exactly on this CPU. With VNNI (avx2_vnni,
// avx512_core_vnni and up) each u8 x s8 product goes straight into int32 (vpdpbusd). Without it
// (avx2, avx512_core) oneDNN 2.x shifts s8 sources to u8 and sums pairs of products in saturating
// 16-bit (vpmaddubsw): two products of 255 x 127 clip at 32767, and so do the results.
bool onednn_int8_exact();

// What every oneDNN baseline's describe() starts from: library, description, version and the
// ISA its kernels run; implementations add what they compose ("composite", "epilogue").
nlohmann::json onednn_describe();

// A dense row-major [rows, cols] memory descriptor (no padding).
dnnl::memory::desc onednn_plain_desc(int64_t rows, int64_t cols, dnnl::memory::data_type type);

// "" when oneDNN has an in x in -> out matmul on this CPU, else oneDNN's reason and its ISA;
// probed once per type pair with a 1x1x1 primitive descriptor (cheap: no code is generated),
// thread-safe.
std::string onednn_matmul_unavailable(dnnl::memory::data_type in,
                                      dnnl::memory::data_type out = dnnl::memory::data_type::f32);

}  // namespace tokamax::cpu
