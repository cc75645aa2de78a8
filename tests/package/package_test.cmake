# The installed package as an application sees it: installs the build into a fresh prefix, builds
# examples/ there as an outside project with find_package(tokamax), runs the example, and checks
# that the public headers, catalogs and caches are installed and the kernels' internals are not.
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P package_test.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "package_test: ${var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "package_test: `${ARGN}` failed (${status}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(path include/tokamax/ops/ragged_dot/api.h include/tokamax/ops/framework/op.h
             include/tokamax/backends/device.h share/tokamax/specs/ragged_dot.yaml
             lib/cmake/tokamax/tokamaxConfig.cmake bin/tokamax)
  if(NOT EXISTS ${prefix}/${path})
    message(FATAL_ERROR "package_test: ${path} is not installed")
  endif()
endforeach()
foreach(path include/tokamax/ops/ragged_dot/cpu_kernel.h include/tokamax/ops/common/cpu_gemm/pack.h
             include/tokamax/cli/toolkit/harness/verifier.h include/tokamax/backends/cpu/cpu_device.h)
  if(EXISTS ${prefix}/${path})
    message(FATAL_ERROR "package_test: the internal header ${path} is installed")
  endif()
endforeach()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK_DIR}/examples -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/examples)
run(${WORK_DIR}/examples/ragged_dot_example)
if(NOT output MATCHES "ragged_dot bf16\\[128,64\\]")
  message(FATAL_ERROR "package_test: unexpected output of the example:\n${output}")
endif()
# The op library alone pulls in neither the catalog's YAML reader nor the benchmark sampler:
# those are the command-line toolkit's (cli/toolkit/).
run(objdump -p ${WORK_DIR}/examples/ragged_dot_example)
if(output MATCHES "NEEDED +lib(yaml-cpp|benchmark)")
  message(FATAL_ERROR "package_test: the example links ${CMAKE_MATCH_1}:\n${output}")
endif()
run(nm -C ${WORK_DIR}/examples/ragged_dot_example)
if(output MATCHES "YAML::|benchmark::")
  message(FATAL_ERROR "package_test: the example carries yaml-cpp or Google Benchmark code")
endif()
message(STATUS "package_test: the example built against ${prefix} and ran")
