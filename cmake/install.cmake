# SPDX-License-Identifier: Apache-2.0
# Installation: shared + static libraries, the header, the CMake package
# (find_package(clpin) -> clpin::clpin, clpin::clpin_static), clpin.pc (and
# clpin-lib.pc, its part).
# tests/package/ holds the consumer projects that ci/stages/50-package.sh
# builds against an installed tree to prove every piece of this works.
set(CLPIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/clpin)

# Components (cmake/package.cmake makes a Debian package of each): runtime
# (libclpin.so.0 and the layer), dev (header, static library, the libclpin.so
# link, CMake package, pkg-config files) and python (cmake/python.cmake).
install(TARGETS clpin clpin_static EXPORT clpinTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# clpin_mpi_errors.h: libclpin-mpi's error codes, which clpin.h includes
# (clpin_strerror names them), so it goes wherever clpin.h goes.
install(FILES ${PROJECT_SOURCE_DIR}/include/clpin.h ${PROJECT_SOURCE_DIR}/include/clpin_mpi_errors.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT clpinTargets NAMESPACE clpin:: DESTINATION ${CLPIN_CMAKE_DIR} COMPONENT dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/clpinConfig.cmake.in
  ${PROJECT_BINARY_DIR}/clpinConfig.cmake INSTALL_DESTINATION ${CLPIN_CMAKE_DIR})
# Before 1.0 a minor release may break the API (semantic versioning), so a
# 0.x request only accepts the same minor version; from 1.0 on, the same major.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(CLPIN_VERSION_COMPAT SameMinorVersion)
else()
  set(CLPIN_VERSION_COMPAT SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/clpinConfigVersion.cmake
  COMPATIBILITY ${CLPIN_VERSION_COMPAT})
install(FILES ${PROJECT_BINARY_DIR}/clpinConfig.cmake ${PROJECT_BINARY_DIR}/clpinConfigVersion.cmake
  DESTINATION ${CLPIN_CMAKE_DIR} COMPONENT dev)

# clpin.pc finds its prefix relative to its own location (${pcfiledir}), so
# the tree stays correct when installed with `cmake --install --prefix DIR`
# (CMAKE_INSTALL_PREFIX at configure time would be wrong then) or moved.
# Under the system prefix /usr (the Debian packages) it holds absolute paths,
# which pkg-config drops as the system's own: --cflags clpin is empty there.
set(CLPIN_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}"
   OR CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(CLPIN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(CLPIN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(CLPIN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH CLPIN_PC_UP "/root/${CLPIN_PC_DIR}" "/root")
  string(REGEX REPLACE "/$" "" CLPIN_PC_UP "${CLPIN_PC_UP}")
  set(CLPIN_PC_PREFIX "\${pcfiledir}/${CLPIN_PC_UP}")
  set(CLPIN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(CLPIN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# clpin.pc links the shared library, and with --static the static one;
# clpin-lib.pc holds its -lclpin (clpin.pc.in says why).
foreach(pc clpin clpin-lib)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CLPIN_PC_DIR} COMPONENT dev)
endforeach()
