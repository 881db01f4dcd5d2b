# SPDX-License-Identifier: Apache-2.0
# The Python package (python/clpin) installed with the library, where the
# system python3 finds it, and told where the library it came with lies:
# `import clpin` then works after `cmake --install` with no CLPIN_LIBRARY,
# no PYTHONPATH (for the prefixes on python3's path: /usr/local, /usr) and no
# ldconfig. ci/stages/50-package.sh installs to a clean prefix and uses it.
#
# CLPIN_PYTHON: the interpreter whose path decides the directory (the
# system's /usr/bin/python3 when there is one: Debian's numpy and pyopencl
# are its packages). CLPIN_PYTHON_INSTALL_DIR: the directory, relative to the
# prefix (Debian: lib/python3.X/dist-packages, on sys.path for /usr/local
# and /usr, and under the prefix /usr lib/python3/dist-packages, where
# Debian's packages put pure Python modules; elsewhere sysconfig's purelib of
# the prefix scheme).
option(CLPIN_INSTALL_PYTHON "Install the clpin Python module with the library" ON)
if(NOT CLPIN_INSTALL_PYTHON)
  return()
endif()
if(EXISTS /usr/bin/python3)
  set(CLPIN_PYTHON_DEFAULT /usr/bin/python3)
else()
  find_program(CLPIN_PYTHON_DEFAULT NAMES python3)
endif()
set(CLPIN_PYTHON "${CLPIN_PYTHON_DEFAULT}" CACHE FILEPATH "python3 whose path decides where the module goes")
if(NOT CLPIN_PYTHON_INSTALL_DIR)
  if(NOT CLPIN_PYTHON)
    message(STATUS "clpin: no python3: the Python module is not installed")
    return()
  endif()
  execute_process(
    COMMAND "${CLPIN_PYTHON}" -c [=[
import os, sys, sysconfig
if "deb_system" in sysconfig.get_scheme_names() and sys.argv[1] == "/usr":
    print("lib/python3/dist-packages", end="")  # Debian's own packages: any python3
elif "deb_system" in sysconfig.get_scheme_names():  # Debian and derivatives
    print("lib/python%s/dist-packages" % sysconfig.get_python_version(), end="")
else:
    base = "/clpin-prefix"
    path = sysconfig.get_path("purelib", "posix_prefix", vars={"base": base, "platbase": base})
    print(os.path.relpath(path, base), end="")
]=] "${CMAKE_INSTALL_PREFIX}"
    OUTPUT_VARIABLE CLPIN_PYTHON_DIR_FOUND RESULT_VARIABLE CLPIN_PYTHON_RC)
  if(NOT CLPIN_PYTHON_RC EQUAL 0 OR CLPIN_PYTHON_DIR_FOUND STREQUAL "")
    message(STATUS "clpin: ${CLPIN_PYTHON} did not say where modules go: the Python module is not installed")
    return()
  endif()
  set(CLPIN_PYTHON_INSTALL_DIR "${CLPIN_PYTHON_DIR_FOUND}" CACHE STRING
      "where the clpin Python module goes, relative to the prefix")
endif()

# The module finds the library relative to itself, so the tree works under
# any `cmake --install --prefix` and when moved whole.
set(CLPIN_PY_MODULE_DIR "${CLPIN_PYTHON_INSTALL_DIR}/clpin")
if(IS_ABSOLUTE "${CLPIN_PYTHON_INSTALL_DIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(CLPIN_PY_LIB_EXPR "\"${CMAKE_INSTALL_FULL_LIBDIR}\"")
else()
  file(RELATIVE_PATH CLPIN_PY_UP "/root/${CLPIN_PY_MODULE_DIR}" "/root/${CMAKE_INSTALL_LIBDIR}")
  set(CLPIN_PY_LIB_EXPR "os.path.join(os.path.dirname(os.path.abspath(__file__)), \"${CLPIN_PY_UP}\")")
endif()
set(CLPIN_PY_SONAME "${CMAKE_SHARED_LIBRARY_PREFIX}clpin${CMAKE_SHARED_LIBRARY_SUFFIX}.${CLPIN_SOVERSION}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/_installed.py.in ${PROJECT_BINARY_DIR}/python/_installed.py @ONLY)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/clpin/ DESTINATION ${CLPIN_PY_MODULE_DIR}
        COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/python/_installed.py DESTINATION ${CLPIN_PY_MODULE_DIR}
        COMPONENT python)
