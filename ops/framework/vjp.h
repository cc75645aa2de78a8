// VJP ops: the binding every `<op>_vjp` shares. A VJP op takes its forward op's arguments (same
// names, same defaults) plus the cotangent of each forward output, named `d<output>`, and
// returns the gradient of each differentiable input, named `d<input>`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/op.h"

namespace tokamax {

// "d" + name: the cotangent of forward output `name`, or the gradient of forward input `name`.
std::string vjp_name(std::string_view name);

// Binds `args` of the VJP op `vjp_op` of `primal`: the entries named in `cotangents` (d<output>
// of the forward outputs they differentiate) are taken out, the rest is bound by primal.bind
// (its InvalidArgument re-worded as `vjp_op`'s, the field kept), and each cotangent must be a
// tensor of its forward output's spec (shape and dtype). The result is the forward's canonical
// args plus the cotangent specs, op = `vjp_op`: Problem::from of the forward op reads it as is.
BoundArgs bind_vjp(const Op& primal, std::string_view vjp_op, const nlohmann::json& args,
                   const std::vector<std::string>& cotangents);

// The forward op's BoundArgs within a VJP op's (the cotangents dropped, op = primal's name).
BoundArgs primal_args(const Op& primal, const BoundArgs& vjp_args,
                      const std::vector<std::string>& cotangents);

}  // namespace tokamax
