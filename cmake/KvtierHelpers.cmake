# Warnings and sanitizers for every kvtier target, and helpers for libraries, tests and benchmarks.

set(KVTIER_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wnon-virtual-dtor -Wimplicit-fallthrough)
# Warnings are errors in the normal builds only. The sanitizer builds compile at -Og/-O1 (below), where
# GCC 12 reports false positives the -O2 build does not (e.g. -Wmismatched-new-delete inside msgpack's
# zone allocator at -Og); they still print, but the release build is the one that holds the line.
if(KVTIER_WERROR AND KVTIER_SANITIZE STREQUAL "")
  list(APPEND KVTIER_WARNINGS -Werror)
endif()

# Debug information is line tables only (-g1: backtraces and sanitizer reports still name every file,
# function and line): full -g made every translation unit take ~40% longer to compile, in each of
# CI's five builds. KVTIER_FULL_DEBUG_INFO=ON keeps the build type's own -g (to step through locals).
option(KVTIER_FULL_DEBUG_INFO "Full debug information instead of line tables" OFF)
if(NOT KVTIER_FULL_DEBUG_INFO AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Debug)$")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-g1>)  # nvcc takes no -g1
endif()

# Sanitizer builds compile with less optimisation than the release one (these options come after the
# build type's -O2 and win): ASan+UBSan at -O2 took ~4x the compile time of -Og for the same unit,
# TSan at -O2 ~2x that of -O1 (measured on kvtier_cli's largest unit, GCC 12); the checks are the same.
if(KVTIER_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Og)
  add_link_options(-fsanitize=address,undefined)
elseif(KVTIER_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -O1)
  add_link_options(-fsanitize=thread)
elseif(NOT KVTIER_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KVTIER_SANITIZE must be '', 'address' or 'thread'")
endif()

# kvtier_library(NAME SOURCES ... [DEPS ...]): a static library of one layer, private headers under src/.
function(kvtier_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${KVTIER_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# kvtier_test(NAME SOURCES ... [DEPS ...] [LABELS ...]): a GoogleTest binary registered with ctest.
function(kvtier_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${KVTIER_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  # ENVIRONMENT before LABELS: an empty LABELS value vanishes from the list and would swallow it.
  set(props TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "KVTIER_BIN_DIR=${PROJECT_BINARY_DIR}")
  if(ARG_LABELS)
    list(APPEND props LABELS "${ARG_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ${props})
endfunction()

# kvtier_bench(NAME SOURCES ... [DEPS ...]): a Google Benchmark binary (not run by ctest).
function(kvtier_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${KVTIER_WARNINGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()

# Adds every direct subfolder of the current source folder that has a CMakeLists.txt.
function(kvtier_add_subdirectories)
  file(GLOB children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child ${children})
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
