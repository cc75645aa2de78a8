// cuDNN through cudnn-frontend's dynamic loading (libcudnn.so.9 opened here, on first use), a
// handle per device and process on the device's stream, and the MoE grouped matmul graph of the
// ragged_dot baseline, built once per device and shape.
//
// Dimensions: as cudnn.h (E experts, T tokens, K contraction, N outputs).
#include "backends/cuda/cudnn.h"

// The frontend calls cuDNN through the handle opened below instead of linking it, and leaves out
// its JSON serialization (the project's own nlohmann/json is a different version).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_device.h"

namespace cudnn_frontend {
// The library the frontend's calls go to (cudnn_frontend_shim.h): set once, by library().
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace tokamax::cuda {
namespace {

namespace fe = cudnn_frontend;

constexpr const char* kSoname = "libcudnn.so.9";
constexpr size_t kMoeMinVersion = 91500;  // CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR

// 91900 -> "9.19.0".
std::string version_text(size_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

struct Library {
  size_t version = 0;
  std::string error;  // why it cannot be used; "" when it can
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      l.error = std::string(kSoname) + " not found" + (why ? std::string(": ") + why : "");
      return l;
    }
    fe::cudnn_dlhandle = handle;
    try {
      l.version = fe::detail::get_backend_version();
    } catch (const std::exception& e) {
      l.error = std::string(kSoname) + ": " + e.what();
      return l;
    }
    if (l.version < kMoeMinVersion) {
      l.error = "cuDNN " + version_text(l.version) + " (" + kSoname +
                ") predates the MoE grouped matmul (9.15)";
    }
    return l;
  }();
  return lib;
}

fe::DataType_t data_type(Element element) {
  switch (element) {
    case Element::kBF16:
      return fe::DataType_t::BFLOAT16;
    case Element::kF16:
      return fe::DataType_t::HALF;
    case Element::kF32:
      return fe::DataType_t::FLOAT;
  }
  return fe::DataType_t::FLOAT;
}

enum Uid : int64_t { kToken = 1, kWeight, kFirstRow, kOut };

// The graph: token[1, T, K] and weight[E, K, N] row-major, first_row[E, 1, 1] int32,
// out[1, T, N] row-major.
std::shared_ptr<fe::graph::Graph> make_graph(const MoeMatmul& s) {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(data_type(s.in))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto token = graph->tensor(fe::graph::Tensor_attributes()
                                 .set_name("token")
                                 .set_uid(kToken)
                                 .set_dim({1, s.T, s.K})
                                 .set_stride({s.T * s.K, s.K, 1})
                                 .set_data_type(data_type(s.in)));
  auto weight = graph->tensor(fe::graph::Tensor_attributes()
                                  .set_name("weight")
                                  .set_uid(kWeight)
                                  .set_dim({s.E, s.K, s.N})
                                  .set_stride({s.K * s.N, s.N, 1})
                                  .set_data_type(data_type(s.in)));
  auto first_row = graph->tensor(fe::graph::Tensor_attributes()
                                     .set_name("first_row")
                                     .set_uid(kFirstRow)
                                     .set_dim({s.E, 1, 1})
                                     .set_stride({1, 1, 1})
                                     .set_data_type(fe::DataType_t::INT32));
  auto attributes = fe::graph::Moe_grouped_matmul_attributes()
                        .set_name("ragged_dot")
                        .set_mode(fe::MoeGroupedMatmulMode_t::NONE)
                        .set_compute_data_type(fe::DataType_t::FLOAT);
  auto out = graph->moe_grouped_matmul(token, weight, first_row, nullptr, nullptr, attributes);
  out->set_output(true)
      .set_uid(kOut)
      .set_data_type(data_type(s.out))
      .set_dim({1, s.T, s.N})
      .set_stride({s.T * s.N, s.N, 1});
  return graph;
}

// Runs `step` and turns a frontend error (returned or thrown) into its message; "" on success.
template <class Step>
std::string attempt(const char* what, Step&& step) {
  try {
    fe::error_t status = step();
    if (status.is_good()) return "";
    return std::string(what) + ": " + status.get_message();
  } catch (const std::exception& e) {
    return std::string(what) + ": " + e.what();
  }
}

using Key = std::tuple<const Device*, int, int, int64_t, int64_t, int64_t, int64_t>;

Key key_of(const Device& device, const MoeMatmul& s) {
  return {&device, static_cast<int>(s.in), static_cast<int>(s.out), s.E, s.T, s.K, s.N};
}

// A built graph, or why there is none; per device and shape, for the process.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  std::string error;
};

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

// The device's handle, on its stream (the caller holds mutex()).
cudnnHandle_t handle_for(const Device& device) {
  static std::map<const Device*, cudnnHandle_t> handles;
  cudnnHandle_t& handle = handles[&device];
  if (handle == nullptr) {
    check(cudaSetDevice(ordinal(device)), "cudaSetDevice");
    const cudnnStatus_t created = fe::detail::create_handle(&handle);
    if (created != CUDNN_STATUS_SUCCESS) {
      handle = nullptr;
      throw std::runtime_error(std::string("cudnnCreate: ") +
                               fe::detail::get_error_string(created));
    }
    fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream(device)));
  }
  return handle;
}

// The plan of `shape` on `device`, built on first use (the caller holds mutex()).
const Plan& plan_for(const Device& device, const MoeMatmul& shape) {
  static std::map<Key, Plan> plans;
  const Key key = key_of(device, shape);
  auto found = plans.find(key);
  if (found != plans.end()) return found->second;
  Plan plan;
  plan.error = library().error;
  if (plan.error.empty()) {
    try {
      cudnnHandle_t handle = handle_for(device);
      auto graph = make_graph(shape);
      plan.error = attempt("validate", [&] { return graph->validate(); });
      if (plan.error.empty()) {
        plan.error =
            attempt("build_operation_graph", [&] { return graph->build_operation_graph(handle); });
      }
      if (plan.error.empty()) {
        plan.error = attempt("create_execution_plans", [&] {
          return graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
        });
      }
      if (plan.error.empty()) {
        plan.error = attempt("check_support", [&] { return graph->check_support(handle); });
      }
      if (plan.error.empty()) {
        plan.error = attempt("build_plans", [&] {
          return graph->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
        });
      }
      if (plan.error.empty()) {
        plan.error = attempt("get_workspace_size",
                             [&] { return graph->get_workspace_size(plan.workspace_bytes); });
      }
      if (plan.error.empty()) plan.graph = std::move(graph);
    } catch (const DeviceFault&) {
      throw;
    } catch (const std::exception& e) {
      plan.error = e.what();
    }
  }
  return plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

const std::string& cudnn_unavailable() { return library().error; }

std::string cudnn_description() {
  const Library& l = library();
  if (!l.error.empty() && l.version == 0) return l.error;
  return "cuDNN " + version_text(l.version) + " (" + kSoname + ")";
}

std::string moe_graph_error(const MoeMatmul& shape, int sm_version) {
  if (!library().error.empty()) return library().error;
  auto graph = make_graph(shape);
  graph->set_sm_version(sm_version);
  return attempt("validate", [&] { return graph->validate(); });
}

std::string moe_plan_error(const Device& device, const MoeMatmul& shape) {
  const std::lock_guard<std::mutex> lock(mutex());
  return plan_for(device, shape).error;
}

int64_t moe_workspace_bytes(const Device& device, const MoeMatmul& shape) {
  const std::lock_guard<std::mutex> lock(mutex());
  return plan_for(device, shape).workspace_bytes;
}

void moe_grouped_matmul(const Device& device, const MoeMatmul& shape, const void* token,
                        const void* weight, const int32_t* first_row, void* out, void* workspace) {
  const std::lock_guard<std::mutex> lock(mutex());
  const Plan& plan = plan_for(device, shape);
  if (!plan.error.empty()) throw std::runtime_error("cuDNN MoE grouped matmul: " + plan.error);
  std::unordered_map<int64_t, void*> pointers = {{kToken, const_cast<void*>(token)},
                                                 {kWeight, const_cast<void*>(weight)},
                                                 {kFirstRow, const_cast<int32_t*>(first_row)},
                                                 {kOut, out}};
  fe::error_t status = plan.graph->execute(handle_for(device), pointers, workspace);
  if (status.is_bad()) {
    check_context("cuDNN execute");  // a kernel before it faulted: the device is lost
    throw std::runtime_error("cuDNN execute: " + status.get_message());
  }
}

}  // namespace tokamax::cuda
