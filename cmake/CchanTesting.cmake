# Test helpers.
#
# cchan_test(<name> SOURCES <files...> [RANKS <n>] [CMOCKA] [TIMEOUT <s>] [LABELS <l...>]
#            [ARGS <args...>] [LIBS <libs...>])
#   Builds an executable from SOURCES linked with cchan (and cmocka with CMOCKA) and registers it.
#   With RANKS, the test runs as n processes through cchan-run (fork+exec, loopback bootstrap).
#   Exit code 77 means "skipped" (the machine lacks what the test needs; the test prints why).
find_path(CCHAN_CMOCKA_INCLUDE cmocka.h)
find_library(CCHAN_CMOCKA_LIB cmocka)
if(NOT CCHAN_CMOCKA_INCLUDE OR NOT CCHAN_CMOCKA_LIB)
  message(FATAL_ERROR "cchan tests need cmocka (Debian: apt-get install libcmocka-dev); "
                      "'make test' installs it, or configure with -DCCHAN_BUILD_TESTS=OFF")
endif()

function(cchan_test name)
  cmake_parse_arguments(T "CMOCKA" "RANKS;TIMEOUT" "SOURCES;LABELS;ARGS;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE cchan Threads::Threads ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/test/common)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wno-unused-parameter>)
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  if(T_CMOCKA)
    target_include_directories(${name} PRIVATE ${CCHAN_CMOCKA_INCLUDE})
    target_link_libraries(${name} PRIVATE ${CCHAN_CMOCKA_LIB})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(T_RANKS)
    add_test(NAME ${name} COMMAND $<TARGET_FILE:cchan-run> -n ${T_RANKS} --timeout ${T_TIMEOUT}
             $<TARGET_FILE:${name}> ${T_ARGS})
  else()
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()
