# The CUDA architectures the kernels may be built for. Plain sm_90 compiles the Hopper kernels'
# wgmma and TMA paths out (CUTLASS guards them with the architecture-specific macro): they would
# launch and do nothing. Also a script for the test suite:
#   cmake -DARCHITECTURES="90a;100a" -P cmake/cuda_architectures.cmake
function(tokamax_check_cuda_architectures architectures)
  foreach(arch IN LISTS architectures)
    if(arch MATCHES "^90(-real|-virtual)?$")
      message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES=${architectures}: the Hopper kernels need "
                          "sm_90a (wgmma, TMA), not sm_90, which builds them to do nothing; "
                          "use 90a")
    endif()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  tokamax_check_cuda_architectures("${ARCHITECTURES}")
endif()
