// Tests for the CUDA backend as every machine sees it: the devices it found, or why there are
// none. On a machine without a GPU (or a build without the backend) the reason says so, and the
// registry lists the backend as unavailable.
#include <catch2/catch.hpp>
#include <string>

#include "backends/cuda/cuda_device.h"
#include "backends/registry.h"

using namespace tokamax;

TEST_CASE("the CUDA backend has devices or says why not", "[cuda]") {
  const std::string& reason = cuda::unavailable_reason();
  if (cuda::devices().empty()) {
    WARN("no CUDA device here: " << reason);
    CHECK((reason.rfind("no CUDA device: ", 0) == 0 || reason.rfind("not built: ", 0) == 0 ||
           reason.rfind("no usable CUDA device: ", 0) == 0));
    bool listed = false;
    for (const UnavailableBackend& backend : unavailable_backends()) {
      listed = listed || (backend.kind == "cuda" && backend.reason == reason);
    }
    CHECK(listed);
    CHECK(find_device("cuda") == nullptr);
  } else {
    CHECK(reason.empty());
    const Device& device = *cuda::devices().front();
    CHECK(device.kind() == "cuda");
    CHECK(device.id().rfind("cuda-", 0) == 0);
    CHECK(find_device("cuda:0") == &device);
    CHECK_FALSE(device.memory().host_accessible());
    CHECK(device.last_level_cache().bytes > 0);
  }
}
