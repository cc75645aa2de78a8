// The list of ops compiled into the library. Explicit (not static-initializer registration) so
// the linker cannot drop an op from the static library and the order is stable.
#include "ops/registry.h"

#include <string>

#include "ops/errors.h"
#include "ops/layer_norm/api.h"
#include "ops/ragged_dot/api.h"

namespace tokamax {

const std::vector<const Op*>& all_ops() {
  static const std::vector<const Op*> ops = {&ragged_dot_op(), &layer_norm_op()};
  return ops;
}

const Op& find_op(std::string_view name) {
  std::string known;
  for (const Op* op : all_ops()) {
    if (op->name() == name) return *op;
    known += (known.empty() ? "" : ", ") + std::string(op->name());
  }
  throw InvalidArgument("unknown op '" + std::string(name) + "' (known: " + known + ")", "op");
}

}  // namespace tokamax
