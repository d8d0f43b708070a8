# Test helpers. Every test is a small program; exit code 77 means "skipped" (the machine lacks what
# the test needs, and the program prints why), as in liburing and automake.
#
# cchan_test(<name> SOURCES <files...> [RANKS <n>] [CMOCKA] [INTERNAL] [TIMEOUT <s>]
#            [LABELS <l...>] [ARGS <args...>] [LIBS <libs...>])
#   Builds an executable from SOURCES linked with cchan (and cmocka with CMOCKA) and registers it.
#   With RANKS, the test runs as n processes through cchan-run (fork+exec, loopback bootstrap).
#   INTERNAL links the runtime statically (cchan_internal) instead of libcchan.so, so the test can
#   call hidden cchani_* functions; src/host and src/proxy are on its include path.
#   LABELS select tests: `ctest -L unit`, `ctest -LE compile` (the sanitizer runs skip "compile").
#   Default TIMEOUT 120 s. TIMEOUT is for the plain build; it is multiplied by the timeout scale
#   (below), for ctest and for cchan-run --timeout alike.
#
# cchan_cuda_test(<name> SOURCES <files.cu...> [RANKS <n>] [INTERNAL] [TIMEOUT <s>]
#                 [LABELS <l...>] [ARGS <args...>] [LIBS <libs...>])
#   A GPU test program (label "gpu", plus LABELS). With CUDA in the build it is compiled for
#   CMAKE_CUDA_ARCHITECTURES and registered like cchan_test; the program itself exits 77 with
#   "no GPU" when none is visible. Without CUDA it is not built and the test reports the skip (77).
#   test/gpu is on its include path.
#
# cchan_test_timeout(<var> <s>)
#   Sets <var> to <s> seconds times the timeout scale: the TIMEOUT (and cchan-run --timeout) of a
#   test registered with add_test() instead of cchan_test().
#
# cchan_fuzz(...): see CchanFuzz.cmake.

# A TIMEOUT ends a hung test, not a slow one: the sanitizers make every test slower (TSan most: every
# memory access and every lock goes through its runtime; exec_one_thread took 113 s alone and 123 s
# beside other work on a 2-core machine, against the 120 s it was given), and `make test` runs the
# three tiers beside other work on as few as two cores. So each TIMEOUT is written for an unloaded
# machine without sanitizers and multiplied here: 3 under ASan, 5 under TSan. Empty: by
# CCHAN_SANITIZE; set a number to stretch the timeouts further on a slow machine. (cchan_fuzz's
# timeouts are not scaled: a fuzz run stops itself after its SECONDS.)
set(CCHAN_TEST_TIMEOUT_SCALE "" CACHE STRING
    "Multiplier of every test's TIMEOUT (empty: 1, or 3 under ASan, 5 under TSan)")
if(NOT CCHAN_TEST_TIMEOUT_SCALE STREQUAL "" AND NOT CCHAN_TEST_TIMEOUT_SCALE MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "CCHAN_TEST_TIMEOUT_SCALE must be a whole number >= 1 "
                      "(got '${CCHAN_TEST_TIMEOUT_SCALE}')")
endif()

# The factor is worked out at each call, from cache variables only: this file is included in
# test/'s scope, but kernels/examples registers tests too.
function(cchan_test_timeout var seconds)
  if(CCHAN_TEST_TIMEOUT_SCALE MATCHES "^[1-9][0-9]*$")
    set(factor ${CCHAN_TEST_TIMEOUT_SCALE})
  elseif(CCHAN_SANITIZE STREQUAL "thread")
    set(factor 5)
  elseif(CCHAN_SANITIZE STREQUAL "address")
    set(factor 3)
  else()
    set(factor 1)
  endif()
  math(EXPR scaled "${seconds} * ${factor}")
  set(${var} ${scaled} PARENT_SCOPE)
endfunction()

find_path(CCHAN_CMOCKA_INCLUDE cmocka.h)
find_library(CCHAN_CMOCKA_LIB cmocka)
mark_as_advanced(CCHAN_CMOCKA_INCLUDE CCHAN_CMOCKA_LIB)
# Without cmocka (a machine with no package registry, such as the GPU machines) the cmocka tests
# report a skip and everything else is built; `make test` sets CCHAN_REQUIRE_CMOCKA=ON, so that CI
# never passes with those tests left out.
option(CCHAN_REQUIRE_CMOCKA "Fail the configure when cmocka is missing" OFF)
set(CCHAN_HAVE_CMOCKA ON)
if(NOT CCHAN_CMOCKA_INCLUDE OR NOT CCHAN_CMOCKA_LIB)
  if(CCHAN_REQUIRE_CMOCKA)
    message(FATAL_ERROR "cchan tests need cmocka (Debian: apt-get install libcmocka-dev); "
                        "'make test' installs it, or configure with -DCCHAN_BUILD_TESTS=OFF "
                        "or -DCCHAN_REQUIRE_CMOCKA=OFF")
  endif()
  set(CCHAN_HAVE_CMOCKA OFF)
  message(STATUS "cchan: cmocka not found: the cmocka tests are left out and report a skip "
                 "(Debian: apt-get install libcmocka-dev)")
endif()

# cchan_test_target(<executable> [CMOCKA] [INTERNAL] [LIBS <libs...>])
#   Links, include paths and warnings shared by every test executable; for executables made with
#   add_executable() and registered with cchan_register_test().
function(cchan_test_target name)
  cmake_parse_arguments(T "CMOCKA;INTERNAL" "" "LIBS" ${ARGN})
  if(T_INTERNAL)
    target_link_libraries(${name} PRIVATE cchan_internal)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src/host
                                               ${PROJECT_SOURCE_DIR}/src/proxy)
  else()
    target_link_libraries(${name} PRIVATE cchan)
  endif()
  target_link_libraries(${name} PRIVATE Threads::Threads ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/test/common)
  target_compile_options(${name} PRIVATE
    "$<$<COMPILE_LANGUAGE:C,CXX>:-Wall;-Wextra;-Wno-unused-parameter>")
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  if(T_CMOCKA)
    target_include_directories(${name} PRIVATE ${CCHAN_CMOCKA_INCLUDE})
    target_link_libraries(${name} PRIVATE ${CCHAN_CMOCKA_LIB})
  endif()
endfunction()

# cchan_register_test(<test name> [TARGET <executable>] [RANKS <n>] [TIMEOUT <s>] [LABELS <l...>]
#                     [ARGS <args...>])
#   Registers an executable as a test, through cchan-run with RANKS. One executable may back several
#   tests, one per scenario in ARGS, named <executable>_<scenario>: without TARGET, the executable
#   is the target named like the test, else the longest "_"-separated prefix of the test name that
#   is a target (boot_env_torchrun -> boot_env).
function(cchan_register_test name)
  cmake_parse_arguments(T "" "TARGET;RANKS;TIMEOUT" "LABELS;ARGS" ${ARGN})
  if(NOT T_TARGET)
    set(T_TARGET ${name})
    while(NOT TARGET ${T_TARGET} AND T_TARGET MATCHES "_[^_]+$")
      string(REGEX REPLACE "_[^_]+$" "" T_TARGET "${T_TARGET}")
    endwhile()
  endif()
  if(NOT TARGET ${T_TARGET} AND NOT CCHAN_HAVE_CMOCKA)
    cchan_register_skip(${name} "not built: cmocka not found" LABELS ${T_LABELS})
    return()
  endif()
  if(NOT TARGET ${T_TARGET})
    message(FATAL_ERROR "cchan_register_test(${name}): no executable target '${T_TARGET}'; "
                        "name it with TARGET <executable>")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  cchan_test_timeout(T_TIMEOUT ${T_TIMEOUT})
  if(T_RANKS)
    add_test(NAME ${name} COMMAND $<TARGET_FILE:cchan-run> -n ${T_RANKS} --timeout ${T_TIMEOUT}
             $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
  else()
    add_test(NAME ${name} COMMAND ${T_TARGET} ${T_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT}
                                          LABELS "${T_LABELS}")
endfunction()

# Registers a test that only reports why it cannot run here (exit 77).
function(cchan_register_skip name why)
  cmake_parse_arguments(T "" "" "LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND sh -c "echo \"SKIP ${name}: $1\"; exit 77" sh "${why}")
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}")
endfunction()

function(cchan_test name)
  cmake_parse_arguments(T "CMOCKA;INTERNAL" "RANKS;TIMEOUT" "SOURCES;LABELS;ARGS;LIBS" ${ARGN})
  if(T_CMOCKA AND NOT CCHAN_HAVE_CMOCKA)
    cchan_register_skip(${name} "not built: cmocka not found" LABELS ${T_LABELS})
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  set(flags "")
  if(T_CMOCKA)
    list(APPEND flags CMOCKA)
  endif()
  if(T_INTERNAL)
    list(APPEND flags INTERNAL)
  endif()
  cchan_test_target(${name} ${flags} LIBS ${T_LIBS})
  cchan_register_test(${name} RANKS ${T_RANKS} TIMEOUT ${T_TIMEOUT} LABELS ${T_LABELS}
                      ARGS ${T_ARGS})
endfunction()

function(cchan_cuda_test name)
  cmake_parse_arguments(T "INTERNAL" "RANKS;TIMEOUT" "SOURCES;LABELS;ARGS;LIBS" ${ARGN})
  if(NOT CCHAN_HAVE_CUDA)
    cchan_register_skip(${name} "not built: ${CCHAN_CUDA_WHY}" LABELS gpu ${T_LABELS})
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  set(flags "")
  if(T_INTERNAL)
    list(APPEND flags INTERNAL)
  endif()
  cchan_test_target(${name} ${flags} LIBS ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/test/gpu)
  cchan_register_test(${name} RANKS ${T_RANKS} TIMEOUT ${T_TIMEOUT} LABELS gpu ${T_LABELS}
                      ARGS ${T_ARGS})
endfunction()

include(CchanFuzz)
