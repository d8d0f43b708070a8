# Resolves cchan's build options into CCHAN_HAVE_* variables and a helper that applies them.
#
#   CCHAN_ENABLE_CUDA      ON | OFF | AUTO  CUDA backend, GPU tests, examples, benches (AUTO: when nvcc
#                                           and the toolkit are found; /usr/local/cuda is searched)
#   CCHAN_ENABLE_HIP       ON | OFF | AUTO  hipcc compile checks of the device headers
#   CCHAN_ENABLE_IBVERBS   ON | OFF         the ib transport, libibverbs loaded at run time (dlopen)
#   CCHAN_SANITIZE         "" | address | thread   instrument host code (address includes undefined)
#   CMAKE_CUDA_ARCHITECTURES                default "80;90"
#   CCHAN_FUZZ_ENGINE      AUTO | libfuzzer | driver   see CchanFuzz.cmake
find_package(Threads REQUIRED)

# CUDA: the runtime links cudart statically and reaches the driver API through
# cudaGetDriverEntryPoint, so libcchan loads (and falls back to the host backend) on machines with no
# NVIDIA driver at all.
set(CCHAN_HAVE_CUDA OFF)
set(CCHAN_CUDA_WHY "disabled (CCHAN_ENABLE_CUDA=OFF)")
if(NOT CCHAN_ENABLE_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    enable_language(CUDA)
    set(CCHAN_HAVE_CUDA ON)
    set(CCHAN_CUDA_WHY "")
  elseif(CCHAN_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CCHAN_ENABLE_CUDA=ON but no nvcc/CUDA toolkit was found "
                        "(looked in /usr/local/cuda and on PATH; set CUDAToolkit_ROOT)")
  else()
    set(CCHAN_CUDA_WHY "nvcc/CUDA toolkit not found (looked in /usr/local/cuda and on PATH)")
    message(STATUS "cchan: CUDA not found; building the host backend only")
  endif()
endif()

set(CCHAN_HAVE_HIP OFF)
set(CCHAN_HIP_WHY "disabled (CCHAN_ENABLE_HIP=OFF)")
if(NOT CCHAN_ENABLE_HIP STREQUAL "OFF")
  find_program(CCHAN_HIPCC hipcc PATHS /opt/rocm/bin)
  mark_as_advanced(CCHAN_HIPCC)
  if(CCHAN_HIPCC)
    set(CCHAN_HAVE_HIP ON)
    set(CCHAN_HIP_WHY "")
  elseif(CCHAN_ENABLE_HIP STREQUAL "ON")
    message(FATAL_ERROR "CCHAN_ENABLE_HIP=ON but hipcc was not found (Debian: apt-get install hipcc)")
  else()
    set(CCHAN_HIP_WHY "hipcc not found (Debian: apt-get install hipcc)")
  endif()
endif()

# libnuma: linked when its header is present (pinning proxies), reported otherwise.
find_path(CCHAN_NUMA_INCLUDE numa.h)
find_library(CCHAN_NUMA_LIB numa)
mark_as_advanced(CCHAN_NUMA_INCLUDE CCHAN_NUMA_LIB)
set(CCHAN_HAVE_NUMA OFF)
if(CCHAN_NUMA_INCLUDE AND CCHAN_NUMA_LIB)
  set(CCHAN_HAVE_NUMA ON)
endif()

# Sanitizers instrument C and C++ code only (nvcc takes no -fsanitize); a sanitized build is meant
# to be a host-backend build (-DCCHAN_ENABLE_CUDA=OFF), see scripts/run-tests.sh.
set(CCHAN_SANITIZE_FLAGS "")
if(CCHAN_SANITIZE STREQUAL "address")
  set(CCHAN_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
elseif(CCHAN_SANITIZE STREQUAL "thread")
  set(CCHAN_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT CCHAN_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CCHAN_SANITIZE must be '', address or thread (got '${CCHAN_SANITIZE}')")
endif()
if(CCHAN_SANITIZE_FLAGS)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${CCHAN_SANITIZE_FLAGS}>")
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:${CCHAN_SANITIZE_FLAGS}>")
endif()

function(cchan_configure_runtime target)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE CCHAN_BUILD_RUNTIME)
  if(CCHAN_HAVE_CUDA)
    target_compile_definitions(${target} PRIVATE CCHAN_HAVE_CUDA=1)
    target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  endif()
  if(CCHAN_HAVE_NUMA)
    target_compile_definitions(${target} PRIVATE CCHAN_HAVE_NUMA=1)
    target_include_directories(${target} PRIVATE ${CCHAN_NUMA_INCLUDE})
    target_link_libraries(${target} PRIVATE ${CCHAN_NUMA_LIB})
  endif()
  if(CCHAN_ENABLE_IBVERBS)
    target_compile_definitions(${target} PRIVATE CCHAN_ENABLE_IBVERBS=1)
  endif()
endfunction()

# cchan_library_abi(<target> <version script>): a kernel library's ABI, kept like the core's. Only
# the functions its header declares CCHAN_API are exported (default visibility hidden, and the
# version script lists them, so no internal function becomes something programs can link against),
# and its SONAME carries the major version (lib<name>.so.<major>), which programs record and which
# is the name a library of another major version does not answer to. test/exports checks both.
function(cchan_library_abi target map)
  set_target_properties(${target} PROPERTIES
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR}
    C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    LINK_DEPENDS ${map})
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
endfunction()
