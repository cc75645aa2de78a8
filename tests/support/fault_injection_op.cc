// The fault-injection op of the test builds: ragged_dot math, misbehaving on demand.
#include "tests/support/fault_injection_op.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/device.h"
#include "ops/framework/errors.h"

namespace tokamax::testing {
namespace {

// The search space: one autotuning config each.
const char* const kModes[] = {"ok",    "wrong", "throw",        "crash",
                              "abort", "hang",  "device_fault", "invalid"};
// Valid too, for $TOKAMAX_FAULT, but never searched (slow or heavy on purpose).
const char* const kHostileModes[] = {"oom", "ignore_sigterm", "close_pipe"};

long env_number(const char* name, long fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::atol(text) : fallback;
}

// TOKAMAX_FAULT_KILL (fault_injection_op.h): dies here when the environment says so.
void maybe_killed_in(std::string_view step) {
  const char* where = std::getenv("TOKAMAX_FAULT_KILL");
  if (where == nullptr || step != where) return;
  const char* file = std::getenv("TOKAMAX_FAULT_KILL_FILE");
  if (file != nullptr && *file != '\0') {
    std::error_code ignored;
    const auto kills = std::filesystem::file_size(file, ignored);
    if (!ignored && static_cast<long>(kills) >= env_number("TOKAMAX_FAULT_KILL_TIMES", 1)) return;
    std::ofstream(file, std::ios::app) << 'k';  // closed (written) before the kill
  }
  std::raise(SIGKILL);
}

// Allocates and touches 64 MiB at a time until killed. Where no memory limit would stop it,
// TOKAMAX_FAULT_OOM_MB stands in for one: past it the process sends itself SIGKILL, which is all
// a parent ever sees of an OOM kill.
[[noreturn]] void allocate_forever() {
  constexpr size_t kChunk = size_t{64} << 20;
  const long limit_mb = env_number("TOKAMAX_FAULT_OOM_MB", 0);
  std::vector<std::unique_ptr<char[]>> hoard;
  for (long mb = 0;; mb += 64) {
    if (limit_mb > 0 && mb >= limit_mb) std::raise(SIGKILL);
    hoard.emplace_back(new char[kChunk]);
    // Through a volatile pointer: every page is really written, so it really is resident.
    volatile char* bytes = hoard.back().get();
    for (size_t i = 0; i < kChunk; i += 4096) bytes[i] = 1;
  }
}

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
    if (config.mode == "oom") allocate_forever();
    if (config.mode == "ignore_sigterm") {
      std::signal(SIGTERM, SIG_IGN);
      for (;;) pause();
    }
    if (config.mode == "close_pipe") {
      // In a worker stdin is the protocol socket (worker_process.h): the parent reads end of file.
      shutdown(STDIN_FILENO, SHUT_RDWR);
      for (;;) pause();
    }
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
  TensorMap make_inputs(const BoundArgs& args, uint64_t seed) const override {
    maybe_killed_in("setup");
    return RaggedDotOp::make_inputs(args, seed);
  }
  OracleSample oracle(const BoundArgs& args, const TensorMap& inputs, std::string_view output,
                      std::span<const int64_t> index) const override {
    maybe_killed_in("oracle");
    return RaggedDotOp::oracle(args, inputs, output, index);
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
  for (const char* known : kHostileModes) {
    if (mode == known) return;
  }
  throw InvalidArgument("mode '" + mode +
                            "': expected ok, wrong, throw, crash, abort, hang, device_fault, "
                            "invalid, oom, ignore_sigterm or close_pipe",
                        "mode");
}

const RaggedDotOp& fault_injection_op() {
  static const FaultInjectionOp op;
  return op;
}

}  // namespace tokamax::testing
