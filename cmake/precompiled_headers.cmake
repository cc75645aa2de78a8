# Precompiled headers: the large third-party headers nearly every file of a target includes
# (nlohmann/json through the op model and the configs; Catch2 in the tests) are parsed once per
# target instead of once per file. Most of a small file's compile time is those headers
# (docs/hardening.md: CI time), and CI builds the tree three times.
#
# Files whose own flags or macros differ from their target's (per-source options, a macro that
# must precede the headers) keep compiling without the precompiled header.
#
# Against a precompiled header GCC 12 reports false -Wstringop-overflow and -Warray-bounds
# warnings on std::string concatenations (in its own <string>), so with GCC only the tests use
# one (the TESTS option), those two warnings off there; clang builds (the sanitizer builds, most of
# CI's compile time) use it everywhere.
function(tokamax_precompile_headers target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "TESTS" "" "")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    if(NOT arg_TESTS)
      return()
    endif()
    target_compile_options(${target} PRIVATE -Wno-stringop-overflow -Wno-array-bounds)
  endif()
  set(headers <nlohmann/json.hpp> <string> <vector> <map> <memory> <functional> <algorithm>)
  if(arg_UNPARSED_ARGUMENTS)
    list(APPEND headers ${arg_UNPARSED_ARGUMENTS})
  endif()
  set(cxx_headers "")
  foreach(header IN LISTS headers)
    list(APPEND cxx_headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${cxx_headers})
endfunction()
