// OpenBLAS loaded lazily with dlopen, after OPENBLAS_CORETYPE has been chosen for this CPU.
#include "backends/cpu/openblas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_info.h"

namespace tokamax::cpu {
namespace {

constexpr char kCoretypeVariable[] = "OPENBLAS_CORETYPE";

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Resolves `name` into `fn`; false (and `error` set) when a required symbol is missing.
template <typename Fn>
bool resolve(void* library, const char* name, Fn& fn, bool required, std::string& error) {
  dlerror();  // clear a stale error so the check below reports this lookup only
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (fn == nullptr && required) {
    const char* why = dlerror();
    error = std::string("OpenBLAS library has no ") + name + (why ? std::string(": ") + why : "");
    return false;
  }
  return true;
}

}  // namespace

std::string choose_openblas_coretype(const CpuInfo& device) {
  if (device.arch != "x86_64") return "";
  // OpenBLAS's SkylakeX kernels use AVX-512 BW/VL as well as F; Xeon Phi has F alone.
  if (device.has("avx512f") && device.has("avx512bw") && device.has("avx512vl")) {
    return "SkylakeX";
  }
  // Haswell kernels need only AVX2+FMA; its "Zen" target uses the same kernels.
  if (device.has("avx2") && device.has("fma")) return "Haswell";
  return "";
}

OpenBlas load_openblas(const std::string& soname, const CpuInfo& device) {
  OpenBlas blas;
  blas.soname = soname;
  // A library already in the process has read the variable; setting it now would only mislead.
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  blas.loaded_before_us = library != nullptr;
  blas.coretype_env = getenv_or_empty(kCoretypeVariable);
  if (!blas.loaded_before_us && blas.coretype_env.empty()) {
    const std::string chosen = choose_openblas_coretype(device);
    // setenv races with concurrent getenv in other threads; this runs once, on first use.
    if (!chosen.empty() && setenv(kCoretypeVariable, chosen.c_str(), /*overwrite=*/0) == 0) {
      blas.coretype_env = getenv_or_empty(kCoretypeVariable);
      blas.coretype_set_by_us = blas.coretype_env == chosen;
    }
  }
  if (library == nullptr) library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    blas.error = "cannot load " + soname + ": " + (why ? why : "unknown dlopen error") +
                 " (install Debian's libopenblas0)";
    return blas;
  }
  // The handle is never closed: the function pointers live as long as the process.
  if (!resolve(library, "cblas_sgemm", blas.cblas_sgemm, true, blas.error) ||
      !resolve(library, "cblas_sbgemm", blas.cblas_sbgemm, false, blas.error) ||
      !resolve(library, "openblas_get_corename", blas.get_corename, true, blas.error) ||
      !resolve(library, "openblas_get_config", blas.get_config, false, blas.error) ||
      !resolve(library, "openblas_set_num_threads", blas.set_num_threads, true, blas.error) ||
      !resolve(library, "openblas_get_num_threads", blas.get_num_threads, true, blas.error)) {
    return blas;
  }
  const char* corename = blas.get_corename();
  blas.core_type = corename ? corename : "";
  if (blas.get_config != nullptr) {
    const char* config = blas.get_config();
    blas.config = config ? config : "";
  }
  return blas;
}

namespace {

// Loaded once, on first use, whether it succeeds or not.
const OpenBlas& process_openblas() {
  static const OpenBlas blas = load_openblas("libopenblas.so.0", host_cpu());
  return blas;
}

}  // namespace

const OpenBlas* openblas() {
  const OpenBlas& blas = process_openblas();
  return blas.error.empty() ? &blas : nullptr;
}

const std::string& openblas_error() { return process_openblas().error; }

std::string openblas_description() {
  const OpenBlas* blas = openblas();
  if (blas == nullptr) return "OpenBLAS unavailable: " + openblas_error();
  std::string text = blas->config.empty() ? "OpenBLAS" : blas->config;
  text += "; core=" + blas->core_type;
  if (blas->coretype_env.empty()) {
    text += " (OPENBLAS_CORETYPE unset: detected by OpenBLAS)";
  } else {
    text += " (OPENBLAS_CORETYPE=" + blas->coretype_env +
            (blas->coretype_set_by_us ? " set by tokamax" : " set by the user") + ")";
  }
  if (blas->loaded_before_us) text += "; loaded before tokamax could choose the core type";
  if (blas->cblas_sbgemm == nullptr) text += "; no cblas_sbgemm";
  return text;
}

}  // namespace tokamax::cpu
