# Precompiled headers: the large third-party headers nearly every file of a target includes
# (nlohmann/json through the op model and the configs; Catch2 in the tests) are parsed once per
# target instead of once per file. Most of a small file's compile time is those headers
# (docs/hardening.md: CI time), and CI builds the tree three times.
#
# Files whose own flags or macros differ from their target's (per-source options, a macro that
# must precede the headers) keep compiling without the precompiled header.
function(tokamax_precompile_headers target)
  set(headers <nlohmann/json.hpp> <string> <vector> <map> <memory> <functional> <algorithm>)
  if(ARGN)
    list(APPEND headers ${ARGN})
  endif()
  set(cxx_headers "")
  foreach(header IN LISTS headers)
    list(APPEND cxx_headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${cxx_headers})
endfunction()
