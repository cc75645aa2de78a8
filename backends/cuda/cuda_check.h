// CUDA runtime errors as exceptions, one rule for every CUDA call of the backend and of the
// kernels: a DeviceFault when the error has lost the process's CUDA context (a kernel faulted;
// the runtime then returns the error from every later call), a std::runtime_error otherwise.
// Needs the CUDA runtime's headers: only CUDA-built translation units include it.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "backends/device_fault.h"

namespace tokamax::cuda {

// Whether `error` is sticky: the context is unusable and only a new process can use the device.
constexpr bool context_lost(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
      return true;
    default:
      return false;
  }
}

// "CUDA <what>: <error name>: <the runtime's description>".
inline std::string error_message(cudaError_t error, const char* what) {
  return std::string("CUDA ") + what + ": " + cudaGetErrorName(error) + ": " +
         cudaGetErrorString(error);
}

inline void check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  if (context_lost(error)) throw DeviceFault(error_message(error, what));
  throw std::runtime_error(error_message(error, what));
}

// After a library reported a failure (cuBLAS, CUTLASS): a DeviceFault when the cause is a lost
// context, so that the library's own status does not hide it; otherwise nothing.
inline void check_context(const char* what) {
  const cudaError_t error = cudaPeekAtLastError();
  if (context_lost(error)) throw DeviceFault(error_message(error, what));
}

}  // namespace tokamax::cuda
