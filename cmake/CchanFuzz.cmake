# Fuzz tests.
#
# cchan_fuzz(<name> SOURCES <files...> [SECONDS <n>] [RUNS <n>] [MAX_LEN <bytes>] [CORPUS <dir>]
#            [INTERNAL] [LIBS <libs...>] [LABELS <l...>])
#
# Contract for the fuzz target (one .c file, the same code for both engines below):
#
#   #include <stddef.h>
#   #include <stdint.h>
#   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#       ... feed data[0..size) to the code under test ...
#       return 0;
#   }
#
#   - data is exactly `size` bytes (not NUL-terminated; size may be 0): reading past it is a bug the
#     sanitizers report. Never write to it.
#   - Return 0, or -1 to keep the input out of the corpus. Any other value fails the test.
#   - Must be deterministic, single-threaded per call, and must not leak, exit, abort, or keep state
#     between calls that changes behaviour. A crash, a sanitizer report, a leak or a hang
#     (> 10 s on one input) is a failure.
#   - Optional: int LLVMFuzzerInitialize(int *argc, char ***argv), called once before the inputs.
#   - Assert properties, not only "does not crash": e.g. decode(encode(x)) == x, or a parser that
#     accepts an input must produce a value within its documented limits (abort() when not).
#
# Engines (CCHAN_FUZZ_ENGINE = AUTO | libfuzzer | driver):
#   libfuzzer  when the C compiler is clang, -fsanitize=fuzzer links (Debian: libclang-rt-<N>-dev),
#              and the build is not a ThreadSanitizer build: the target is linked with
#              -fsanitize=fuzzer (plus address,undefined unless the build already sanitizes), and the
#              test runs libFuzzer for SECONDS (-max_total_time, -seed=1). In an address-sanitized
#              build the runtime itself is also compiled with coverage (-fsanitize=fuzzer-no-link),
#              so INTERNAL targets get coverage feedback from library code.
#   driver     otherwise: cmake/fuzz/fuzz_driver.c supplies main(), which runs the CORPUS files,
#              then RUNS pseudo-random and mutated inputs (up to MAX_LEN bytes) from a fixed seed,
#              stopping early after SECONDS. Same seed, same inputs: a failure reproduces by
#              rerunning the test. In the sanitizer builds of `make test` it runs under ASan+UBSan
#              and TSan.
# Either way a failing input is saved in the test's build folder as <name>-crash-* (libFuzzer:
# <name>-crash-<sha1>) and can be replayed with `<build>/.../<name> <file>`.
#
# Defaults: SECONDS 10, RUNS 100000, MAX_LEN 4096. INTERNAL links the runtime statically
# (cchan_internal: hidden cchani_* functions reachable, src/host and src/proxy on the include
# path). Labels: fuzz, plus LABELS. Keep SECONDS small: every fuzz test runs in every `make test`.
include_guard(GLOBAL)
set(CCHAN_FUZZ_ENGINE "AUTO" CACHE STRING "Fuzz engine: AUTO, libfuzzer or driver")
set_property(CACHE CCHAN_FUZZ_ENGINE PROPERTY STRINGS AUTO libfuzzer driver)

set(CCHAN_FUZZ_DRIVER_SOURCE ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_driver.c)

set(CCHAN_FUZZ_RESOLVED_ENGINE driver)
set(CCHAN_FUZZ_ENGINE_WHY "")
if(CCHAN_FUZZ_ENGINE STREQUAL "driver")
  set(CCHAN_FUZZ_ENGINE_WHY "CCHAN_FUZZ_ENGINE=driver")
elseif(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  set(CCHAN_FUZZ_ENGINE_WHY "the C compiler is ${CMAKE_C_COMPILER_ID}, libFuzzer needs clang")
elseif(CCHAN_SANITIZE STREQUAL "thread")
  set(CCHAN_FUZZ_ENGINE_WHY "libFuzzer does not run under ThreadSanitizer")
else()
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer")
  check_c_source_compiles("
    #include <stddef.h>
    #include <stdint.h>
    int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }"
    CCHAN_LIBFUZZER_LINKS)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_LINK_OPTIONS)
  if(CCHAN_LIBFUZZER_LINKS)
    set(CCHAN_FUZZ_RESOLVED_ENGINE libfuzzer)
  else()
    string(REGEX MATCH "^[0-9]+" major "${CMAKE_C_COMPILER_VERSION}")
    set(CCHAN_FUZZ_ENGINE_WHY
        "-fsanitize=fuzzer does not link (Debian: apt-get install libclang-rt-${major}-dev)")
  endif()
endif()
if(CCHAN_FUZZ_ENGINE STREQUAL "libfuzzer" AND NOT CCHAN_FUZZ_RESOLVED_ENGINE STREQUAL "libfuzzer")
  message(FATAL_ERROR "CCHAN_FUZZ_ENGINE=libfuzzer, but ${CCHAN_FUZZ_ENGINE_WHY}")
endif()

# Coverage instrumentation of the runtime for libFuzzer: only where every executable carries a
# sanitizer runtime (which defines the coverage callbacks), i.e. address-sanitized builds.
function(cchan_fuzz_instrument target)
  if(CCHAN_FUZZ_RESOLVED_ENGINE STREQUAL "libfuzzer" AND CCHAN_SANITIZE STREQUAL "address")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
  endif()
endfunction()

function(cchan_fuzz name)
  cmake_parse_arguments(F "INTERNAL" "SECONDS;RUNS;MAX_LEN;CORPUS" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT F_SOURCES)
    message(FATAL_ERROR "cchan_fuzz(${name}): SOURCES is required")
  endif()
  if(NOT F_SECONDS)
    set(F_SECONDS 10)
  endif()
  if(NOT F_RUNS)
    set(F_RUNS 100000)
  endif()
  if(NOT F_MAX_LEN)
    set(F_MAX_LEN 4096)
  endif()
  set(corpus "")
  if(F_CORPUS)
    get_filename_component(corpus ${F_CORPUS} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  endif()

  set(flags "")
  if(F_INTERNAL)
    list(APPEND flags INTERNAL)
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/${name}.fuzz)
  file(MAKE_DIRECTORY ${dir}/corpus)

  if(CCHAN_FUZZ_RESOLVED_ENGINE STREQUAL "libfuzzer")
    add_executable(${name} ${F_SOURCES})
    set(san -fsanitize=fuzzer)
    if(NOT CCHAN_SANITIZE)
      list(APPEND san -fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
    endif()
    target_compile_options(${name} PRIVATE ${san})
    target_link_options(${name} PRIVATE ${san})
    # New inputs go to the build folder's corpus; the source CORPUS is only read.
    set(args -max_total_time=${F_SECONDS} -seed=1 -max_len=${F_MAX_LEN} -timeout=10
             -print_final_stats=1 -artifact_prefix=${dir}/${name}- ${dir}/corpus ${corpus})
  else()
    add_executable(${name} ${F_SOURCES} ${CCHAN_FUZZ_DRIVER_SOURCE})
    set(args -runs=${F_RUNS} -max_total_time=${F_SECONDS} -seed=1 -max_len=${F_MAX_LEN}
             -artifact_prefix=${dir}/${name}- ${corpus})
  endif()
  cchan_test_target(${name} ${flags} LIBS ${F_LIBS})
  add_test(NAME ${name} COMMAND ${name} ${args} WORKING_DIRECTORY ${dir})
  math(EXPR timeout "${F_SECONDS} * 2 + 60")
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${timeout}
                                          LABELS "fuzz;${F_LABELS}")
endfunction()
