// ragged_gather: the high-level C++ API.
//
// Dimensions.
//   in, out, h   as in base.h
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/ragged_gather/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedGatherOp& ragged_gather_op();

struct RaggedGatherOptions {
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

// out[i] = x[indices[i]] for i in [start, end) (base.h); the other rows of the returned [out, h]
// tensor are zeros here (unspecified in the op). Throws InvalidArgument naming the argument on
// bad shapes, dtypes, a range outside [0, out], or an index in [start, end) outside [0, in).
Tensor ragged_gather(const Tensor& x,        // [in, h], any dtype
                     const Tensor& indices,  // [out] i32
                     int64_t start, int64_t end, const RaggedGatherOptions& options = {});

}  // namespace tokamax
