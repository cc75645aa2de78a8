// The registry of ops: what `tokamax list` and every command enumerate.
#pragma once

#include <string_view>
#include <vector>

#include "ops/framework/op.h"
#include "ops/framework/op_lookup.h"  // find_op

namespace tokamax {

// Every op, in a stable order.
const std::vector<const Op*>& all_ops();
// Adds an op that is not part of the library (a test build's fault-injection op), after the
// library's own. Must be called before the first all_ops() / find_op(), i.e. first in main().
void register_extra_op(const Op& op);

}  // namespace tokamax
