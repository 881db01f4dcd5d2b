# Installation: libraries, header, CMake package (clpin::clpin) and clpin.pc.
install(TARGETS clpin clpin_static EXPORT clpinTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/clpin.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT clpinTargets NAMESPACE clpin:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/clpin)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/clpinConfig.cmake.in
  ${PROJECT_BINARY_DIR}/clpinConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/clpin)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/clpinConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/clpinConfig.cmake ${PROJECT_BINARY_DIR}/clpinConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/clpin)
configure_file(${PROJECT_SOURCE_DIR}/cmake/clpin.pc.in ${PROJECT_BINARY_DIR}/clpin.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/clpin.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
