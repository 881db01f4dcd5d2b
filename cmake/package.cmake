# SPDX-License-Identifier: Apache-2.0
# Debian packages: `cpack -G DEB` in a build tree configured with
# -DCMAKE_INSTALL_PREFIX=/usr writes three .deb files, one per install
# component (cmake/install.cmake, layer/, cmake/python.cmake):
#
#   libclpin0.N    runtime  libclpin.so.0.N* and libclpin-layer.so (named for
#                           the SONAME, CMakeLists.txt's policy: 0.MINOR)
#   libclpin-dev   dev      clpin.h, libclpin.a, the libclpin.so link, the
#                           CMake package, clpin.pc and clpin-lib.pc
#   python3-clpin  python   the clpin module in /usr/lib/python3/dist-packages
#
# Under the prefix /usr GNUInstallDirs puts the libraries in the multiarch
# directory (lib/x86_64-linux-gnu). docs/INSTALL.md says how to build and
# install them; ci/stages/52-deb.sh installs, uses and removes them.
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "clpin: the Debian packages (cpack -G DEB) want -DCMAKE_INSTALL_PREFIX=/usr")
endif()

# The project has no public mail address or web site yet: the Maintainer
# below is a placeholder (the .invalid domain says so), the one address used
# everywhere, and there is no Homepage field until CLPIN_DEB_HOMEPAGE is
# set. Whoever publishes packages sets both (docs/INSTALL.md).
set(CLPIN_DEB_MAINTAINER "clpin maintainers <clpin@example.invalid>" CACHE STRING
    "The Maintainer field of clpin's Debian packages")
set(CLPIN_DEB_HOMEPAGE "" CACHE STRING "The Homepage field of clpin's Debian packages (none when empty)")
set(CLPIN_DEB_RELEASE 1 CACHE STRING "The Debian revision of clpin's packages (0.2.0-<this>)")

set(CPACK_PACKAGE_NAME clpin)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
set(CPACK_PACKAGE_DIRECTORY "${PROJECT_BINARY_DIR}")
set(CPACK_COMPONENTS_ALL runtime dev python)
if(CLPIN_HAVE_MPI)
  list(APPEND CPACK_COMPONENTS_ALL mpi)
endif()

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # name_version-release_arch.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE ${CLPIN_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CLPIN_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
if(CLPIN_DEB_HOMEPAGE)
  set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${CLPIN_DEB_HOMEPAGE}")
endif()
# Each description's first line is its synopsis (no package-wide summary:
# CPack would put it in front of every description).
# Depends: libclpin0.N (= 0.N.0-1) from the component dependencies below: the
# dev files and the Python module fit that build of the library only.
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# The runtime package's Depends are written here, not read by
# dpkg-shlibdeps: from ocl-icd's symbols file it listed the OpenCL loader
# three times over (ocl-icd-libopencl1 | libopencl-1.1-1 | libopencl1, ... |
# libopencl1, ... | libopencl-1.2-1). clpin calls OpenCL 1.2 (any ICD loader
# that provides it; ocl-icd 2.3 for the layer, docs/LAYER.md), and the C
# library it was built against, or later.
execute_process(COMMAND getconf GNU_LIBC_VERSION OUTPUT_VARIABLE _clpin_glibc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
string(REGEX MATCH "[0-9]+\\.[0-9]+" _clpin_glibc "${_clpin_glibc}")
set(_clpin_libc "libc6")
if(_clpin_glibc)
  set(_clpin_libc "libc6 (>= ${_clpin_glibc})")
endif()
set(CPACK_COMPONENT_RUNTIME_DISPLAY_NAME "clpin shared library")
set(CLPIN_DEB_RUNTIME libclpin${CLPIN_SOVERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${CLPIN_DEB_RUNTIME})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "${_clpin_libc}, ocl-icd-libopencl1 | libopencl-1.2-1")
# The shlibs file tells packages built against libclpin.so to depend on this
# version or later (policy ">="). It is written here for libclpin.so alone:
# libclpin-layer.so is a plugin the ICD loader opens by path (NO_SONAME,
# layer/CMakeLists.txt), which CPack's own shlibs generation would warn
# about. The SONAME libclpin.so.0.N lies in the loader's default path: the
# ldconfig trigger refreshes its cache.
file(GENERATE OUTPUT "${PROJECT_BINARY_DIR}/deb/runtime/shlibs"
     CONTENT "libclpin $<TARGET_PROPERTY:clpin,SOVERSION> ${CLPIN_DEB_RUNTIME} (>= ${PROJECT_VERSION}-${CLPIN_DEB_RELEASE})\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/cmake/deb/runtime/triggers;${PROJECT_BINARY_DIR}/deb/runtime/shlibs")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "Pinned host memory pools and fast staging transfers for OpenCL
clpin makes host-device transfers of OpenCL programs fast: it stages them
through pinned (page-locked) host memory, kept in a pool per context because
creating it is expensive, and pipelines large transfers of pageable memory.

This package holds the shared library libclpin.so.${CLPIN_SOVERSION} and libclpin-layer.so,
an OpenCL loader layer (OPENCL_LAYERS) that routes an unmodified program's
buffer transfers through clpin.")

# libclpin-dev: the static library links OpenCL dynamically (there is no
# libOpenCL.a), so the dev package needs the loader's link and CL/cl.h.
set(CPACK_COMPONENT_DEV_DISPLAY_NAME "clpin development files")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libclpin-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "ocl-icd-opencl-dev | opencl-dev, opencl-c-headers | opencl-headers")
set(CPACK_DEBIAN_DEV_DESCRIPTION
    "Pinned host memory pools and fast staging transfers for OpenCL (development files)
clpin makes host-device transfers of OpenCL programs fast by staging them
through pooled pinned host memory.

This package holds the header clpin.h, the static library libclpin.a, the
CMake package (find_package(clpin) gives clpin::clpin and
clpin::clpin_static) and the pkg-config files (pkg-config clpin).")

# python3-clpin: pure Python over libclpin.so.0.N through cffi's ABI mode, so
# one package serves every python3 (Architecture: all). Its _installed.py
# names /usr/lib/<multiarch>/libclpin.so.0.N, which libclpin0.N provides. The
# maintainer scripts byte-compile the module on install and remove the
# bytecode on removal, as Debian's Python packages do.
set(CPACK_COMPONENT_PYTHON_DISPLAY_NAME "clpin for Python 3")
set(CPACK_COMPONENT_PYTHON_DEPENDS runtime)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-clpin)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, python3-numpy, python3-pyopencl, python3-cffi")
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/cmake/deb/python3-clpin/postinst;${PROJECT_SOURCE_DIR}/cmake/deb/python3-clpin/prerm")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
    "Pinned host memory pools and fast staging transfers for pyopencl and numpy
The clpin module gives pyopencl and numpy users clpin's pinned pools and
staging transfers (empty_pinned, from_host, to_host, stats), over the shared
library libclpin.so.${CLPIN_SOVERSION} (cffi ABI mode, no compiled extension).")

# libclpin-mpi0.N (where MPI was found): libclpin-mpi.so.0.N with its
# header, CMake export and clpin-mpi.pc in one package, since it is small;
# it needs this build's libclpin (the component dependencies), the
# library of the MPI it was built with (Open MPI's, or MPICH's:
# cmake/mpi.cmake's CLPIN_MPI_KIND) and, for building against it,
# libclpin-dev and that MPI's headers.
# Written out: dpkg-shlibdeps cannot see libclpin in the runtime package's
# staging tree, and the library needs nothing else (libc, OpenCL through
# libclpin).
if(CLPIN_HAVE_MPI)
  set(CPACK_COMPONENT_MPI_DISPLAY_NAME "clpin for MPI")
  set(CPACK_COMPONENT_MPI_DEPENDS runtime dev)
  set(CPACK_DEBIAN_MPI_PACKAGE_NAME libclpin-mpi${CLPIN_SOVERSION})
  set(CPACK_DEBIAN_MPI_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_MPI_PACKAGE_SHLIBDEPS OFF)
  if(CLPIN_MPI_KIND STREQUAL "mpich")
    set(CPACK_DEBIAN_MPI_PACKAGE_DEPENDS "libmpich12, libmpich-dev")
  else()
    set(CPACK_DEBIAN_MPI_PACKAGE_DEPENDS "libopenmpi3, libopenmpi-dev")
  endif()
  set(CPACK_DEBIAN_MPI_DESCRIPTION
      "OpenCL device buffers between MPI ranks through clpin's pinned memory
libclpin-mpi moves OpenCL device buffers between MPI ranks (send, recv,
allreduce, bcast), staged through clpin's pinned memory and pipelined;
ranks of one host share memory so both devices reach it by DMA.

This package holds libclpin-mpi.so.${CLPIN_SOVERSION}, the header clpin_mpi.h, its
CMake target (clpin::mpi) and pkg-config file (clpin-mpi).")
endif()

# Each package's /usr/share/doc/<package>/copyright (Debian policy 12.5):
# the project's licence, Apache-2.0, in Debian's machine-readable format.
configure_file(${PROJECT_SOURCE_DIR}/cmake/deb/copyright.in ${PROJECT_BINARY_DIR}/deb/copyright COPYONLY)
foreach(c ${CPACK_COMPONENTS_ALL})
  string(TOUPPER ${c} C)
  install(FILES ${PROJECT_BINARY_DIR}/deb/copyright
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${C}_PACKAGE_NAME} COMPONENT ${c})
endforeach()

include(CPack)
