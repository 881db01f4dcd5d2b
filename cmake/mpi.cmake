# SPDX-License-Identifier: Apache-2.0
# libclpin-mpi: OpenCL device buffers across MPI ranks (include/clpin_mpi.h,
# src/mpi/). Optional: CLPIN_MPI=AUTO builds it where find_package(MPI)
# finds C MPI, ON requires it, OFF never builds it. It links clpin's shared
# library and uses its public API, and of clpin's internals only the files
# it compiles in itself (CLPIN_MPI_CORE_SOURCES below).
# Installed (all in the component "mpi", which cmake/package.cmake's Debian
# packages leave out: they would otherwise depend on one MPI):
# libclpin-mpi.so, clpin_mpi.h, clpin-mpi.pc and clpinMpiTargets.cmake,
# which clpinConfig.cmake loads when the consumer's find_package(MPI) finds
# MPI too: clpin::mpi.
set(CLPIN_MPI AUTO CACHE STRING "Build libclpin-mpi: AUTO (where MPI is found), ON or OFF")
set_property(CACHE CLPIN_MPI PROPERTY STRINGS AUTO ON OFF)
set(CLPIN_HAVE_MPI OFF)
if(CLPIN_MPI STREQUAL "OFF")
  return()
elseif(CLPIN_MPI STREQUAL "ON")
  find_package(MPI REQUIRED COMPONENTS C)
else()
  find_package(MPI QUIET COMPONENTS C)
endif()
if(NOT MPI_C_FOUND)
  message(STATUS "clpin: no C MPI found: libclpin-mpi is not built")
  return()
endif()
set(CLPIN_HAVE_MPI ON)
message(STATUS "clpin: libclpin-mpi with MPI ${MPI_C_VERSION} (${MPI_C_COMPILER})")

# Which MPI, for what differs between them: the launcher's flags of the
# tests (tests/mpi.cmake, examples/mpi_loader.cmake) and the Debian
# package's dependencies (cmake/package.cmake). FindMPI takes the launcher
# from PATH, not from the compiler it was given: with
# -DMPI_C_COMPILER=/usr/bin/mpicc.mpich it still finds Open MPI's mpiexec
# unless -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich says otherwise, and
# ranks of one MPI started by the other's launcher each run alone.
if(MPI_C_LIBRARIES MATCHES "mpich")
  set(CLPIN_MPI_KIND mpich)
else()
  set(CLPIN_MPI_KIND openmpi)
endif()
set(CLPIN_MPIEXEC_KIND unknown)
if(MPIEXEC_EXECUTABLE)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE out ERROR_VARIABLE out
    RESULT_VARIABLE rc TIMEOUT 30)
  if(out MATCHES "Open MPI|OpenRTE")
    set(CLPIN_MPIEXEC_KIND openmpi)
  elseif(out MATCHES "HYDRA")
    set(CLPIN_MPIEXEC_KIND mpich)
  endif()
endif()
if(NOT CLPIN_MPIEXEC_KIND STREQUAL "unknown" AND NOT CLPIN_MPIEXEC_KIND STREQUAL CLPIN_MPI_KIND)
  message(WARNING "clpin: libclpin-mpi links ${CLPIN_MPI_KIND} but MPIEXEC_EXECUTABLE "
    "(${MPIEXEC_EXECUTABLE}) is ${CLPIN_MPIEXEC_KIND}'s: its tests would run as one-rank jobs; "
    "pass -DMPIEXEC_EXECUTABLE=<that MPI's launcher>, e.g. /usr/bin/mpiexec.mpich")
endif()
# Open MPI refuses more ranks than cores (CI has 2) without --oversubscribe;
# MPICH's hydra has no such flag and runs them anyway.
set(CLPIN_MPIEXEC_FLAGS "")
if(CLPIN_MPIEXEC_KIND STREQUAL "openmpi")
  set(CLPIN_MPIEXEC_FLAGS --oversubscribe)
endif()

file(GLOB CLPIN_MPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/mpi/*.c)
# The shared internal base: the core's files with no state of their own that
# the add-on compiles in again (hidden, as everything but CLPIN_API is), so
# that its size options and versioned structs follow the core's very rules:
# size.c (size options), vstruct.c (struct_size). docs/DESIGN.md, "The layer
# map".
set(CLPIN_MPI_CORE_SOURCES ${PROJECT_SOURCE_DIR}/src/size.c ${PROJECT_SOURCE_DIR}/src/vstruct.c)
add_library(clpin_mpi SHARED ${CLPIN_MPI_SOURCES} ${CLPIN_MPI_CORE_SOURCES})
set_target_properties(clpin_mpi PROPERTIES OUTPUT_NAME clpin-mpi EXPORT_NAME mpi
  VERSION ${PROJECT_VERSION} SOVERSION ${CLPIN_SOVERSION})
target_include_directories(clpin_mpi PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_definitions(clpin_mpi PRIVATE CL_TARGET_OPENCL_VERSION=120 CLPIN_BUILDING
  _GNU_SOURCE)
target_compile_options(clpin_mpi PRIVATE ${CLPIN_WARNINGS})
target_link_libraries(clpin_mpi PUBLIC clpin MPI::MPI_C PRIVATE Threads::Threads)
# It hangs a delete callback on communicators (src/mpi/cache.c) that MPI
# calls as late as MPI_Finalize: a dlopen()ed copy (Python's cffi) must not
# be unmapped before that, so dlclose leaves it loaded.
target_link_options(clpin_mpi PRIVATE -Wl,-z,nodelete)
add_library(clpin::mpi ALIAS clpin_mpi)

install(TARGETS clpin_mpi EXPORT clpinMpiTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT mpi
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/clpin_mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT mpi)
install(EXPORT clpinMpiTargets NAMESPACE clpin:: DESTINATION ${CLPIN_CMAKE_DIR} COMPONENT mpi)

# clpin-mpi.pc: clpin's flags (Requires) and MPI's, as CMake found them.
set(CLPIN_MPI_PC_CFLAGS "")
foreach(d ${MPI_C_INCLUDE_DIRS})
  string(APPEND CLPIN_MPI_PC_CFLAGS " -I${d}")
endforeach()
set(CLPIN_MPI_PC_LIBS "")
foreach(l ${MPI_C_LIBRARIES})
  string(APPEND CLPIN_MPI_PC_LIBS " ${l}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/clpin-mpi.pc.in ${PROJECT_BINARY_DIR}/clpin-mpi.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/clpin-mpi.pc DESTINATION ${CLPIN_PC_DIR} COMPONENT mpi)
