# SPDX-License-Identifier: Apache-2.0
# Host-unified devices (src/unified.c, the zero-copy paths of src/tensor.c,
# clpin_host_buffer, the handoff protocol): the vendor rule table, then each zero-copy path on
# POCL. CI stage 30-oclgrind runs the "rules" and "tensors" cases on Oclgrind
# with CLPIN__TEST_UNIFIED=pocl.
clpin_check_test(check_unified LABELS unit TIMEOUT 300)
# The same zero-copy cases under the other rules of the table, through the
# test seam CLPIN__TEST_UNIFIED (their OpenCL is correct on any device): the
# ALLOC_HOST_PTR + map path (Arm Mali's rule; Adreno and AMD APUs share it)
# and Intel's alignment and size-multiple rule.
foreach(rule arm-mali intel)
  add_test(NAME check_unified_${rule} COMMAND check_unified)
  set_tests_properties(check_unified_${rule} PROPERTIES LABELS unit TIMEOUT 300
    ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_RUN_CASE=tensors;CLPIN__TEST_UNIFIED=${rule}")
endforeach()
# The handoff protocol (clpin_host_lend / clpin_host_reclaim) under every
# rule of the table: map/unmap is correct OpenCL on any device.
foreach(rule intel arm-mali qualcomm-adreno amd-apu)
  add_test(NAME check_unified_handoff_${rule} COMMAND check_unified)
  set_tests_properties(check_unified_handoff_${rule} PROPERTIES LABELS unit TIMEOUT 300
    ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_RUN_CASE=handoff;CLPIN__TEST_UNIFIED=${rule}")
endforeach()
# The probe of host-unified devices no rule names (src/zc.c), on POCL
# through the seam CLPIN__TEST_UNIFIED=probe: what it finds on each of two
# devices, then the zero-copy cases under the rule it found.
foreach(tcase probe tensors)
  add_test(NAME check_unified_probe_${tcase} COMMAND check_unified)
  set_tests_properties(check_unified_probe_${tcase} PROPERTIES LABELS unit TIMEOUT 300
    ENVIRONMENT "CK_DEFAULT_TIMEOUT=120;CK_RUN_CASE=${tcase};CLPIN__TEST_UNIFIED=probe;POCL_DEVICES=pthread pthread")
endforeach()
