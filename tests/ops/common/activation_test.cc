// Tests for the shared activation definitions.
#include "ops/common/activation.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "ops/framework/errors.h"

using namespace tokamax;

TEST_CASE("activation names round-trip and unknown names name the field", "[activation]") {
  for (const char* name : {"none", "silu", "gelu", "gelu_tanh", "sigmoid", "relu"}) {
    CHECK(activation_name(parse_activation(name)) == name);
  }
  try {
    parse_activation("swish");
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "activation");
    CHECK(std::string(e.what()).find("gelu_tanh") != std::string::npos);
  }
}

TEST_CASE("activations match their textbook values", "[activation]") {
  CHECK(apply_activation(Activation::kNone, -2.0) == -2.0);
  CHECK(apply_activation(Activation::kRelu, -2.0) == 0.0);
  CHECK(apply_activation(Activation::kRelu, 3.0) == 3.0);
  CHECK(apply_activation(Activation::kSigmoid, 0.0) == 0.5);
  CHECK(apply_activation(Activation::kSilu, 1.0) == Approx(0.7310585786300049));
  CHECK(apply_activation(Activation::kGelu, 1.0) == Approx(0.8413447460685429));
  CHECK(apply_activation(Activation::kGeluTanh, 1.0) == Approx(0.8411919906082768));
  CHECK(apply_activation(Activation::kSigmoid, -1000.0) == 0.0);
  CHECK(apply_activation(Activation::kSilu, -1000.0f) == 0.0f);
  // The Lipschitz bounds really bound the slope.
  for (Activation a : {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh,
                       Activation::kSigmoid, Activation::kRelu}) {
    for (double x = -8; x < 8; x += 0.01) {
      const double slope = (apply_activation(a, x + 1e-6) - apply_activation(a, x)) / 1e-6;
      REQUIRE(std::abs(slope) <= activation_lipschitz(a) + 1e-4);
    }
  }
}

TEST_CASE("activation derivatives match central differences and the curvature bounds hold",
          "[activation]") {
  for (Activation a : {Activation::kNone, Activation::kSilu, Activation::kGelu,
                       Activation::kGeluTanh, Activation::kSigmoid, Activation::kRelu}) {
    CAPTURE(activation_name(a));
    for (double x = -8.005; x < 8; x += 0.01) {  // never exactly at relu's kink
      CAPTURE(x);
      const double h = 1e-6;
      const double fd = (apply_activation(a, x + h) - apply_activation(a, x - h)) / (2 * h);
      REQUIRE(activation_derivative(a, x) == Approx(fd).margin(1e-8).epsilon(1e-7));
      const double curvature =
          (activation_derivative(a, x + h) - activation_derivative(a, x - h)) / (2 * h);
      REQUIRE(std::abs(curvature) <= activation_curvature(a) + 1e-5);
    }
  }
  CHECK(activation_derivative(Activation::kRelu, 0.0) == 0.0);
  CHECK(activation_derivative(Activation::kSilu, -1000.0f) == 0.0f);
}
