# Install rules: the library as tokamax::tokamax, its public headers (each op's api.h and
# vjp/api.h and what they include, transitively: the op model and the device seam, not the
# kernels' internals), the `tokamax` program, the catalogs and shipped caches (also embedded in
# the library), and the package files find_package(tokamax) reads.
include(CMakePackageConfigHelpers)

# The headers reachable from the public entry points by project includes.
function(tokamax_public_headers out)
  file(GLOB queue RELATIVE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/ops/*/api.h
       ${CMAKE_SOURCE_DIR}/ops/*/vjp/api.h)
  list(APPEND queue ops/framework/random.h ops/registry.h)
  set(seen "")
  while(queue)
    list(POP_FRONT queue header)
    if(header IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${header})
    file(STRINGS ${CMAKE_SOURCE_DIR}/${header} includes REGEX "^#include \"(ops|backends)/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      list(APPEND queue ${included})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

set(TOKAMAX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tokamax)

tokamax_public_headers(TOKAMAX_PUBLIC_HEADERS)
foreach(header IN LISTS TOKAMAX_PUBLIC_HEADERS)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${CMAKE_SOURCE_DIR}/${header}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tokamax/${folder})
endforeach()

install(TARGETS tokamax_core EXPORT tokamaxTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tokamax RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT program)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/specs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tokamax/specs
        FILES_MATCHING PATTERN "*.yaml")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/results/autotuning/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tokamax/results/autotuning
        FILES_MATCHING PATTERN "*.json")

install(EXPORT tokamaxTargets NAMESPACE tokamax:: DESTINATION ${TOKAMAX_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tokamaxConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/tokamaxConfig.cmake
                              INSTALL_DESTINATION ${TOKAMAX_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tokamaxConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/tokamaxConfig.cmake ${CMAKE_BINARY_DIR}/tokamaxConfigVersion.cmake
        DESTINATION ${TOKAMAX_CMAKE_DIR})
