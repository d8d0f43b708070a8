# install(EXPORT), package config and pkg-config file.
include(CMakePackageConfigHelpers)
install(TARGETS cchan cchan_headers cchan-run EXPORT cchanTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/cchan DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT cchanTargets NAMESPACE cchan:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cchan)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/cchanConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/cchanConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cchan)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cchanConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cchanConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/cchanConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cchan)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/cchan.pc.in ${CMAKE_CURRENT_BINARY_DIR}/cchan.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cchan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
