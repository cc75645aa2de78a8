// Test builds only: an op whose `faulty` implementation crashes, hangs, throws or computes wrong
// numbers on demand, for the isolation tests (docs/isolation.md). It is ragged_dot under another
// name; `tokamax_test_cli` registers it, the installed `tokamax` never contains it.
//
// Dimensions: as ragged_dot (G groups, M rows, K contraction, N outputs).
#pragma once

#include <string>

#include "ops/ragged_dot/base.h"

namespace tokamax::testing {

// Config of the `faulty` implementation: what it does when run.
//   mode: ok | wrong (out[0] += 1) | throw | crash (SIGSEGV) | abort (SIGABRT) | hang (sleeps
//         forever) | device_fault (throws DeviceFault, as a faulted CUDA kernel does) | invalid
//         (rejected by check_config); outside the search space (for $TOKAMAX_FAULT):
//         oom (allocates and touches memory until killed; past $TOKAMAX_FAULT_OOM_MB it sends
//         itself SIGKILL, as the kernel's OOM killer would under a memory limit) |
//         ignore_sigterm (ignores SIGTERM, then hangs) | close_pipe (shuts the worker's
//         protocol socket down, then hangs; worker isolation only)
//   delay_us: sleeps this long first, to order candidates by time.
struct FaultConfig {
  std::string mode = "ok";
  int delay_us = 0;
  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("mode", mode);
    v("delay_us", delay_us);
  }
};

// The op "fault_injection", with the implementations:
//   faulty  heuristics config {"mode": $TOKAMAX_FAULT or "ok", "delay_us": 200}; autotuning
//           configs: one of each mode of the search space (only "ok" is both valid and right)
//   steady  always right, nothing to tune
// Its own steps can die too: with TOKAMAX_FAULT_KILL=setup (input generation) or =oracle, the
// process sends itself SIGKILL there, as the OOM killer or an operator's kill -9 would. With
// TOKAMAX_FAULT_KILL_FILE=PATH only the first TOKAMAX_FAULT_KILL_TIMES (default 1) times: each
// kill appends a byte to PATH first, so that the count outlives the killed workers.
const RaggedDotOp& fault_injection_op();

}  // namespace tokamax::testing
