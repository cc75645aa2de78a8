// Creating the oneDNN primitives of a vendor baseline.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "backends/cpu/onednn_engine.h"
#include "ops/framework/errors.h"

namespace tokamax {

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
