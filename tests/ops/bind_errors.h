// What an op's bind rejects: the field its InvalidArgument names (tests of bind's errors).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/op.h"

namespace tokamax::testing {

// The field `op.bind(args)` names in its InvalidArgument (its message in `message` when given),
// or "<no error>".
inline std::string bind_error_field(const Op& op, const nlohmann::json& args,
                                    std::string* message = nullptr) {
  try {
    op.bind(args);
  } catch (const InvalidArgument& e) {
    if (message != nullptr) *message = e.what();
    return e.field();
  }
  return "<no error>";
}

}  // namespace tokamax::testing
