// Tests for the CPU device: the host as a Device, and a described CPU of another machine.
#include "backends/cpu/cpu_device.h"

#include <catch2/catch.hpp>
#include <stdexcept>

#include "backends/cpu/amx.h"
#include "backends/registry.h"

using namespace tokamax;

TEST_CASE("host_device is the host CPU as a device, the registry's default", "[cpu_device]") {
  const cpu::CpuInfo& host = cpu::host_cpu();
  const cpu::CpuDevice& device = cpu::host_device();
  CHECK(device.kind() == "cpu");
  CHECK(device.id() == host.id);
  CHECK(device.is_host());
  CHECK(&cpu::cpu_info(device) == &device.cpu());
  CHECK(device.info().to_json()["cores"] == host.cores);
  CHECK(device.info().to_json()["isa"] == host.isa);
  CHECK(device.info().description == host.description());
  CHECK(&default_device() == &device);
  CHECK(find_device("cpu") == &device);
  CHECK(find_device("cpu:0") == &device);
  CHECK(find_device(device.id()) == &device);
  CHECK(find_device("cpu:1") == nullptr);
  CHECK(find_device("cuda") == nullptr);
  CHECK(find_device("cpu:x") == nullptr);
  CHECK(device.memory().host_accessible());
  CHECK(device.last_level_cache().bytes > 0);
}

TEST_CASE("a described CPU resolves configs but measures nothing", "[cpu_device]") {
  cpu::CpuInfo other = cpu::host_cpu();
  other.id = "cpu-other-64c";
  other.cores = 64;
  other.l2_bytes = 2 << 20;
  other.l3_bytes = 0;
  const cpu::CpuDevice device(other, /*is_host=*/false);
  CHECK(device.id() == "cpu-other-64c");
  CHECK(cpu::cpu_info(device).cores == 64);
  // Its last-level cache is its own L2 when it reports no L3.
  CHECK(device.last_level_cache().bytes == (2 << 20));
  CHECK_THROWS_AS(device.ceilings(), std::logic_error);
  CHECK_THROWS_AS(device.probe_bandwidth_gbps(), std::logic_error);
}

TEST_CASE("the wall-clock timer measures the time in between", "[cpu_device]") {
  const std::unique_ptr<Timer> timer = cpu::host_device().timer();
  timer->start();
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  const double seconds = timer->stop();
  CHECK(seconds > 0);
  CHECK(seconds < 10);
}

TEST_CASE("the host's info and bench records say whether the AMX tiles run, and why not",
          "[cpu_device][amx]") {
  const cpu::CpuDevice& device = cpu::host_device();
  const nlohmann::json amx = device.info_json().at("amx");
  const cpu::AmxSupport& host = cpu::host_amx();
  CHECK(amx.at("bf16") == host.bf16);
  CHECK(amx.at("int8") == host.int8);
  CHECK(amx.at("reason") == host.reason);
  CHECK(amx.at("tile_mode") == cpu::tile_mode_name(cpu::tile_mode()));
  CHECK(device.measurement_context().at("amx_tile_mode") == cpu::tile_mode_name(cpu::tile_mode()));
  // A described CPU of another machine was not probed: no AMX status.
  const cpu::CpuDevice other(cpu::host_cpu(), /*is_host=*/false);
  CHECK_FALSE(other.info_json().contains("amx"));
}
