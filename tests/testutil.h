/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the Check suites. */
#ifndef CLPIN_TESTUTIL_H
#define CLPIN_TESTUTIL_H

#include "clpin.h"

#include <check.h>
#include <stdbool.h>

/* One OpenCL context and in-order queue on the default device (POCL's CPU
 * device in CI, or whatever CLPIN_TEST_PLATFORM names: a substring of the
 * platform name, e.g. "Oclgrind"). Create them inside a checked fixture or a
 * test body, never before Check forks. */
typedef struct {
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue queue;
  bool unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY: clpin stages there only if told to */
} test_cl;

/* Fails the current test on any OpenCL error. */
void test_cl_open(test_cl *t);
void test_cl_close(test_cl *t);

/* Whether t's platform name contains name. */
bool test_platform_is(const test_cl *t, const char *name);
/* A known defect of the implementation under test keeps a test from
 * meaning anything there: true (and the reason printed, naming the test)
 * when t's platform name contains platform; the test then returns. */
bool test_skip_on(const test_cl *t, const char *platform, const char *test, const char *why);

/* Mesa 22.3's rusticl (Debian 12): clFinish returns before commands that
 * wait for a user event not yet set have run (measured: a marker behind a
 * user event set 0.3 s later, clFinish back at once, the marker still
 * CL_SUBMITTED), so "clFinish covers a non-blocking transfer without an
 * event" cannot hold there. */
#define TEST_RUSTICL_FINISH                                                                        \
  "rusticl 22.3's clFinish does not wait for commands behind a user event (docs/RELIABILITY.md)"

/* A device buffer of n bytes (read-write). */
cl_mem test_buffer(const test_cl *t, size_t n);

/* ---- fixtures shared by the stress suites ------------------------------- */

/* Stage every size on every device, POCL's host-unified one too:
 * CLPIN_OPT_PINNED 1, both staging minimums 0, and pipeline chunks of
 * `chunk` bytes (0: the chunk option untouched). Fails the current test
 * when an option is refused. */
void test_stage_everything(size_t chunk);
/* The usual fixture end: clpin_shutdown(), then test_cl_close(t). */
void test_shutdown_close(test_cl *t);

/* A context made and released within one step of a churn test: on t's
 * device (no platform property), with an in-order queue and a read-write
 * buffer of n bytes. Close releases the buffer, queue and context, and
 * makes no clpin call. */
typedef struct {
  cl_context ctx;
  cl_command_queue q;
  cl_mem buf;
} test_short_ctx;
void test_short_ctx_open(const test_cl *t, size_t n, test_short_ctx *c);
void test_short_ctx_close(test_short_ctx *c);

/* A loader desc of today's size (struct_size set) with these fields and
 * every other one zero: depth or workers 0 take the library's defaults. */
clpin_loader_desc test_loader_desc(size_t batch_bytes, uint64_t batches, unsigned depth,
                                   unsigned workers, clpin_fill_fn fill, void *user);

/* A count from the environment (LIFECYCLE_ROUNDS, FORK_ROUNDS, ...): its
 * value when it is a positive number, else dflt. */
long test_env_count(const char *name, long dflt);
/* CLOCK_MONOTONIC in seconds. */
double test_now(void);
void test_sleep_us(long us);

/* A test case of s named name, with a checked fixture (when setup or
 * teardown is given) and a timeout in seconds (when > 0): add the tests to
 * what it returns. */
TCase *test_tcase(Suite *s, const char *name, void (*setup)(void), void (*teardown)(void),
                  double timeout);

/* Deterministic byte pattern for (seed, index). */
static inline unsigned char test_pattern(unsigned seed, size_t i) {
  return (unsigned char)((i * 2654435761u + seed * 40503u) >> 7);
}
void test_fill(void *p, size_t n, unsigned seed);
/* Index of the first byte that differs from the pattern, or (size_t)-1. */
size_t test_check(const void *p, size_t n, unsigned seed);

/* ---- pool counters: the one snapshot helper and invariant check ---------- */

/* Fill *s with the pool's counters (struct_size set, every field written by
 * clpin). Returns clpin_pool_stats()'s code; for code that must not stop on
 * the first problem (fault sweeps, threads, the fuzzer). */
cl_int test_stats_get(clpin_pool *pool, clpin_stats *s);
/* A snapshot of the pool's counters; fails the current Check test when
 * clpin_pool_stats() fails. */
clpin_stats test_stats(clpin_pool *pool);
/* The invariants every snapshot satisfies: bytes cached + in use + in flight
 * == reserved; blocks cached + in use + in flight == driver allocs - frees;
 * peak >= reserved. NULL when they hold; else what is broken, written into
 * why (len bytes), which is returned. */
const char *test_stats_broken(const clpin_stats *s, char *why, size_t len);
/* Fail the current Check test when a snapshot breaks an invariant. */
void test_assert_balanced(const clpin_stats *s);
/* test_assert_balanced() of a fresh snapshot of pool. */
void test_assert_pool_balanced(clpin_pool *pool);

/* Run a Check suite (CK_FORK as configured) and return the exit status. */
int test_run_suite(Suite *s);

#define CL_OK(expr)                                                                                \
  do {                                                                                             \
    cl_int err_ = (expr);                                                                          \
    ck_assert_msg(err_ == CL_SUCCESS, "%s -> %d (%s)", #expr, err_, clpin_strerror(err_));         \
  } while (0)

#endif
