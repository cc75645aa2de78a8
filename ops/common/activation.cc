// Activation names and constants.
#include "ops/common/activation.h"

#include <string>

#include "ops/framework/errors.h"

namespace tokamax {

namespace {
constexpr Activation kAll[] = {Activation::kNone,     Activation::kSilu,    Activation::kGelu,
                               Activation::kGeluTanh, Activation::kSigmoid, Activation::kRelu};
}  // namespace

std::string_view activation_name(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kSilu:
      return "silu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kRelu:
      return "relu";
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  std::string known;
  for (Activation activation : kAll) {
    if (activation_name(activation) == name) return activation;
    known += (known.empty() ? "" : ", ") + std::string(activation_name(activation));
  }
  throw InvalidArgument(
      "unknown activation '" + std::string(name) + "' (expected one of " + known + ")",
      "activation");
}

double activation_lipschitz(Activation activation) {
  switch (activation) {
    case Activation::kNone:
    case Activation::kRelu:
      return 1.0;
    case Activation::kSilu:
      return 1.1;  // max of x * sigmoid(x)' is 1.0998 near x = 2.4
    case Activation::kGelu:
    case Activation::kGeluTanh:
      return 1.13;  // max slope 1.1289 near x = 1.4
    case Activation::kSigmoid:
      return 0.25;
  }
  return 1.0;
}

double activation_curvature(Activation activation) {
  switch (activation) {
    case Activation::kNone:
    case Activation::kRelu:
      return 0.0;
    case Activation::kSilu:
      return 0.5;
    case Activation::kGelu:
      return 0.7979;
    case Activation::kGeluTanh:
      return 0.81;
    case Activation::kSigmoid:
      return 0.0963;
  }
  return 1.0;
}

}  // namespace tokamax
