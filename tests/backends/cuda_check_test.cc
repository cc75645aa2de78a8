// Tests for the CUDA error rule (backends/cuda/cuda_check.h): which errors lose the context and
// end the process's use of the device (DeviceFault), which are ordinary failures. Needs no GPU.
#include <catch2/catch.hpp>

#if TOKAMAX_WITH_CUDA
#include <string>

#include "backends/cuda/cuda_check.h"

using namespace tokamax;

TEST_CASE("a faulted kernel's error loses the context, others do not", "[cuda]") {
  for (const cudaError_t sticky :
       {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorMisalignedAddress,
        cudaErrorIllegalInstruction, cudaErrorAssert, cudaErrorHardwareStackError}) {
    CHECK(cuda::context_lost(sticky));
  }
  for (const cudaError_t plain :
       {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorNoDevice,
        cudaErrorInsufficientDriver, cudaErrorNotReady, cudaErrorInvalidConfiguration}) {
    CHECK_FALSE(cuda::context_lost(plain));
  }
}

TEST_CASE("cuda::check throws DeviceFault for sticky errors, runtime_error otherwise", "[cuda]") {
  CHECK_NOTHROW(cuda::check(cudaSuccess, "nothing"));
  try {
    cuda::check(cudaErrorIllegalAddress, "cudaStreamSynchronize");
    FAIL("no exception");
  } catch (const DeviceFault& e) {
    CHECK(std::string(e.what()).rfind("CUDA cudaStreamSynchronize: cudaErrorIllegalAddress: ", 0) ==
          0);
  }
  try {
    cuda::check(cudaErrorInvalidValue, "cudaMemcpy");
    FAIL("no exception");
  } catch (const DeviceFault&) {
    FAIL("an invalid argument does not lose the context");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).rfind("CUDA cudaMemcpy: cudaErrorInvalidValue: ", 0) == 0);
  }
}
#endif
