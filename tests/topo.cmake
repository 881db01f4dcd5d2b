# SPDX-License-Identifier: Apache-2.0
# Devices, NUMA nodes and footprint: one suite, three cases, each
# in its own process with the POCL device list it needs (POCL reads
# POCL_DEVICES once, and the valgrind stage runs a suite in one process).
clpin_check_test(check_topo LABELS unit TIMEOUT 600 ENV "CK_RUN_CASE=footprint")
add_test(NAME check_topo_two COMMAND check_topo)
set_tests_properties(check_topo_two PROPERTIES LABELS "unit;sanitize" TIMEOUT 900 ENVIRONMENT
  "CK_DEFAULT_TIMEOUT=600;CK_RUN_CASE=two;POCL_DEVICES=pthread pthread")
add_test(NAME check_topo_numa COMMAND check_topo)
set_tests_properties(check_topo_numa PROPERTIES LABELS unit TIMEOUT 600 ENVIRONMENT
  "CK_DEFAULT_TIMEOUT=300;CK_RUN_CASE=numa;POCL_DEVICES=pthread pthread pthread pthread")
