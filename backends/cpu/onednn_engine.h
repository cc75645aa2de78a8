// The process-wide oneDNN CPU engine, and a one-line description of the library for metadata.
//
// Threads: Debian's oneDNN 2.6 uses the OpenMP runtime (DNNL_CPU_RUNTIME == OMP, libgomp). Its
// thread count is OpenMP's (OMP_NUM_THREADS, default all cores) and cannot be set per primitive
// without linking OpenMP ourselves, so the baselines leave threads to the runtime.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace tokamax::cpu {

// dnnl::engine(cpu, 0), created on first use. Engines are thread-safe; streams are not, so
// callers make their own (a CPU stream is cheap).
const dnnl::engine& onednn_engine();

// "oneDNN 2.6.3 (git 52b5f10) cpu_runtime=OpenMP isa=avx512_core_bf16 threads=OpenMP runtime".
std::string onednn_description();

// "avx512_core_bf16", ...: the ISA oneDNN's JIT kernels target on this CPU.
std::string onednn_cpu_isa_name(dnnl::cpu_isa isa);

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
