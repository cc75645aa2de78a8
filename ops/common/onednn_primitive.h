// The oneDNN vendor baselines: their implementation class and the creation of their primitives.
#pragma once

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/config.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax {

// An op's "onednn" implementation: a vendor baseline describing oneDNN's version and ISA (an
// implementation adds what it wires to the description).
template <typename Problem, typename Config = EmptyConfig>
class OneDnnImplementation : public TypedImplementation<Problem, Config> {
 public:
  std::string_view name() const override { return "onednn"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override { return cpu::onednn_describe(); }
};

// Returns make(), which creates oneDNN primitives. oneDNN has no kernel for some descriptors on
// some CPUs (status unimplemented): a case the baseline does not support, not a failure, so it
// becomes NotImplemented naming `what` ("matmul for M=.., K=.., N=.."), oneDNN's message and the
// ISA oneDNN runs on here. Any other oneDNN error propagates unchanged.
template <typename Make>
auto create_onednn(const std::string& what, Make&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) {
      throw NotImplemented("onednn: no " + what + ": " + e.what() + " (oneDNN's cpu isa here: " +
                           cpu::onednn_cpu_isa_name(dnnl::get_effective_cpu_isa()) + ")");
    }
    throw;
  }
}

}  // namespace tokamax
