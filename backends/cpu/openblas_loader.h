// OpenBLAS loaded lazily with dlopen, after OPENBLAS_CORETYPE has been chosen for this CPU.
//
// Debian's OpenBLAS (DYNAMIC_ARCH) misdetects recent CPUs (as "Prescott": ~6x slower kernels) and
// reads OPENBLAS_CORETYPE only once, when the library loads. So it is not linked: the first call
// of openblas() sets the variable for the detected CPU (unless the user already set it) and only
// then loads the library.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cpu/cpu_info.h"

namespace tokamax::cpu {

// CBLAS enum values (cblas.h), so that no OpenBLAS header is needed at build time.
inline constexpr int kCblasRowMajor = 101;
inline constexpr int kCblasNoTrans = 111;

// The OpenBLAS entry points the baselines use. blasint is int in Debian's LP64 build.
struct OpenBlas {
  using Sgemm = void (*)(int layout, int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc);
  // bf16 inputs (raw bits), f32 output and accumulation.
  using Sbgemm = void (*)(int layout, int trans_a, int trans_b, int M, int N, int K, float alpha,
                          const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta,
                          float* c, int ldc);

  Sgemm cblas_sgemm = nullptr;
  Sbgemm cblas_sbgemm = nullptr;  // nullptr when the build has none (Debian's 0.3.21)
  char* (*get_corename)() = nullptr;
  char* (*get_config)() = nullptr;  // optional: nullptr when absent
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;

  std::string soname;        // what was dlopen()ed
  std::string core_type;     // openblas_get_corename(): the kernels it actually uses
  std::string config;        // openblas_get_config(): version and build options
  std::string coretype_env;  // OPENBLAS_CORETYPE as the library saw it ("" = unset)
  bool coretype_set_by_us = false;
  bool loaded_before_us = false;  // already in the process: OPENBLAS_CORETYPE came too late
  std::string error;              // why loading failed; empty on success
};

// The OPENBLAS_CORETYPE that gives `device` fitting kernels: "SkylakeX" with AVX-512 F/BW/VL,
// "Haswell" with AVX2+FMA, otherwise "" (let OpenBLAS detect). Pure, for tests.
std::string choose_openblas_coretype(const CpuInfo& device);

// Sets OPENBLAS_CORETYPE for `device` unless it is already set, then dlopen()s `soname` and
// resolves the entry points. Never throws; failures are described in `error`. Each call loads
// again (dlopen reference-counts): use openblas() instead, this is for tests.
OpenBlas load_openblas(const std::string& soname, const CpuInfo& device);

// The process-wide OpenBLAS ("libopenblas.so.0" for the host CPU), loaded on first use;
// nullptr when it cannot be loaded, with the reason in openblas_error().
const OpenBlas* openblas();
const std::string& openblas_error();

// One line for metadata, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64;
// core=Haswell (OPENBLAS_CORETYPE=Haswell set by the user)", or why it is unavailable.
std::string openblas_description();

}  // namespace tokamax::cpu
