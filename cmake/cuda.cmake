# The CUDA backend's build switch. TOKAMAX_CUDA=AUTO builds it when nvcc >= 12.4 is found, ON
# requires it, OFF leaves it out. Sets TOKAMAX_WITH_CUDA, and TOKAMAX_CUDA_WHY: why it is not
# built ("" when it is), which the binary reports for its CUDA implementations, and
# TOKAMAX_CUDA_BUILD, the line `info` shows ("nvcc 13.0, sm 90a" or "not built: <why>").
set(TOKAMAX_CUDA AUTO CACHE STRING
    "Build the CUDA backend: AUTO (when nvcc >= 12.4 is found), ON (required) or OFF")
set_property(CACHE TOKAMAX_CUDA PROPERTY STRINGS AUTO ON OFF)
set(TOKAMAX_CUDA_MIN_VERSION 12.4)

set(TOKAMAX_WITH_CUDA OFF)
set(TOKAMAX_CUDA_WHY "")
if(TOKAMAX_CUDA STREQUAL "OFF")
  set(TOKAMAX_CUDA_WHY "the build has TOKAMAX_CUDA=OFF")
else()
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(TOKAMAX_CUDA_WHY "no nvcc was found when it was built")
  else()
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE nvcc_version)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _ "${nvcc_version}")
    set(nvcc_release "${CMAKE_MATCH_1}")
    if(nvcc_release VERSION_LESS TOKAMAX_CUDA_MIN_VERSION)
      set(TOKAMAX_CUDA_WHY "it was built with nvcc ${nvcc_release} (< ${TOKAMAX_CUDA_MIN_VERSION})")
    else()
      set(TOKAMAX_WITH_CUDA ON)
    endif()
  endif()
  if(TOKAMAX_CUDA STREQUAL "ON" AND NOT TOKAMAX_WITH_CUDA)
    message(FATAL_ERROR "TOKAMAX_CUDA=ON, but ${TOKAMAX_CUDA_WHY}")
  endif()
endif()

if(TOKAMAX_WITH_CUDA)
  # sm_90a: wgmma, setmaxnreg and modifiable TMA descriptors need the architecture-specific
  # target. Override with -DCMAKE_CUDA_ARCHITECTURES=...
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90a)
  endif()
  include(${CMAKE_CURRENT_LIST_DIR}/cuda_architectures.cmake)
  tokamax_check_cuda_architectures("${CMAKE_CUDA_ARCHITECTURES}")
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  # The pinned header libraries (scripts/cuda_deps.txt), unpacked by scripts/install_deps.sh.
  set(TOKAMAX_DEPS_DIR ${CMAKE_SOURCE_DIR}/.deps)
  if(NOT EXISTS ${TOKAMAX_DEPS_DIR}/cutlass/include/cutlass/cutlass.h OR
     NOT EXISTS ${TOKAMAX_DEPS_DIR}/cudnn_frontend/include/cudnn_frontend.h)
    message(FATAL_ERROR "the CUDA backend needs the CUTLASS and cudnn-frontend headers in "
                        "${TOKAMAX_DEPS_DIR}: run scripts/install_deps.sh (or configure with "
                        "-DTOKAMAX_CUDA=OFF)")
  endif()
  set(TOKAMAX_CUDA_BUILD "nvcc ${nvcc_release}, sm ${CMAKE_CUDA_ARCHITECTURES}" CACHE INTERNAL
      "the CUDA backend, as info shows it")
  message(STATUS "tokamax: CUDA backend ON (${TOKAMAX_CUDA_BUILD})")
else()
  set(TOKAMAX_CUDA_BUILD "not built: ${TOKAMAX_CUDA_WHY}" CACHE INTERNAL
      "the CUDA backend, as info shows it")
  message(STATUS "tokamax: CUDA backend OFF: ${TOKAMAX_CUDA_WHY}")
endif()
