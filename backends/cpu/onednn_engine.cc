// The process-wide oneDNN CPU engine, and a one-line description of the library for metadata.
#include "backends/cpu/onednn_engine.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace tokamax::cpu {
namespace {

std::string runtime_name(unsigned runtime) {
  switch (runtime) {
    case DNNL_RUNTIME_NONE:
      return "none";
    case DNNL_RUNTIME_SEQ:
      return "sequential";
    case DNNL_RUNTIME_OMP:
      return "OpenMP";
    case DNNL_RUNTIME_TBB:
      return "TBB";
    case DNNL_RUNTIME_THREADPOOL:
      return "threadpool";
    default:
      return "runtime " + std::to_string(runtime);
  }
}

}  // namespace

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::string onednn_cpu_isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::all:
      return "all";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
  }
  return "isa " + std::to_string(static_cast<int>(isa));
}

bool onednn_int8_exact() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return true;
    default:
      return false;
  }
}

std::string onednn_description() {
  const dnnl::version_t* v = dnnl::version();
  std::string text = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                     std::to_string(v->patch);
  const std::string hash = v->hash ? v->hash : "";
  if (!hash.empty() && hash != "N/A") text += " (git " + hash.substr(0, 10) + ")";
  text += " cpu_runtime=" + runtime_name(v->cpu_runtime);
  text += " isa=" + onednn_cpu_isa_name(dnnl::get_effective_cpu_isa());
  // Only the OpenMP runtime reads OMP_NUM_THREADS; name where the thread count comes from.
  if (v->cpu_runtime == DNNL_RUNTIME_OMP) text += " threads=OpenMP runtime (OMP_NUM_THREADS)";
  return text;
}

nlohmann::json onednn_describe() {
  const dnnl::version_t* v = dnnl::version();
  return {{"library", "oneDNN"},
          {"description", onednn_description()},
          {"version", std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                          std::to_string(v->patch)},
          {"isa", onednn_cpu_isa_name(dnnl::get_effective_cpu_isa())}};
}

dnnl::memory::desc onednn_plain_desc(int64_t rows, int64_t cols, dnnl::memory::data_type type) {
  return dnnl::memory::desc({rows, cols}, type, dnnl::memory::format_tag::ab);
}

std::string onednn_matmul_unavailable(dnnl::memory::data_type in, dnnl::memory::data_type out) {
  static std::mutex mutex;
  static std::map<std::pair<dnnl::memory::data_type, dnnl::memory::data_type>, std::string> reasons;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = reasons.find({in, out});
  if (it != reasons.end()) return it->second;
  std::string why;
  try {
    const dnnl::matmul::desc desc(onednn_plain_desc(1, 1, in), onednn_plain_desc(1, 1, in),
                                  onednn_plain_desc(1, 1, out));
    dnnl::matmul::primitive_desc(desc, onednn_engine());
  } catch (const dnnl::error& e) {
    why = std::string(e.what()) +
          " (oneDNN's cpu isa here: " + onednn_cpu_isa_name(dnnl::get_effective_cpu_isa()) + ")";
  }
  reasons.emplace(std::make_pair(in, out), why);
  return why;
}

}  // namespace tokamax::cpu
