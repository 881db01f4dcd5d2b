/* SPDX-License-Identifier: Apache-2.0 */
/* How every bench picks its devices (bench/benchcl.c), on POCL's two CPU
 * devices (POCL_DEVICES="pthread pthread", set by tests/bench.cmake): one
 * rule for every program, so a --platform that works for one works for all. */
#include "benchcl.h"
#include "testutil.h"

#include <string.h>

START_TEST(find_any_and_by_platform) {
  cl_platform_id p = NULL, q = NULL;
  cl_device_id d[BENCH_CL_MAX_DEVICES], e[BENCH_CL_MAX_DEVICES];
  cl_uint n = bench_cl_find(NULL, &p, d, BENCH_CL_MAX_DEVICES);
  ck_assert_uint_ge(n, 2);
  ck_assert_ptr_nonnull(p);
  /* POCL has no GPU: the rule falls back to all of its devices. */
  ck_assert_uint_eq(bench_cl_find("Portable", &q, e, BENCH_CL_MAX_DEVICES), n);
  ck_assert_ptr_eq(q, p);
  ck_assert_ptr_eq(e[0], d[0]);
  ck_assert_uint_eq(bench_cl_find(NULL, &q, e, 1), 1);
  ck_assert_ptr_eq(e[0], d[0]);
}
END_TEST

/* A name no platform has matches devices whose names contain it, or nothing. */
START_TEST(find_by_device_name) {
  cl_platform_id p = NULL;
  cl_device_id d[BENCH_CL_MAX_DEVICES], e[BENCH_CL_MAX_DEVICES];
  cl_uint n = bench_cl_find(NULL, &p, d, BENCH_CL_MAX_DEVICES);
  ck_assert_uint_ge(n, 1);
  char name[256];
  bench_cl_name(d[0], name, sizeof name);
  ck_assert_str_ne(name, "");
  cl_uint m = bench_cl_find(name, &p, e, BENCH_CL_MAX_DEVICES);
  ck_assert_uint_ge(m, 1);
  for (cl_uint i = 0; i < m; i++) {
    char other[256];
    ck_assert_ptr_nonnull(strstr(bench_cl_name(e[i], other, sizeof other), name));
  }
  ck_assert_uint_eq(bench_cl_find("no platform or device is named this", &p, e, 4), 0);
}
END_TEST

START_TEST(open_context_and_queue) {
  cl_device_id dev;
  cl_context ctx;
  cl_command_queue q;
  bench_cl_open("check_benchcl", "Portable", bench_cl_code, &dev, &ctx, &q);
  cl_uint refs = 0;
  ck_assert_int_eq(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL),
                   CL_SUCCESS);
  ck_assert_uint_ge(refs, 1);
  cl_device_id qdev = NULL;
  ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL), CL_SUCCESS);
  ck_assert_ptr_eq(qdev, dev);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
}
END_TEST

START_TEST(code_text) {
  ck_assert_str_eq(bench_cl_code(CL_INVALID_VALUE), "-30");
  ck_assert_str_eq(bench_cl_code(CL_SUCCESS), "0");
}
END_TEST

int main(void) {
  Suite *s = suite_create("benchcl");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, find_any_and_by_platform);
  tcase_add_test(tc, find_by_device_name);
  tcase_add_test(tc, open_context_and_queue);
  tcase_add_test(tc, code_text);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
