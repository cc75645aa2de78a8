// `tokamax_test_cli`: the tokamax program plus the fault-injection op (test builds only).
#include "cli/commands.h"
#include "ops/registry.h"
#include "tests/support/fault_injection_op.h"

int main(int argc, char** argv) {
  tokamax::register_extra_op(tokamax::testing::fault_injection_op());
  return tokamax::cli::run_cli(argc, argv);
}
