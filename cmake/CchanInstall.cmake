# install(EXPORT), package config and pkg-config file.
#
# Downstream CMake:   find_package(cchan 0.1 CONFIG REQUIRED)
#                     target_link_libraries(app PRIVATE cchan::cchan)    # runtime + headers
#                     target_link_libraries(kernels PRIVATE cchan::headers)  # device headers only
#                     target_link_libraries(app PRIVATE cchan::coll)     # or cchan::moe, cchan::fused, cchan::exec
# Downstream make:    cc app.c $(pkg-config --cflags --libs cchan)      # or cchan-coll, -moe, -fused, -exec
# Both are relocatable: the installed tree may be moved as a whole.
include(CMakePackageConfigHelpers)
set(CCHAN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cchan)

set(cchan_install_targets cchan cchan_headers cchan-run cchan_coll cchan_moe cchan_fused_rmsnorm)
set(cchan_pc_libs coll moe fused)
if(TARGET cchan_exec) # left out without jansson (CCHAN_REQUIRE_JANSSON=OFF)
  list(APPEND cchan_install_targets cchan_exec)
  list(APPEND cchan_pc_libs exec)
endif()
install(TARGETS ${cchan_install_targets}
  EXPORT cchanTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cchan DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(EXPORT cchanTargets NAMESPACE cchan:: DESTINATION ${CCHAN_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cchanConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cchanConfig.cmake
  INSTALL_DESTINATION ${CCHAN_INSTALL_CMAKEDIR})
# 0.x: a minor release may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cchanConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cchanConfig.cmake ${PROJECT_BINARY_DIR}/cchanConfigVersion.cmake
  DESTINATION ${CCHAN_INSTALL_CMAKEDIR})

# pkg-config: prefix found from the .pc file's own location (${pcfiledir}), so that
# `cmake --install build --prefix anywhere` gives a working file.
set(CCHAN_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(CCHAN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH rel "/root/${CCHAN_PC_DIR}" "/root")
  string(REGEX REPLACE "/$" "" rel "${rel}")
  set(CCHAN_PC_PREFIX "\${pcfiledir}/${rel}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${kind}}")
    set(CCHAN_PC_${kind} "${CMAKE_INSTALL_${kind}}")
  else()
    set(CCHAN_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/cchan.pc.in ${PROJECT_BINARY_DIR}/cchan.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cchan.pc DESTINATION ${CCHAN_PC_DIR})
# One file per kernel library: Requires cchan, links the library.
foreach(lib ${cchan_pc_libs})
  set(CCHAN_PC_LIB ${lib})
  set(CCHAN_PC_LIBNAME cchan_${lib})
  if(lib STREQUAL "fused")
    set(CCHAN_PC_LIBNAME cchan_fused_rmsnorm)
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/cchan-lib.pc.in ${PROJECT_BINARY_DIR}/cchan-${lib}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cchan-${lib}.pc DESTINATION ${CCHAN_PC_DIR})
endforeach()
