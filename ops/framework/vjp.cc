// VJP ops: splitting cotangents from the forward arguments, binding both.
#include "ops/framework/vjp.h"

#include "ops/framework/errors.h"

namespace tokamax {

std::string vjp_name(std::string_view name) { return "d" + std::string(name); }

BoundArgs bind_vjp(const Op& primal, std::string_view vjp_op, const nlohmann::json& args,
                   const std::vector<std::string>& cotangents) {
  const std::string prefix = std::string(vjp_op) + ": ";
  if (!args.is_object()) throw InvalidArgument(prefix + "args must be a mapping");
  nlohmann::json forward = args;
  for (const std::string& name : cotangents) forward.erase(name);
  BoundArgs bound;
  try {
    bound = primal.bind(forward);
  } catch (const InvalidArgument& e) {
    // The forward's message starts "<primal>: "; the user called the VJP op.
    std::string what = e.what();
    const std::string primal_prefix = std::string(primal.name()) + ": ";
    if (what.rfind(primal_prefix, 0) == 0) what = what.substr(primal_prefix.size());
    throw InvalidArgument(prefix + what, e.field());
  }
  std::string expected;
  for (const TensorDecl& out : primal.outputs(bound)) {
    expected += (expected.empty() ? "" : ", ") + vjp_name(out.name) + " " + out.spec.to_string();
  }
  for (const std::string& name : cotangents) {
    TensorSpec want;
    bool found = false;
    for (const TensorDecl& out : primal.outputs(bound)) {
      if (vjp_name(out.name) == name) {
        want = out.spec;
        found = true;
      }
    }
    if (!found) {
      throw InvalidArgument(prefix + "no forward output for cotangent '" + name + "' (the outputs' cotangents: " + expected + ")", name);
    }
    if (!args.contains(name) || args.at(name).is_null()) {
      throw InvalidArgument(prefix + "missing argument '" + name + "' (the cotangent of " +
                                std::string(primal.name()) + "'s output, " + want.to_string() +
                                ")",
                            name);
    }
    const nlohmann::json& value = args.at(name);
    if (!value.is_string()) {
      throw InvalidArgument(prefix + name + " must be a tensor spec like " + want.to_string() +
                                ", got " + value.dump(),
                            name);
    }
    TensorSpec spec;
    try {
      spec = parse_tensor_spec(value.get<std::string>());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(prefix + name + ": " + e.what(), name);
    }
    if (spec != want) {
      throw InvalidArgument(prefix + name + " must be " + want.to_string() + " (the cotangent of " +
                                std::string(primal.name()) + "'s output: its shape and dtype), got " +
                                spec.to_string(),
                            name);
    }
    bound.args[name] = spec.to_string();
  }
  bound.op = std::string(vjp_op);
  return bound;
}

BoundArgs primal_args(const Op& primal, const BoundArgs& vjp_args,
                      const std::vector<std::string>& cotangents) {
  BoundArgs bound = vjp_args;
  bound.op = std::string(primal.name());
  for (const std::string& name : cotangents) bound.args.erase(name);
  return bound;
}

}  // namespace tokamax
