// Tests for the .npy writer: header layout, and numpy reading it back when numpy is present.
#include "cli/toolkit/harness/npy.h"

#include <catch2/catch.hpp>

#include "tests/test_util.h"

using namespace tokamax;
using tokamax::testing::ScratchDir;

TEST_CASE("npy files have a 64-byte aligned header and the raw data", "[npy]") {
  ScratchDir dir;
  Tensor t(TensorSpec{DType::kF32, {2, 3}});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i) + 0.5f;
  write_npy(dir.file("a.npy"), t);
  const std::string bytes = tokamax::testing::read_file(dir.file("a.npy"));
  REQUIRE(bytes.substr(0, 6) == "\x93NUMPY");
  const size_t header_len =
      static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  CHECK((10 + header_len) % 64 == 0);
  const std::string header = bytes.substr(10, header_len);
  CHECK(header.find("'descr': '<f4'") != std::string::npos);
  CHECK(header.find("'shape': (2, 3)") != std::string::npos);
  CHECK(bytes.size() == 10 + header_len + 6 * sizeof(float));
}

TEST_CASE("numpy reads bf16 (as float32), f16 and 1-d arrays back exactly", "[npy]") {
  ScratchDir dir;
  Tensor b(TensorSpec{DType::kBF16, {3}});
  b.set(0, 1.0);
  b.set(1, -0.375);
  b.set(2, 3.0e10);
  write_npy(dir.file("b.npy"), b);
  Tensor h(TensorSpec{DType::kF16, {2, 1}});
  h.set(0, 0.5);
  h.set(1, -65504.0);
  write_npy(dir.file("h.npy"), h);
  const auto probe = tokamax::testing::run_command("/usr/bin/python3 -c 'import numpy'");
  if (probe.exit_code != 0) {
    WARN("skipped: /usr/bin/python3 with numpy is not available (" + probe.output + ")");
    return;
  }
  const auto result = tokamax::testing::run_command(
      "/usr/bin/python3 -c \"import numpy as np; b=np.load('" + dir.file("b.npy") +
      "'); h=np.load('" + dir.file("h.npy") +
      "'); print(b.dtype, b.shape, b.tolist(), h.dtype, h.shape, h.ravel().tolist())\"");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("float32 (3,) [1.0, -0.375, " +
                           std::to_string(static_cast<long long>(b.get(2))) + ".0]") !=
        std::string::npos);
  CHECK(result.output.find("float16 (2, 1) [0.5, -65504.0]") != std::string::npos);
}
