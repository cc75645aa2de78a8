// Finding an op by name from below the registry: an op that chains other ops (fused_moe's
// composite) calls them through the op model, as a user of the generic interface would, without
// including another op's files. Defined by ops/registry.cc, the one place that knows every op.
#pragma once

#include <string_view>

#include "ops/framework/op.h"

namespace tokamax {

// The op named `name`; throws InvalidArgument listing the known ops.
const Op& find_op(std::string_view name);

}  // namespace tokamax
