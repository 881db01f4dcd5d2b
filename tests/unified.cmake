# Host-unified devices (src/unified.c, the zero-copy paths of src/tensor.c,
# clpin_host_buffer): the vendor rule table, then each zero-copy path on
# POCL. CI stage 30-oclgrind runs the "rules" and "tensors" cases on Oclgrind
# with CLPIN__TEST_UNIFIED=pocl.
clpin_check_test(check_unified LABELS unit TIMEOUT 300)
