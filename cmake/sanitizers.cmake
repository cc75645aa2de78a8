# Sanitizer and fuzzing builds (scripts/test_sanitized.sh drives them; .ci/run runs it).
#
#   -DTOKAMAX_SANITIZE=address,undefined   AddressSanitizer + UndefinedBehaviorSanitizer
#   -DTOKAMAX_SANITIZE=thread              ThreadSanitizer
#   -DTOKAMAX_BUILD_FUZZERS=ON             libFuzzer targets (tests/fuzz/), clang only
#
# The flags apply to every C++ file of the build (library, CLI, tests, fuzzers); the first error
# aborts the process (-fno-sanitize-recover), so a finding fails its test.
set(TOKAMAX_SANITIZE "" CACHE STRING
    "Sanitizers for every C++ file: empty (none), address,undefined, or thread")
option(TOKAMAX_BUILD_FUZZERS "Build the libFuzzer targets of tests/fuzz/ (needs clang)" OFF)

set(TOKAMAX_SANITIZER_FLAGS "")
if(TOKAMAX_SANITIZE)
  if(TOKAMAX_SANITIZE MATCHES "thread" AND TOKAMAX_SANITIZE MATCHES "address")
    message(FATAL_ERROR "TOKAMAX_SANITIZE: thread and address cannot be combined")
  endif()
  # Line tables are what reports need (file:line in each frame), at a fraction of -g's cost.
  list(APPEND TOKAMAX_SANITIZER_FLAGS -fsanitize=${TOKAMAX_SANITIZE} -fno-sanitize-recover=all
       -fno-omit-frame-pointer -gline-tables-only)
endif()
if(TOKAMAX_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TOKAMAX_BUILD_FUZZERS needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  # Coverage instrumentation everywhere; only the fuzz targets link libFuzzer's main.
  list(APPEND TOKAMAX_SANITIZER_FLAGS -fsanitize=fuzzer-no-link)
endif()
if(TOKAMAX_SANITIZER_FLAGS)
  foreach(flag IN LISTS TOKAMAX_SANITIZER_FLAGS)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${flag}>)
  endforeach()
  add_link_options(${TOKAMAX_SANITIZER_FLAGS})
endif()
