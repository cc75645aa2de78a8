// Test-only ragged_dot implementations that misbehave on purpose (wrong, unsupported, slow).
#pragma once

#include <chrono>
#include <thread>

#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/base.h"

namespace tokamax::testing {

// Config of FakeRaggedDot: `mode` picks its behaviour, `delay_us` how slow it is.
struct FakeConfig {
  // 0 correct, 1 corrupts one output element, 2 rejected by check_config, 3 writes only the
  // rows of the groups (the rows past the group sum keep whatever was there)
  int mode = 0;
  int delay_us = 0;
  void validate() const {
    if (mode < 0 || mode > 3) throw InvalidArgument("mode must be 0, 1, 2 or 3", "mode");
  }
  template <class V>
  void visit(V&& v) {
    v("mode", mode);
    v("delay_us", delay_us);
  }
};

class FakeRaggedDot final : public TypedImplementation<RaggedDotProblem, FakeConfig> {
 public:
  explicit FakeRaggedDot(std::string name, bool supported = true, bool accepts = true)
      : name_(std::move(name)), supported_(supported), accepts_(accepts) {}
  std::string_view name() const override { return name_; }
  Support supported_on(const Device&) const override {
    return supported_ ? Support{} : Support{false, "fake device requirement"};
  }
  void check(const RaggedDotProblem&, const Device&) const override {
    if (!accepts_) throw NotImplemented("fake backend rejects every problem");
  }
  FakeConfig heuristics_config(const RaggedDotProblem&, const Device&) const override {
    return {0, 3000};
  }
  // The fastest config is wrong, the next one invalid; only slower ones are right.
  std::vector<FakeConfig> autotuning_configs(const RaggedDotProblem&,
                                             const Device&) const override {
    return {{1, 0}, {2, 0}, {0, 2000}, {0, 500}, {0, 4000}};
  }
  void check_config(const RaggedDotProblem&, const FakeConfig& config,
                    const Device&) const override {
    if (config.mode == 2) throw InvalidArgument("mode 2 never fits", "mode");
  }
  void run(const RaggedDotProblem& problem, const FakeConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    if (config.delay_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(config.delay_us));
    Tensor& out = outputs.at("out");
    if (config.mode == 3) {
      Tensor full(out.spec());
      ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), full);
      for (int64_t i = 0; i < problem.rows() * problem.out_N(); ++i) out.set(i, full.get(i));
      return;
    }
    ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), out);
    if (config.mode == 1) out.set(0, out.get(0) + 1.0);
  }

 private:
  std::string name_;
  bool supported_;
  bool accepts_;
};

// ragged_dot with a custom implementation list, to test dispatch and fallbacks.
class FakeRaggedDotOp final : public RaggedDotOp {
 public:
  explicit FakeRaggedDotOp(std::vector<const Implementation*> impls) : impls_(std::move(impls)) {}
  std::vector<const Implementation*> implementations() const override { return impls_; }

 private:
  std::vector<const Implementation*> impls_;
};

inline BoundArgs small_ragged_dot_args(const std::string& dtype = "f32") {
  return ragged_dot_op().bind(
      {{"lhs", dtype + "[24,16]"}, {"rhs", dtype + "[3,16,8]"}, {"group_sizes", {10, 0, 9}}});
}

}  // namespace tokamax::testing
