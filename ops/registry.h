// The registry of ops: what `tokamax list` and every command enumerate.
#pragma once

#include <string_view>
#include <vector>

#include "ops/op.h"

namespace tokamax {

// Every op, in a stable order.
const std::vector<const Op*>& all_ops();
// Throws InvalidArgument listing the known ops.
const Op& find_op(std::string_view name);

}  // namespace tokamax
