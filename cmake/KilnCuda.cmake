# The CUDA backend (src/backends/cuda) as the static library kiln_backends_cuda, built when
# KILN_CUDA is ON, or AUTO and an nvcc is found (the ci preset uses AUTO, so that CI compiles it
# wherever the toolkit is installed, with or without a GPU). Sets KILN_HAVE_CUDA.
#
# Kernels are compiled for Hopper only (sm_90a machine code: wgmma and setmaxnreg need the "a"
# target); the backend refuses other GPUs at start with a message.

set(KILN_CUDA OFF CACHE STRING "Build the CUDA backend: ON, OFF or AUTO (when nvcc is found)")
set_property(CACHE KILN_CUDA PROPERTY STRINGS ON OFF AUTO)
# sm_90a machine code, nvcc's -std=c++20 and the three-argument cudaGraphInstantiate need CUDA 12.0;
# the backend is built and tested with CUDA 13.0.
set(KILN_CUDA_MIN_VERSION 12.0)
set(KILN_HAVE_CUDA OFF)

# The release of the CUDA compiler `compiler` ("13.0"), or "" when it does not run.
function(kiln_nvcc_release compiler out)
  set(release "")
  if(compiler)
    execute_process(COMMAND "${compiler}" --version OUTPUT_VARIABLE text ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND text MATCHES "release ([0-9]+\\.[0-9]+)")
      set(release "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out} "${release}" PARENT_SCOPE)
endfunction()

if(KILN_CUDA)  # ON or AUTO
  include(CheckLanguage)
  check_language(CUDA)
  kiln_nvcc_release("${CMAKE_CUDA_COMPILER}" kiln_nvcc_version)
  if(KILN_CUDA STREQUAL "AUTO")
    if(NOT kiln_nvcc_version)
      message(STATUS "KILN_CUDA=AUTO: no nvcc found, building without the CUDA backend")
    elseif(kiln_nvcc_version VERSION_LESS KILN_CUDA_MIN_VERSION)
      message(STATUS "KILN_CUDA=AUTO: nvcc ${kiln_nvcc_version} (${CMAKE_CUDA_COMPILER}) is older than "
                     "CUDA ${KILN_CUDA_MIN_VERSION}, building without the CUDA backend")
    else()
      set(KILN_HAVE_CUDA ON)
    endif()
  elseif(NOT kiln_nvcc_version OR kiln_nvcc_version VERSION_LESS KILN_CUDA_MIN_VERSION)
    if(NOT kiln_nvcc_version)
      set(found "no working CUDA compiler (nvcc) was found")
      if(CMAKE_CUDA_COMPILER)
        set(found "the CUDA compiler '${CMAKE_CUDA_COMPILER}' does not run")
      endif()
    else()
      set(found "nvcc ${kiln_nvcc_version} (${CMAKE_CUDA_COMPILER}) is too old")
    endif()
    # Look again on the next configure, once the toolkit is there.
    unset(CMAKE_CUDA_COMPILER CACHE)
    message(FATAL_ERROR
      "KILN_CUDA=ON, but ${found}.\n"
      "The CUDA backend needs the CUDA toolkit ${KILN_CUDA_MIN_VERSION} or newer (Kiln is built and tested with "
      "CUDA 13.0), for Hopper GPUs (sm_90a). Either\n"
      "  - install the toolkit (NVIDIA's packages put it in /usr/local/cuda) and put its nvcc on PATH, or name it:\n"
      "      CUDACXX=/usr/local/cuda/bin/nvcc cmake --preset cuda\n"
      "      cmake --preset cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc\n"
      "  - or build without the CUDA backend: cmake --preset release (no -DKILN_CUDA=ON).\n"
      "Why CMake's check of the compiler failed, if it ran: "
      "${CMAKE_BINARY_DIR}/CMakeFiles/CMakeError.log")
  else()
    set(KILN_HAVE_CUDA ON)
  endif()
endif()

if(KILN_HAVE_CUDA)
  # Architectures come from the -gencode flags below, not from CMake's list.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CUDA sources take the project's C++20 (CXX_STANDARD); CMake 3.25 does not know nvcc's flag for it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION} for sm_90a")
endif()

# kiln_cuda_module(DEPS ...): kiln_backends_cuda from every .cpp and .cu under src/backends/cuda.
function(kiln_cuda_module)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/cuda/*.cpp
       ${PROJECT_SOURCE_DIR}/src/backends/cuda/*.cu)
  add_library(kiln_backends_cuda STATIC ${sources})
  set_target_properties(kiln_backends_cuda PROPERTIES UNITY_BUILD OFF)
  target_include_directories(kiln_backends_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src)
  # cuBLAS and cuBLASLt are opened when first needed (cublas_library.cpp), not linked: their headers only.
  target_link_libraries(kiln_backends_cuda PUBLIC ${ARG_DEPS} PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
  target_compile_definitions(kiln_backends_cuda PRIVATE
    KILN_CUBLAS_SONAME="libcublas.so.${CUDAToolkit_VERSION_MAJOR}"
    KILN_CUBLASLT_SONAME="libcublasLt.so.${CUDAToolkit_VERSION_MAJOR}"
    KILN_CUDA_LIBRARY_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_compile_definitions(kiln_backends_cuda PUBLIC KILN_VERSION="${PROJECT_VERSION}")
  # C++ sources get the project's warnings through kiln_flags (CXX only); nvcc gets its own set
  # (-Wpedantic would report nvcc's generated host code).
  set(cuda_flags -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra)
  if(KILN_WERROR)
    list(APPEND cuda_flags -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(kiln_backends_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>)
endfunction()
