// Tests of the lines that list the implementations left out for another kind of device.
#include "cli/report/other_device.h"

#include <catch2/catch.hpp>

namespace tokamax::cli {
namespace {

TEST_CASE("implementations for another device are listed once per reason", "[other_device]") {
  const std::string no_cuda = "no CUDA device: cudaErrorNoDevice";
  const std::vector<OtherDeviceRun> runs = {
      {"ragged_dot", "cuda", no_cuda},
      {"ragged_dot", "cublas", no_cuda},
      {"ragged_dot_vjp", "cublas", no_cuda},
      {"ragged_dot", "cuda", no_cuda},  // a second spec of the same op
      {"layer_norm", "tpu", "no TPU"},
  };
  const std::vector<std::string> notes = other_device_notes(runs, "cpu-x");
  REQUIRE(notes.size() == 2);
  CHECK(notes[0] ==
        "not run on cpu-x: cuda (ragged_dot), cublas (ragged_dot, ragged_dot_vjp): " + no_cuda);
  CHECK(notes[1] == "not run on cpu-x: tpu (layer_norm): no TPU");
  CHECK(other_device_notes({}, "cpu-x").empty());
}

}  // namespace
}  // namespace tokamax::cli
