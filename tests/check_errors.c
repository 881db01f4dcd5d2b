/* Error names and versions. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

START_TEST(every_library_code_is_named) {
#define CHECK_CODE(name, value, text)                                                              \
  ck_assert_int_eq(name, value);                                                                   \
  ck_assert_int_le(value, -20000);                                                                 \
  ck_assert_int_ge(value, -20099);                                                                 \
  ck_assert_str_eq(clpin_strerror(name), #name ": " text);
  CLPIN_ERROR_TABLE(CHECK_CODE)
#undef CHECK_CODE
}
END_TEST

START_TEST(opencl_codes_pass_through_named) {
  ck_assert_str_eq(clpin_strerror(CL_SUCCESS), "CL_SUCCESS: success");
  ck_assert_str_eq(clpin_strerror(CL_INVALID_VALUE), "CL_INVALID_VALUE: invalid value");
  ck_assert(strncmp(clpin_strerror(CL_MEM_OBJECT_ALLOCATION_FAILURE),
                    "CL_MEM_OBJECT_ALLOCATION_FAILURE", 32) == 0);
  ck_assert(strncmp(clpin_strerror(CL_OUT_OF_HOST_MEMORY), "CL_OUT_OF_HOST_MEMORY", 21) == 0);
}
END_TEST

START_TEST(never_null) {
  for (long c = -30000; c <= 100; c++)
    ck_assert_ptr_nonnull(clpin_strerror((cl_int)c));
  ck_assert_str_eq(clpin_strerror(-20099), "unknown error code");
  ck_assert_str_eq(clpin_strerror(12345), "unknown error code");
  ck_assert_ptr_nonnull(clpin_strerror(INT32_MIN));
}
END_TEST

START_TEST(version_matches_header) {
  ck_assert_uint_eq(clpin_version(), CLPIN_VERSION_NUMBER);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", CLPIN_VERSION_MAJOR, CLPIN_VERSION_MINOR,
           CLPIN_VERSION_PATCH);
  ck_assert_str_eq(clpin_version_string(), want);
}
END_TEST

int main(void) {
  Suite *s = suite_create("errors");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, every_library_code_is_named);
  tcase_add_test(tc, opencl_codes_pass_through_named);
  tcase_add_test(tc, never_null);
  tcase_add_test(tc, version_matches_header);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
