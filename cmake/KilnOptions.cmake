# Compiler flags shared by every Kiln target, and the kiln_module() helper.

set(KILN_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # GCC 12 reports false positives on std::string operations at -O3 (GCC bug 105329).
  list(APPEND KILN_WARNINGS -Wno-restrict -Wno-stringop-overflow)
endif()
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # In a unity build a source file is no longer the main file of its translation unit, so GCC
  # would report every class of that file that holds a type from its anonymous namespace.
  list(APPEND KILN_WARNINGS -Wno-subobject-linkage)
endif()
if(KILN_WERROR)
  list(APPEND KILN_WARNINGS -Werror)
endif()

add_library(kiln_flags INTERFACE)
# CXX only: nvcc (the CUDA backend) takes its own flags, see KilnCuda.cmake.
target_compile_options(kiln_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${KILN_WARNINGS}>)
if(KILN_SANITIZE)
  target_compile_options(kiln_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # The sanitizers' instrumentation makes GCC's -Wmaybe-uninitialized report std::variant
    # members that are always initialised; the release build keeps the warning.
    target_compile_options(kiln_flags INTERFACE -Wno-maybe-uninitialized)
  endif()
  target_link_options(kiln_flags INTERFACE -fsanitize=address,undefined)
endif()
if(KILN_FUZZ)
  target_compile_options(kiln_flags INTERFACE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(kiln_flags INTERFACE -fsanitize=address,undefined)
endif()

# kiln_sanitize_unoptimised(TARGET ...): under the sanitizers, targets whose code the tests do not
# spend their time in (the command line, the server's protocol code, the tests' own code) compile
# at -O0 rather than the preset's -O1: instrumented code is slow to optimise (about 40% of the
# sanitizer build), while the kernels, the engine and the runtime keep -O1 for the tests' speed.
function(kiln_sanitize_unoptimised)
  if(KILN_SANITIZE)
    foreach(target ${ARGN})
      target_compile_options(${target} PRIVATE -O0)
    endforeach()
  endif()
endfunction()

# kiln_module(NAME [DIR dir] DEPS ...): a static library from every .cpp under src/<dir>.
function(kiln_module name)
  cmake_parse_arguments(ARG "" "DIR" "DEPS" ${ARGN})
  if(NOT ARG_DIR)
    set(ARG_DIR ${name})
  endif()
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${ARG_DIR}/*.cpp)
  list(FILTER sources EXCLUDE REGEX ".*/main\\.cpp$")
  if(NOT sources)
    add_library(kiln_${name} INTERFACE)
    target_include_directories(kiln_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(kiln_${name} INTERFACE kiln_flags ${ARG_DEPS})
    return()
  endif()
  add_library(kiln_${name} STATIC ${sources})
  target_include_directories(kiln_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kiln_${name} PUBLIC kiln_flags ${ARG_DEPS})
  target_compile_definitions(kiln_${name} PUBLIC KILN_VERSION="${PROJECT_VERSION}")
endfunction()
