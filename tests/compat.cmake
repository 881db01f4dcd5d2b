# SPDX-License-Identifier: Apache-2.0
# Programs written against 0.2.0's and 0.3.0's clpin.h (tests/compat/clpin-0.2.h
# and clpin-0.3.h, kept unchanged), linked against today's shared library:
# they run unchanged.
foreach(v 0.2 0.3)
  string(REPLACE "." "" tag ${v})
  add_executable(compat_v${tag} compat/old_caller.c)
  target_compile_definitions(compat_v${tag} PRIVATE CLPIN_OLD_HEADER="clpin-${v}.h")
  target_include_directories(compat_v${tag} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/compat)
  target_link_libraries(compat_v${tag} PRIVATE clpin)
  add_test(NAME compat_v${tag} COMMAND compat_v${tag})
  set_tests_properties(compat_v${tag} PROPERTIES LABELS unit TIMEOUT 300)
endforeach()
