/* SPDX-License-Identifier: Apache-2.0 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void test_cl_open(test_cl *t) {
  memset(t, 0, sizeof *t);
  cl_uint np = 0;
  CL_OK(clGetPlatformIDs(0, NULL, &np));
  ck_assert_uint_gt(np, 0);
  cl_platform_id ps[16];
  if (np > 16)
    np = 16;
  CL_OK(clGetPlatformIDs(np, ps, NULL));
  const char *want = getenv("CLPIN_TEST_PLATFORM");
  t->platform = NULL;
  for (cl_uint i = 0; i < np; i++) {
    char name[256] = "";
    clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
    if (!want || !*want || strstr(name, want)) {
      t->platform = ps[i];
      break;
    }
  }
  ck_assert_msg(t->platform != NULL, "no OpenCL platform matches CLPIN_TEST_PLATFORM=%s", want);
  CL_OK(clGetDeviceIDs(t->platform, CL_DEVICE_TYPE_ALL, 1, &t->device, NULL));
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)t->platform, 0};
  t->ctx = clCreateContext(props, 1, &t->device, NULL, NULL, &err);
  CL_OK(err);
  t->queue = clCreateCommandQueue(t->ctx, t->device, 0, &err);
  CL_OK(err);
  cl_bool u = CL_FALSE;
  CL_OK(clGetDeviceInfo(t->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof u, &u, NULL));
  t->unified = u == CL_TRUE;
}

bool test_platform_is(const test_cl *t, const char *name) {
  char got[256] = "";
  return t->platform &&
         clGetPlatformInfo(t->platform, CL_PLATFORM_NAME, sizeof got - 1, got, NULL) ==
             CL_SUCCESS &&
         strstr(got, name) != NULL;
}

bool test_skip_on(const test_cl *t, const char *platform, const char *test, const char *why) {
  if (!test_platform_is(t, platform))
    return false;
  fprintf(stderr, "%s: not run on %s: %s\n", test, platform, why);
  return true;
}

void test_cl_close(test_cl *t) {
  clpin_pool_release_context(t->ctx);
  if (t->queue)
    clReleaseCommandQueue(t->queue);
  if (t->ctx)
    clReleaseContext(t->ctx);
  memset(t, 0, sizeof *t);
}

cl_mem test_buffer(const test_cl *t, size_t n) {
  cl_int err;
  cl_mem m = clCreateBuffer(t->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CL_OK(err);
  return m;
}

void test_stage_everything(size_t chunk) {
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  if (chunk)
    CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, chunk));
}

void test_shutdown_close(test_cl *t) {
  clpin_shutdown();
  test_cl_close(t);
}

void test_short_ctx_open(const test_cl *t, size_t n, test_short_ctx *c) {
  cl_int err;
  c->ctx = clCreateContext(NULL, 1, &t->device, NULL, NULL, &err);
  CL_OK(err);
  c->q = clCreateCommandQueue(c->ctx, t->device, 0, &err);
  CL_OK(err);
  c->buf = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  CL_OK(err);
}

void test_short_ctx_close(test_short_ctx *c) {
  clReleaseMemObject(c->buf);
  clReleaseCommandQueue(c->q);
  clReleaseContext(c->ctx);
}

clpin_loader_desc test_loader_desc(size_t batch_bytes, uint64_t batches, unsigned depth,
                                   unsigned workers, clpin_fill_fn fill, void *user) {
  clpin_loader_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.batch_bytes = batch_bytes;
  d.batches = batches;
  d.depth = depth;
  d.workers = workers;
  d.fill = fill;
  d.user = user;
  return d;
}

long test_env_count(const char *name, long dflt) {
  const char *e = getenv(name);
  long n = e ? atol(e) : 0;
  return n > 0 ? n : dflt;
}

double test_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void test_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

TCase *test_tcase(Suite *s, const char *name, void (*setup)(void), void (*teardown)(void),
                  double timeout) {
  TCase *tc = tcase_create(name);
  if (setup || teardown)
    tcase_add_checked_fixture(tc, setup, teardown);
  if (timeout > 0)
    tcase_set_timeout(tc, timeout);
  suite_add_tcase(s, tc);
  return tc;
}

void test_fill(void *p, size_t n, unsigned seed) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = test_pattern(seed, i);
}

size_t test_check(const void *p, size_t n, unsigned seed) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != test_pattern(seed, i))
      return i;
  return (size_t)-1;
}

int test_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  /* Stop clpin's copy workers (and free any pool a no-fork run left), so
   * nothing of clpin's is still running when memory checkers look at exit. */
  clpin_shutdown();
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

cl_int test_stats_get(clpin_pool *pool, clpin_stats *s) {
  memset(s, 0, sizeof *s);
  s->struct_size = sizeof *s;
  return clpin_pool_stats(pool, s);
}

clpin_stats test_stats(clpin_pool *pool) {
  clpin_stats s;
  CL_OK(test_stats_get(pool, &s));
  return s;
}

const char *test_stats_broken(const clpin_stats *s, char *why, size_t len) {
  size_t blocks = s->blocks_cached + s->blocks_in_use + s->blocks_in_flight;
  if (s->bytes_cached + s->bytes_in_use + s->bytes_in_flight != s->bytes_reserved)
    snprintf(why, len, "bytes cached %zu + in use %zu + in flight %zu != reserved %zu",
             s->bytes_cached, s->bytes_in_use, s->bytes_in_flight, s->bytes_reserved);
  else if (s->driver_allocs < s->driver_frees || s->driver_allocs - s->driver_frees != blocks)
    snprintf(why, len,
             "driver allocs %llu - frees %llu != blocks cached %zu + in use %zu + in flight %zu",
             (unsigned long long)s->driver_allocs, (unsigned long long)s->driver_frees,
             s->blocks_cached, s->blocks_in_use, s->blocks_in_flight);
  else if (s->bytes_reserved > s->peak_bytes_reserved)
    snprintf(why, len, "reserved %zu > peak %zu", s->bytes_reserved, s->peak_bytes_reserved);
  else
    return NULL;
  return why;
}

void test_assert_balanced(const clpin_stats *s) {
  char why[256];
  const char *broken = test_stats_broken(s, why, sizeof why);
  ck_assert_msg(broken == NULL, "pool invariant broken: %s", broken);
}

void test_assert_pool_balanced(clpin_pool *pool) {
  clpin_stats s = test_stats(pool);
  test_assert_balanced(&s);
}
