// The fault-injection op of the test builds: ragged_dot math, misbehaving on demand.
#include "tests/support/fault_injection_op.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "backends/device.h"
#include "ops/framework/errors.h"

namespace tokamax::testing {
namespace {

const char* const kModes[] = {"ok",    "wrong", "throw",        "crash",
                              "abort", "hang",  "device_fault", "invalid"};

// ragged_dot's problem under the op's own name.
struct FaultProblem : RaggedDotProblem {
  static constexpr std::string_view kOp = "fault_injection";
  static FaultProblem from(const BoundArgs& args) { return {RaggedDotProblem::from(args)}; }
};

class FaultyRaggedDot final : public TypedImplementation<FaultProblem, FaultConfig> {
 public:
  FaultyRaggedDot(std::string name, bool injects) : name_(std::move(name)), injects_(injects) {}
  std::string_view name() const override { return name_; }

  FaultConfig heuristics_config(const FaultProblem&, const Device&) const override {
    FaultConfig config;
    const char* mode = std::getenv("TOKAMAX_FAULT");
    if (injects_ && mode != nullptr && *mode != '\0') config.mode = mode;
    config.delay_us = injects_ ? 200 : 0;
    return config;
  }
  std::vector<FaultConfig> autotuning_configs(const FaultProblem& problem,
                                              const Device& device) const override {
    if (!injects_) return {heuristics_config(problem, device)};
    std::vector<FaultConfig> configs;
    for (const char* mode : kModes) {
      FaultConfig config;
      config.mode = mode;
      config.delay_us = config.mode == "ok" ? 200 : 0;  // "wrong" is the fastest
      configs.push_back(config);
    }
    return configs;
  }
  void check_config(const FaultProblem&, const FaultConfig& config, const Device&) const override {
    if (config.mode == "invalid") throw InvalidArgument("mode 'invalid' never fits", "mode");
  }
  void run(const FaultProblem& problem, const FaultConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    if (config.delay_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(config.delay_us));
    if (config.mode == "crash") {
      // The default action, not a sanitizer's handler (which would report and exit): the worker
      // dies of the signal, as an unsanitized build's does.
      std::signal(SIGSEGV, SIG_DFL);
      std::raise(SIGSEGV);
    }
    if (config.mode == "abort") std::abort();
    if (config.mode == "hang") {
      for (;;) pause();
    }
    if (config.mode == "throw") throw std::runtime_error("injected failure");
    if (config.mode == "device_fault") {
      throw DeviceFault(
          "injected: cudaErrorIllegalAddress: an illegal memory access was "
          "encountered");
    }
    ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), outputs.at("out"));
    if (config.mode == "wrong") outputs.at("out").set(0, outputs.at("out").get(0) + 1.0);
  }

 private:
  std::string name_;
  bool injects_;
};

class FaultInjectionOp final : public RaggedDotOp {
 public:
  std::string_view name() const override { return "fault_injection"; }
  std::string_view summary() const override {
    return "test builds only: ragged_dot whose `faulty` implementation misbehaves on demand";
  }
  BoundArgs bind_canonical(const nlohmann::json& args) const override {
    BoundArgs bound = RaggedDotOp::bind_canonical(args);
    bound.op = "fault_injection";
    return bound;
  }
  std::vector<const Implementation*> implementations() const override {
    static const FaultyRaggedDot faulty("faulty", true);
    static const FaultyRaggedDot steady("steady", false);
    return {&faulty, &steady};
  }
};

}  // namespace

void FaultConfig::validate() const {
  for (const char* known : kModes) {
    if (mode == known) return;
  }
  throw InvalidArgument(
      "mode '" + mode + "': expected ok, wrong, throw, crash, abort, hang, device_fault or invalid",
      "mode");
}

const RaggedDotOp& fault_injection_op() {
  static const FaultInjectionOp op;
  return op;
}

}  // namespace tokamax::testing
