/* SPDX-License-Identifier: Apache-2.0 */
/* Error names and versions. */
#include "testutil.h"

#include <pthread.h>
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

/* Statuses (CLPIN_END) are named like errors, in the same range, and no
 * status shares a value with an error. */
START_TEST(every_status_is_named) {
#define CHECK_STATUS(name, value, text)                                                            \
  ck_assert_int_eq(name, value);                                                                   \
  ck_assert_int_le(value, -20000);                                                                 \
  ck_assert_int_ge(value, -20099);                                                                 \
  ck_assert_str_eq(clpin_strerror(name), #name ": " text);
  CLPIN_STATUS_TABLE(CHECK_STATUS)
#undef CHECK_STATUS
#define NOT_A_STATUS(name, value, text) ck_assert_int_ne(value, CLPIN_END);
  CLPIN_ERROR_TABLE(NOT_A_STATUS)
#undef NOT_A_STATUS
  ck_assert_int_eq(CLPIN_END, -20019); /* 0.2's value */
}
END_TEST

/* Each flag family has bits of its own (also asserted at compile time in
 * src/errors.c), and the old option name is the new one. */
START_TEST(flag_families_are_disjoint) {
  unsigned fam[] = {CLPIN_TRANSFER_FLAGS, CLPIN_TENSOR_FLAGS, CLPIN_ACCESS_FLAGS,
                    CLPIN_LOADER_FLAGS};
  for (unsigned i = 0; i < 4; i++)
    for (unsigned j = i + 1; j < 4; j++)
      ck_assert_uint_eq(fam[i] & fam[j], 0);
  ck_assert_uint_eq(CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, CLPIN_TRANSFER_FLAGS);
  ck_assert_uint_eq(CLPIN_LOADER_UNORDERED & CLPIN_LOADER_FLAGS, CLPIN_LOADER_UNORDERED);
  ck_assert_int_eq(CLPIN_OPT_PINNED_H2D, CLPIN_OPT_PINNED);
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

/* A thread's detail: empty before its first failure, then its own. */
static void *fail_in_thread(void *arg) {
  (void)arg;
  static char seen[2][256];
  snprintf(seen[0], sizeof seen[0], "%s", clpin_last_error_detail());
  clpin_stats st = {0}; /* struct_size 0, but the NULL pool is found first */
  ck_assert_int_eq(clpin_pool_stats(NULL, &st), CLPIN_ERR_INVALID_ARGUMENT);
  snprintf(seen[1], sizeof seen[1], "%s", clpin_last_error_detail());
  return seen;
}

START_TEST(last_error_detail_names_the_argument) {
  ck_assert_str_eq(clpin_last_error_detail(), "");
  void *tensor = (void *)&tensor;
  ck_assert_int_eq(clpin_tensor_host_data((clpin_tensor *)tensor, NULL, 0, &tensor),
                   CL_INVALID_COMMAND_QUEUE); /* an OpenCL argument: OpenCL's code */
  const char *d = clpin_last_error_detail();
  ck_assert_ptr_nonnull(strstr(d, "clpin_tensor_host_data: "));
  ck_assert_ptr_nonnull(strstr(d, "the queue is NULL"));
  ck_assert_ptr_nonnull(strstr(d, "(CL_INVALID_COMMAND_QUEUE: "));
  char mine[256];
  snprintf(mine, sizeof mine, "%s", d);
  /* Another thread's failure neither shows here nor sees this one. */
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
  char(*seen)[256];
  ck_assert_int_eq(pthread_join(th, (void **)&seen), 0);
  ck_assert_str_eq(seen[0], "");
  ck_assert_ptr_nonnull(strstr(seen[1], "clpin_pool_stats: "));
  ck_assert_str_eq(clpin_last_error_detail(), mine);
  /* A success leaves it as it was (errno's contract). */
  ck_assert_str_eq(clpin_strerror(CL_SUCCESS), "CL_SUCCESS: success");
  ck_assert_int_eq(clpin_host_free(NULL), CL_SUCCESS);
  ck_assert_str_eq(clpin_last_error_detail(), mine);
}
END_TEST

int main(void) {
  Suite *s = suite_create("errors");
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, every_library_code_is_named);
  tcase_add_test(tc, every_status_is_named);
  tcase_add_test(tc, flag_families_are_disjoint);
  tcase_add_test(tc, opencl_codes_pass_through_named);
  tcase_add_test(tc, never_null);
  tcase_add_test(tc, version_matches_header);
  tcase_add_test(tc, last_error_detail_names_the_argument);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
