// oneMKL loaded with dlopen from the pinned wheel's libraries (.deps/mkl/lib).
#include "backends/cpu/mkl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace tokamax::cpu {
namespace {

// mkl_service.h's codes.
constexpr int kMklInterfaceLp64 = 0;
constexpr int kMklThreadingSequential = 1;
constexpr int kMklThreadingGnu = 3;

template <typename Fn>
bool resolve(void* library, const char* name, Fn& fn, std::string& error) {
  dlerror();  // clear a stale error so the check below reports this lookup only
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (fn == nullptr) {
    const char* why = dlerror();
    error = std::string("oneMKL library has no ") + name + (why ? std::string(": ") + why : "");
    return false;
  }
  return true;
}

}  // namespace

std::string mkl_library_path() {
  const char* chosen = std::getenv("TOKAMAX_MKL_LIBRARY");
  if (chosen != nullptr && *chosen != '\0') return chosen;
#ifdef TOKAMAX_MKL_DIR
  return std::string(TOKAMAX_MKL_DIR) + "/libmkl_rt.so.3";
#else
  return "libmkl_rt.so.3";
#endif
}

Mkl load_mkl(const std::string& path) {
  Mkl mkl;
  mkl.path = path;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    mkl.error = "cannot load " + path + ": " + (why ? why : "unknown dlopen error") +
                " (scripts/install_deps.sh unpacks the pinned oneMKL wheel into .deps/mkl)";
    return mkl;
  }
  // The handle is never closed: the function pointers live as long as the process.
  int (*set_interface)(int) = nullptr;
  int (*set_threading)(int) = nullptr;
  void (*version)(char*, int) = nullptr;
  if (!resolve(library, "MKL_Set_Interface_Layer", set_interface, mkl.error) ||
      !resolve(library, "MKL_Set_Threading_Layer", set_threading, mkl.error) ||
      !resolve(library, "MKL_Get_Version_String", version, mkl.error) ||
      !resolve(library, "cblas_sgemm", mkl.cblas_sgemm, mkl.error) ||
      !resolve(library, "cblas_sgemm_batch", mkl.cblas_sgemm_batch, mkl.error) ||
      !resolve(library, "cblas_gemm_bf16bf16f32", mkl.cblas_gemm_bf16bf16f32, mkl.error) ||
      !resolve(library, "MKL_Set_Num_Threads", mkl.set_num_threads, mkl.error) ||
      !resolve(library, "MKL_Get_Max_Threads", mkl.get_max_threads, mkl.error)) {
    return mkl;
  }
  // Both take effect only before the first computational call, which has not happened: a
  // MKL_INTERFACE_LAYER or MKL_THREADING_LAYER in the environment would otherwise decide them.
  set_interface(kMklInterfaceLp64);
  const char* threading = std::getenv("TOKAMAX_MKL_THREADING");
  const bool sequential = threading != nullptr && std::string(threading) == "sequential";
  set_threading(sequential ? kMklThreadingSequential : kMklThreadingGnu);
  mkl.threading = sequential ? "sequential" : "GNU OpenMP";
  char text[256] = {};
  version(text, sizeof(text));
  mkl.version = text;
  return mkl;
}

namespace {

// Loaded once, on first use, whether it succeeds or not.
const Mkl& process_mkl() {
  static const Mkl mkl = load_mkl(mkl_library_path());
  return mkl;
}

}  // namespace

const Mkl* mkl() {
  const Mkl& loaded = process_mkl();
  return loaded.error.empty() ? &loaded : nullptr;
}

const std::string& mkl_error() { return process_mkl().error; }

std::unique_lock<std::mutex> mkl_threads(const Mkl& mkl, int threads) {
  static std::mutex mutex;
  std::unique_lock<std::mutex> lock(mutex);
  if (mkl.get_max_threads() != threads) mkl.set_num_threads(threads);
  return lock;
}

nlohmann::json mkl_describe() {
  const Mkl* loaded = mkl();
  if (loaded == nullptr) return {{"library", "oneMKL"}, {"error", mkl_error()}};
  return {{"library", "oneMKL"},
          {"version", loaded->version},
          {"path", loaded->path},
          {"threading", loaded->threading}};
}

}  // namespace tokamax::cpu
