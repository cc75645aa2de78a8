// Op base helpers shared by every op.
#include "ops/framework/op.h"

#include "backends/registry.h"
#include "ops/framework/errors.h"

namespace tokamax {

const Implementation& Op::implementation(std::string_view impl_name) const {
  std::string known;
  for (const Implementation* impl : implementations()) {
    if (impl->name() == impl_name) return *impl;
    known += (known.empty() ? "" : ", ") + std::string(impl->name());
  }
  throw InvalidArgument(std::string(name()) + ": unknown implementation '" +
                            std::string(impl_name) + "' (known: " + known + ")",
                        "implementation");
}

BoundArgs Op::bind(const nlohmann::json& args) const {
  BoundArgs bound = bind_canonical(args);
  for (const auto& decls : {inputs(bound), outputs(bound)}) {
    for (const TensorDecl& decl : decls) {
      try {
        (void)decl.spec.checked_size_bytes();
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string(name()) + ": " + decl.name + " " + e.what(), decl.name);
      }
    }
  }
  return bound;
}

TensorMap Op::allocate_outputs(const BoundArgs& args, const Memory& memory) const {
  TensorMap outputs;
  for (const TensorDecl& decl : this->outputs(args)) {
    outputs.emplace(decl.name, Tensor(decl.spec, memory));
  }
  return outputs;
}

Support Implementation::supported_on(const Device& device) const {
  if (device.kind() == backend()) return {};
  // No device of its kind at all: that is the reason worth reading ("no CUDA device: ...").
  for (const UnavailableBackend& unavailable : unavailable_backends()) {
    if (unavailable.kind == backend()) return {false, unavailable.reason};
  }
  return {false, std::string(name()) + " runs on " + std::string(backend()) + " devices, not on '" +
                     device.kind() + "' (" + device.id() + "): select one with --device " +
                     std::string(backend())};
}

DType Op::compute_dtype(const BoundArgs& args) const {
  DType narrowest = DType::kF64;
  for (const TensorDecl& decl : inputs(args)) {
    if (is_floating(decl.spec.dtype) && dtype_size(decl.spec.dtype) < dtype_size(narrowest)) {
      narrowest = decl.spec.dtype;
    }
  }
  return narrowest;
}

}  // namespace tokamax
