# Tensors and the host mirror (src/tensor.c).
clpin_check_test(check_tensor LABELS unit TIMEOUT 120)

# The same suite on Oclgrind, which reports no host-unified memory and so
# behaves like a discrete device (issue 3). ci/deps.sh installs it; the ICD is
# registered through a vendors directory of our own so only Oclgrind is seen.
set(CLPIN_OCLGRIND_ICD /usr/lib/oclgrind/liboclgrind-rt-icd.so)
if(EXISTS ${CLPIN_OCLGRIND_ICD})
  set(tensor_vendors ${CMAKE_CURRENT_BINARY_DIR}/tensor-oclgrind-vendors)
  file(WRITE ${tensor_vendors}/oclgrind.icd "${CLPIN_OCLGRIND_ICD}\n")
  add_test(NAME check_tensor_oclgrind COMMAND check_tensor)
  set_tests_properties(check_tensor_oclgrind PROPERTIES LABELS "unit;oclgrind" TIMEOUT 300
    ENVIRONMENT "OCL_ICD_VENDORS=${tensor_vendors};CLPIN_TEST_PLATFORM=Oclgrind")
else()
  message(STATUS "Oclgrind not installed (ci/deps.sh installs it): check_tensor_oclgrind not registered")
endif()
