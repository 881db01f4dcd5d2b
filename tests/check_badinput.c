/* SPDX-License-Identifier: Apache-2.0 */
/* The bad-input table (docs/BAD_INPUT.md), one test per row.
 *
 * Every test names its row id (BI-nn) and the code the row documents; the
 * last test reads docs/BAD_INPUT.md and checks that the table and the tests
 * list the same rows with the same codes. Each bad call runs between two
 * snapshots of a pool that holds a block in use, a cached block and a
 * clpin_host_alloc allocation, and the two snapshots must be identical:
 * a call that fails changes nothing. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static test_cl T;
static clpin_pool *P;
static clpin_block *held; /* in use for the whole test */
static void *held_host;   /* from clpin_host_alloc */
static size_t max_alloc;  /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */

static void assert_same(const clpin_stats *a, const clpin_stats *b) {
#define F(f)                                                                                       \
  ck_assert_msg(a->f == b->f, "stats." #f " changed: %llu -> %llu", (unsigned long long)a->f,      \
                (unsigned long long)b->f)
  F(hits);
  F(misses);
  F(driver_allocs);
  F(driver_frees);
  F(blocks_cached);
  F(bytes_cached);
  F(blocks_in_use);
  F(bytes_in_use);
  F(blocks_in_flight);
  F(bytes_in_flight);
  F(bytes_requested);
  F(bytes_reserved);
  F(peak_bytes_reserved);
  F(oom_retries);
  F(fallbacks);
  F(bytes_pinned_direct);
  F(bytes_staged);
  F(bytes_pipelined);
  F(bytes_unpinned);
  F(bytes_registered);
#undef F
  ck_assert(memcmp(a, b, sizeof *a) == 0);
}

/* Run call (a cl_int expression) on `pool` expecting `code`; the pool's stats
 * must be identical before and after. */
#define EXPECT_ON(pool, call, code)                                                                \
  do {                                                                                             \
    clpin_stats before_ = test_stats(pool);                                                        \
    cl_int got_ = (call);                                                                          \
    ck_assert_msg(got_ == (code), "%s -> %d (%s), want %s", #call, got_, clpin_strerror(got_),     \
                  #code);                                                                          \
    clpin_stats after_ = test_stats(pool);                                                         \
    assert_same(&before_, &after_);                                                                \
  } while (0)
#define EXPECT(call, code) EXPECT_ON(P, call, code)

/* The same for a call returning a pointer that must be NULL. */
#define EXPECT_NULL_ON(pool, call)                                                                 \
  do {                                                                                             \
    clpin_stats before_ = test_stats(pool);                                                        \
    const void *got_ = (const void *)(call);                                                       \
    ck_assert_msg(got_ == NULL, "%s -> %p, want NULL", #call, got_);                               \
    clpin_stats after_ = test_stats(pool);                                                         \
    assert_same(&before_, &after_);                                                                \
  } while (0)
#define EXPECT_NULL(call) EXPECT_NULL_ON(P, call)

static void setup(void) {
  test_cl_open(&T);
  cl_ulong m = 0;
  CL_OK(clGetDeviceInfo(T.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof m, &m, NULL));
  max_alloc = m > SIZE_MAX ? SIZE_MAX : (size_t)m;
  CL_OK(clpin_pool_get(T.queue, &P));
  clpin_block *tmp = NULL;
  CL_OK(clpin_acquire(P, 8192, &tmp));
  CL_OK(clpin_release(tmp, NULL)); /* one cached block */
  CL_OK(clpin_acquire(P, 1000, &held));
  test_fill(clpin_block_host(held), 1000, 7);
  held_host = clpin_host_alloc(P, 3000);
  ck_assert_ptr_nonnull(held_host);
  clpin_stats s = test_stats(P);
  ck_assert_uint_eq(s.blocks_cached, 1);
  ck_assert_uint_eq(s.blocks_in_use, 2);
}

static void teardown(void) {
  /* The held block's data must have survived every bad call. */
  if (held && clpin_block_host(held))
    ck_assert_uint_eq(test_check(clpin_block_host(held), 1000, 7), (size_t)-1);
  test_cl_close(&T);
  P = NULL;
  held = NULL;
  held_host = NULL;
}

/* A fake block: readable memory that clpin never handed out. */
static union {
  unsigned char bytes[512];
  max_align_t align;
} fake;

/* ---- pools -------------------------------------------------------------- */

START_TEST(bi01_pool_get_null_queue) {
  clpin_pool *p = (clpin_pool *)&fake;
  EXPECT(clpin_pool_get(NULL, &p), CL_INVALID_COMMAND_QUEUE);
  ck_assert_ptr_eq(p, (clpin_pool *)&fake);
}
END_TEST

START_TEST(bi02_pool_get_null_out) {
  EXPECT(clpin_pool_get(T.queue, NULL), CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi03_pool_get_for_context_null_ctx) {
  clpin_pool *p = (clpin_pool *)&fake;
  EXPECT(clpin_pool_get_for_context(NULL, &p), CL_INVALID_CONTEXT);
  ck_assert_ptr_eq(p, (clpin_pool *)&fake);
}
END_TEST

START_TEST(bi04_pool_get_for_context_null_out) {
  EXPECT(clpin_pool_get_for_context(T.ctx, NULL), CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi05_release_context_null) {
  EXPECT(clpin_pool_release_context(NULL), CL_INVALID_CONTEXT);
}
END_TEST

/* ---- acquire -------------------------------------------------------------- */

START_TEST(bi06_acquire_null_pool) {
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(NULL, 64, &b), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

START_TEST(bi07_acquire_null_out) {
  EXPECT(clpin_acquire(P, 64, NULL), CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi08_acquire_zero) {
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(P, 0, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

START_TEST(bi09_acquire_size_max) {
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(P, SIZE_MAX, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

START_TEST(bi10_acquire_over_max_alloc) {
  clpin_block *b = (clpin_block *)&fake;
  ck_assert_uint_lt(max_alloc, SIZE_MAX);
  EXPECT(clpin_acquire(P, max_alloc + 1, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

START_TEST(bi11_acquire_pow2_overflow) {
  /* The next power of two of this size does not fit in size_t. */
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(P, (SIZE_MAX >> 1) + 2, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

/* ---- release -------------------------------------------------------------- */

START_TEST(bi12_release_null) { EXPECT(clpin_release(NULL, NULL), CL_SUCCESS); }
END_TEST

START_TEST(bi13_release_twice_cached) {
  clpin_block *b;
  CL_OK(clpin_acquire(P, 100, &b));
  CL_OK(clpin_release(b, NULL));
  EXPECT(clpin_release(b, NULL), CLPIN_ERR_DOUBLE_RELEASE);
}
END_TEST

START_TEST(bi14_release_twice_in_flight) {
  cl_int err;
  cl_event ev = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  clpin_block *b;
  CL_OK(clpin_acquire(P, 100, &b));
  CL_OK(clpin_release(b, ev));
  ck_assert_uint_eq(test_stats(P).blocks_in_flight, 1);
  EXPECT(clpin_release(b, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  EXPECT(clpin_release(b, ev), CLPIN_ERR_DOUBLE_RELEASE);
  CL_OK(clSetUserEventStatus(ev, CL_COMPLETE));
  CL_OK(clReleaseEvent(ev));
}
END_TEST

START_TEST(bi15_release_zeroed_fake) {
  memset(&fake, 0, sizeof fake);
  EXPECT(clpin_release((clpin_block *)&fake, NULL), CLPIN_ERR_INVALID_BLOCK);
}
END_TEST

START_TEST(bi16_release_garbage_fake) {
  for (size_t i = 0; i < sizeof fake.bytes; i++)
    fake.bytes[i] = (unsigned char)(i * 37u + 11u);
  EXPECT(clpin_release((clpin_block *)&fake, NULL), CLPIN_ERR_INVALID_BLOCK);
  for (size_t i = 0; i < sizeof fake.bytes; i++)
    fake.bytes[i] = 0xff;
  EXPECT(clpin_release((clpin_block *)&fake, NULL), CLPIN_ERR_INVALID_BLOCK);
}
END_TEST

START_TEST(bi17_block_accessors_null_and_fake) {
  memset(&fake, 0, sizeof fake);
  EXPECT_NULL(clpin_block_host(NULL));
  EXPECT_NULL(clpin_block_buffer(NULL));
  ck_assert_uint_eq(clpin_block_size(NULL), 0);
  EXPECT_NULL(clpin_block_host((clpin_block *)&fake));
  EXPECT_NULL(clpin_block_buffer((clpin_block *)&fake));
}
END_TEST

/* ---- trim, limit, stats ---------------------------------------------------- */

START_TEST(bi18_trim_null) { EXPECT(clpin_pool_trim(NULL), CLPIN_ERR_INVALID_ARGUMENT); }
END_TEST

START_TEST(bi19_set_limit_null) {
  EXPECT(clpin_pool_set_limit(NULL, 0), CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi20_stats_null) {
  clpin_stats s;
  s.struct_size = sizeof s;
  EXPECT(clpin_pool_stats(NULL, &s), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_pool_stats(P, NULL), CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi21_stats_struct_size_too_small) {
  clpin_stats s;
  memset(&s, 0xab, sizeof s);
  s.struct_size = 0;
  EXPECT(clpin_pool_stats(P, &s), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(s.struct_size, 0);
  ck_assert_uint_eq(s.hits, 0xababababababababull); /* untouched */
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "struct_size"));
  s.struct_size = sizeof s.struct_size;
  EXPECT(clpin_pool_stats(P, &s), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_uint_eq(s.hits, 0xababababababababull);
}
END_TEST

/* ---- host_alloc / host_free ------------------------------------------------ */

START_TEST(bi22_host_alloc_null_pool) { EXPECT_NULL(clpin_host_alloc(NULL, 64)); }
END_TEST

START_TEST(bi23_host_alloc_zero) { EXPECT_NULL(clpin_host_alloc(P, 0)); }
END_TEST

START_TEST(bi24_host_alloc_huge) {
  EXPECT_NULL(clpin_host_alloc(P, SIZE_MAX));
  EXPECT_NULL(clpin_host_alloc(P, max_alloc + 1));
}
END_TEST

START_TEST(bi25_host_free_null) { EXPECT(clpin_host_free(NULL), CL_SUCCESS); }
END_TEST

START_TEST(bi26_host_free_malloc_pointer) {
  void *m = malloc(4096);
  ck_assert_ptr_nonnull(m);
  EXPECT(clpin_host_free(m), CLPIN_ERR_FOREIGN_POINTER);
  free(m);
  int on_stack = 0;
  EXPECT(clpin_host_free(&on_stack), CLPIN_ERR_FOREIGN_POINTER);
  EXPECT(clpin_host_free(&fake), CLPIN_ERR_FOREIGN_POINTER);
}
END_TEST

START_TEST(bi27_host_free_interior_pointer) {
  EXPECT(clpin_host_free((char *)held_host + 1), CLPIN_ERR_FOREIGN_POINTER);
  EXPECT(clpin_host_free((char *)held_host + 2999), CLPIN_ERR_FOREIGN_POINTER);
}
END_TEST

START_TEST(bi28_host_free_twice) {
  void *p = clpin_host_alloc(P, 100);
  ck_assert_ptr_nonnull(p);
  CL_OK(clpin_host_free(p));
  EXPECT(clpin_host_free(p), CLPIN_ERR_FOREIGN_POINTER);
}
END_TEST

START_TEST(bi29_host_free_block_pointer) {
  /* The host pointer of an acquired block is not a clpin_host_alloc pointer. */
  EXPECT(clpin_host_free(clpin_block_host(held)), CLPIN_ERR_FOREIGN_POINTER);
}
END_TEST

/* ---- find ----------------------------------------------------------------- */

START_TEST(bi30_find_null_pool_or_pointer) {
  size_t off = 12345;
  EXPECT_NULL(clpin_pool_find(NULL, clpin_block_host(held), 1, &off));
  EXPECT_NULL(clpin_pool_find(P, NULL, 1, &off));
  ck_assert_uint_eq(off, 12345);
}
END_TEST

START_TEST(bi31_find_range_past_block_end) {
  size_t off = 12345;
  char *h = clpin_block_host(held);
  size_t cap = clpin_block_size(held);
  ck_assert_ptr_eq(clpin_pool_find(P, h + 10, cap - 10, &off), held); /* the control */
  ck_assert_uint_eq(off, 10);
  off = 12345;
  EXPECT_NULL(clpin_pool_find(P, h + 10, cap - 9, &off));
  EXPECT_NULL(clpin_pool_find(P, h, SIZE_MAX / 2, &off));
  ck_assert_uint_eq(off, 12345);
  /* The byte just past the end is not in this block (another live block may
   * start there: the driver's allocations can be adjacent). */
  clpin_stats before = test_stats(P);
  clpin_block *next = clpin_pool_find(P, h + cap, 1, &off);
  ck_assert_ptr_ne(next, held);
  if (next) {
    char *nh = clpin_block_host(next);
    ck_assert(nh <= h + cap && h + cap < nh + clpin_block_size(next));
  }
  clpin_stats after = test_stats(P);
  assert_same(&before, &after);
}
END_TEST

START_TEST(bi32_find_size_overflow) {
  size_t off = 12345;
  char *h = clpin_block_host(held);
  EXPECT_NULL(clpin_pool_find(P, h + 1, SIZE_MAX, &off));
  EXPECT_NULL(clpin_pool_find(P, h, SIZE_MAX, &off));
  ck_assert_uint_eq(off, 12345);
}
END_TEST

START_TEST(bi33_find_released_block) {
  clpin_block *b;
  CL_OK(clpin_acquire(P, 100, &b));
  char *h = clpin_block_host(b);
  CL_OK(clpin_release(b, NULL));
  size_t off = 12345;
  EXPECT_NULL(clpin_pool_find(P, h, 1, &off));
  int on_stack = 0;
  EXPECT_NULL(clpin_pool_find(P, &on_stack, sizeof on_stack, &off));
  ck_assert_uint_eq(off, 12345);
}
END_TEST

/* ---- after release_context and shutdown ------------------------------------ */

/* Release the context's pool, keep the stale handles, and open a fresh pool
 * on the same context so "nothing changed" can still be observed. */
static clpin_pool *stale;
static clpin_block *stale_block;
static void *stale_host;

static void release_stale(void) {
  stale = P;
  stale_block = held;
  stale_host = held_host;
  CL_OK(clpin_pool_release_context(T.ctx));
  held = NULL;
  held_host = NULL;
}

static void reopen(void) {
  CL_OK(clpin_pool_get(T.queue, &P));
  ck_assert_ptr_ne(P, stale);
  clpin_stats s = test_stats(P);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  /* Give the fresh pool some state. */
  CL_OK(clpin_acquire(P, 1000, &held));
  test_fill(clpin_block_host(held), 1000, 7);
}

static void release_and_reopen(void) {
  release_stale();
  reopen();
}

START_TEST(bi34_stale_pool_acquire) {
  release_and_reopen();
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(stale, 64, &b), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
}
END_TEST

START_TEST(bi35_stale_pool_trim) {
  release_and_reopen();
  EXPECT(clpin_pool_trim(stale), CLPIN_ERR_POOL_RELEASED);
}
END_TEST

START_TEST(bi36_stale_pool_set_limit) {
  release_and_reopen();
  EXPECT(clpin_pool_set_limit(stale, 0), CLPIN_ERR_POOL_RELEASED);
}
END_TEST

START_TEST(bi37_stale_pool_stats) {
  /* Not an error (include/clpin.h): a released pool answers its final
   * counters, everything freed, and keeps answering the same. */
  release_and_reopen();
  clpin_stats s1 = test_stats(stale);
  ck_assert_uint_eq(s1.bytes_reserved, 0);
  ck_assert_uint_eq(s1.blocks_in_use + s1.blocks_cached + s1.blocks_in_flight, 0);
  ck_assert_uint_eq(s1.bytes_requested, 0);
  ck_assert_uint_eq(s1.driver_allocs, s1.driver_frees);
  ck_assert_uint_ge(s1.driver_allocs, 3); /* setup's blocks */
  EXPECT(clpin_pool_stats(stale, &s1), CL_SUCCESS);
  clpin_stats s2 = test_stats(stale);
  assert_same(&s1, &s2);
}
END_TEST

START_TEST(bi38_stale_pool_host_alloc) {
  release_and_reopen();
  EXPECT_NULL(clpin_host_alloc(stale, 64));
}
END_TEST

START_TEST(bi39_stale_pool_find) {
  release_and_reopen();
  size_t off = 12345;
  EXPECT_NULL(clpin_pool_find(stale, &off, 1, &off));
  ck_assert_uint_eq(off, 12345);
}
END_TEST

START_TEST(bi40_stale_block_release) {
  release_and_reopen();
  EXPECT(clpin_release(stale_block, NULL), CLPIN_ERR_POOL_RELEASED);
  EXPECT(clpin_release(stale_block, NULL), CLPIN_ERR_POOL_RELEASED);
}
END_TEST

START_TEST(bi41_stale_host_free) {
  /* Freed before any new block exists: once the driver hands the address
   * out again (the fresh pool's block may land on it, TSan's allocator does
   * that) it belongs to that block and is forgotten as a released one. */
  release_stale();
  /* The pool freed the memory: the answer says so, once; the address is
   * then no clpin allocation at all. */
  EXPECT(clpin_host_free(stale_host), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "released"));
  EXPECT(clpin_host_free(stale_host), CLPIN_ERR_FOREIGN_POINTER);
  reopen();
  EXPECT(clpin_host_free(stale_host), CLPIN_ERR_FOREIGN_POINTER);
}
END_TEST

START_TEST(bi42_release_context_twice) {
  release_and_reopen();
  cl_int err;
  cl_context other = clCreateContext(NULL, 1, &T.device, NULL, NULL, &err);
  CL_OK(err);
  /* A context that never had a pool. */
  EXPECT(clpin_pool_release_context(other), CL_SUCCESS);
  CL_OK(clReleaseContext(other));
}
END_TEST

START_TEST(bi43_after_shutdown) {
  clpin_pool *old = P;
  clpin_block *old_block = held;
  void *old_host = held_host;
  clpin_shutdown();
  held = NULL;
  held_host = NULL;
  CL_OK(clpin_pool_get(T.queue, &P));
  ck_assert_ptr_ne(P, old);
  /* Before any new block: one may reuse old_host's pages, and then the
   * pointer lies inside a live block and is no longer the released pool's
   * (its answer is CLPIN_ERR_FOREIGN_POINTER, API.md). */
  EXPECT(clpin_host_free(old_host), CLPIN_ERR_POOL_RELEASED);
  CL_OK(clpin_acquire(P, 1000, &held));
  test_fill(clpin_block_host(held), 1000, 7);
  clpin_block *b = (clpin_block *)&fake;
  EXPECT(clpin_acquire(old, 64, &b), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_eq(b, (clpin_block *)&fake);
  EXPECT(clpin_release(old_block, NULL), CLPIN_ERR_POOL_RELEASED);
  EXPECT(clpin_pool_trim(old), CLPIN_ERR_POOL_RELEASED);
  clpin_shutdown(); /* twice: nothing to do */
}
END_TEST

/* ---- registered memory ---------------------------------------------------- */

/* Four pages of the test's own memory, the middle two registered (from 10
 * bytes into page 1 to 10 bytes into page 3), so every bad call runs beside
 * a live registration whose bytes_registered must not move. */
static unsigned char *reg_mem;
static unsigned char *reg_region;
static size_t reg_page;

static void reg_open(void) {
  reg_page = (size_t)sysconf(_SC_PAGESIZE);
  reg_mem = aligned_alloc(reg_page, 4 * reg_page);
  ck_assert_ptr_nonnull(reg_mem);
  test_fill(reg_mem, 4 * reg_page, 9);
  reg_region = reg_mem + reg_page + 10;
  CL_OK(clpin_host_register(P, reg_region, 2 * reg_page));
  ck_assert_uint_eq(test_stats(P).bytes_registered, 3 * reg_page);
}

static void reg_close(void) {
  CL_OK(clpin_host_unregister(reg_region));
  ck_assert_uint_eq(test_check(reg_mem, 4 * reg_page, 9), (size_t)-1);
  free(reg_mem);
}

START_TEST(bi44_register_null) {
  reg_open();
  EXPECT(clpin_host_register(NULL, reg_mem, 10), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_host_register(P, NULL, 10), CLPIN_ERR_INVALID_ARGUMENT);
  reg_close();
}
END_TEST

START_TEST(bi45_register_bad_size) {
  reg_open();
  EXPECT(clpin_host_register(P, reg_mem, 0), CLPIN_ERR_INVALID_SIZE);
  EXPECT(clpin_host_register(P, reg_mem, max_alloc + 1), CLPIN_ERR_INVALID_SIZE);
  /* max_alloc bytes from 10 bytes into a page need one page more. */
  if (max_alloc % reg_page == 0)
    EXPECT(clpin_host_register(P, reg_mem + 10, max_alloc), CLPIN_ERR_INVALID_SIZE);
  reg_close();
}
END_TEST

START_TEST(bi46_register_wraps) {
  reg_open();
  EXPECT(clpin_host_register(P, reg_mem, SIZE_MAX), CLPIN_ERR_OVERFLOW);
  /* The end fits, its page does not. */
  EXPECT(clpin_host_register(P, reg_mem, SIZE_MAX - (size_t)(uintptr_t)reg_mem - 1),
         CLPIN_ERR_OVERFLOW);
  reg_close();
}
END_TEST

START_TEST(bi47_register_overlap) {
  reg_open();
  EXPECT(clpin_host_register(P, reg_region, 2 * reg_page), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, reg_mem, reg_page + 11), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, reg_region + 2 * reg_page - 1, 100), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, reg_mem, 4 * reg_page), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, reg_region + 1, 1), CLPIN_ERR_ALREADY_REGISTERED);
  /* Disjoint bytes on a page the registration pins. */
  EXPECT(clpin_host_register(P, reg_mem + reg_page, 10), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, reg_mem + 3 * reg_page + 10, 10), CLPIN_ERR_ALREADY_REGISTERED);
  /* clpin's own pinned memory. */
  EXPECT(clpin_host_register(P, held_host, 3000), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(P, clpin_block_host(held), 1), CLPIN_ERR_ALREADY_REGISTERED);
  reg_close();
}
END_TEST

START_TEST(bi48_unregister_null) {
  reg_open();
  EXPECT(clpin_host_unregister(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  reg_close();
}
END_TEST

START_TEST(bi49_unregister_unknown) {
  reg_open();
  int on_stack = 0;
  EXPECT(clpin_host_unregister(&on_stack), CLPIN_ERR_NOT_REGISTERED);
  EXPECT(clpin_host_unregister(reg_mem), CLPIN_ERR_NOT_REGISTERED);
  EXPECT(clpin_host_unregister(reg_mem + reg_page), CLPIN_ERR_NOT_REGISTERED); /* its page */
  EXPECT(clpin_host_unregister(reg_region + 1), CLPIN_ERR_NOT_REGISTERED);     /* interior */
  EXPECT(clpin_host_unregister(held_host), CLPIN_ERR_NOT_REGISTERED);
  reg_close();
  EXPECT(clpin_host_unregister(reg_region), CLPIN_ERR_NOT_REGISTERED); /* twice */
  /* A registration its pool's release ended. */
  unsigned char *mem = aligned_alloc(reg_page, reg_page);
  ck_assert_ptr_nonnull(mem);
  CL_OK(clpin_host_register(P, mem, reg_page));
  release_and_reopen();
  EXPECT(clpin_host_unregister(mem), CLPIN_ERR_NOT_REGISTERED);
  free(mem);
}
END_TEST

START_TEST(bi59_register_stale_pool) {
  release_and_reopen();
  unsigned char *mem = aligned_alloc(4096, 4096);
  ck_assert_ptr_nonnull(mem);
  EXPECT(clpin_host_register(stale, mem, 4096), CLPIN_ERR_POOL_RELEASED);
  clpin_stats s = test_stats(stale);
  ck_assert_uint_eq(s.bytes_registered, 0);
  /* Not registered anywhere: the fresh pool takes it. */
  EXPECT(clpin_host_unregister(mem), CLPIN_ERR_NOT_REGISTERED);
  CL_OK(clpin_host_register(P, mem, 4096));
  CL_OK(clpin_host_unregister(mem));
  free(mem);
}
END_TEST

/* ---- staging transfers ----------------------------------------------------- */

static cl_mem dev;
#define DEV_SIZE ((size_t)4096)
static unsigned char src[DEV_SIZE], dst[DEV_SIZE];
static cl_event sentinel_event;

static void staging_setup(void) {
  setup();
  dev = test_buffer(&T, DEV_SIZE);
  test_fill(src, DEV_SIZE, 3);
  CL_OK(clEnqueueWriteBuffer(T.queue, dev, CL_TRUE, 0, DEV_SIZE, src, 0, NULL, NULL));
  memset(dst, 0x5a, sizeof dst);
  sentinel_event = (cl_event)&fake;
}

static void staging_teardown(void) {
  /* The device buffer still holds what setup wrote. */
  unsigned char back[DEV_SIZE];
  CL_OK(clEnqueueReadBuffer(T.queue, dev, CL_TRUE, 0, DEV_SIZE, back, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(back, DEV_SIZE, 3), (size_t)-1);
  for (size_t i = 0; i < DEV_SIZE; i++)
    ck_assert_uint_eq(dst[i], 0x5a);
  CL_OK(clReleaseMemObject(dev));
  teardown();
}

/* Both directions, each with and without CLPIN_PIN_MEMORY and
 * CLPIN_NON_BLOCKING; *event must stay untouched. */
#define EXPECT_XFER(q, mem, off, wbuf, rbuf, n, extra, nw, wl, code)                               \
  do {                                                                                             \
    static const unsigned flag_sets[] = {0, CLPIN_PIN_MEMORY, CLPIN_NON_BLOCKING,                  \
                                         CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING};                   \
    for (int f_ = 0; f_ < 4; f_++) {                                                               \
      cl_event ev_ = sentinel_event;                                                               \
      EXPECT(clpin_write(q, mem, off, wbuf, n, flag_sets[f_] | (extra), nw, wl, &ev_), code);      \
      ck_assert_ptr_eq(ev_, sentinel_event);                                                       \
      EXPECT(clpin_read(q, mem, off, rbuf, n, flag_sets[f_] | (extra), nw, wl, &ev_), code);       \
      ck_assert_ptr_eq(ev_, sentinel_event);                                                       \
    }                                                                                              \
  } while (0)

START_TEST(bi50_xfer_null_queue) {
  EXPECT_XFER(NULL, dev, 0, src, dst, 16, 0, 0, NULL, CL_INVALID_COMMAND_QUEUE);
}
END_TEST

START_TEST(bi51_xfer_null_buffer) {
  EXPECT_XFER(T.queue, NULL, 0, src, dst, 16, 0, 0, NULL, CL_INVALID_MEM_OBJECT);
}
END_TEST

START_TEST(bi52_xfer_null_host) {
  EXPECT_XFER(T.queue, dev, 0, NULL, NULL, 16, 0, 0, NULL, CL_INVALID_VALUE);
}
END_TEST

START_TEST(bi53_xfer_unknown_flag) {
  EXPECT_XFER(T.queue, dev, 0, src, dst, 16, 1u << 7, 0, NULL, CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT_XFER(T.queue, dev, 0, src, dst, 16, 1u << 31, 0, NULL, CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi54_xfer_past_end) {
  EXPECT_XFER(T.queue, dev, 1, src, dst, DEV_SIZE, 0, 0, NULL, CL_INVALID_VALUE);
  EXPECT_XFER(T.queue, dev, DEV_SIZE, src, dst, 1, 0, 0, NULL, CL_INVALID_VALUE);
  EXPECT_XFER(T.queue, dev, 0, src, dst, DEV_SIZE + 1, 0, 0, NULL, CL_INVALID_VALUE);
}
END_TEST

START_TEST(bi55_xfer_offset_overflow) {
  EXPECT_XFER(T.queue, dev, SIZE_MAX, src, dst, 2, 0, 0, NULL, CL_INVALID_VALUE);
  EXPECT_XFER(T.queue, dev, 16, src, dst, SIZE_MAX - 8, 0, 0, NULL, CL_INVALID_VALUE);
}
END_TEST

START_TEST(bi56_xfer_wait_count_without_list) {
  EXPECT_XFER(T.queue, dev, 0, src, dst, 16, 0, 1, NULL, CL_INVALID_EVENT_WAIT_LIST);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "wait list"));
}
END_TEST

START_TEST(bi57_xfer_wait_list_without_count) {
  cl_int err;
  cl_event ue = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  EXPECT_XFER(T.queue, dev, 0, src, dst, 16, 0, 0, &ue, CL_INVALID_EVENT_WAIT_LIST);
  cl_event none = NULL; /* a NULL event in the list */
  EXPECT_XFER(T.queue, dev, 0, src, dst, 16, 0, 1, &none, CL_INVALID_EVENT_WAIT_LIST);
  CL_OK(clSetUserEventStatus(ue, CL_COMPLETE));
  CL_OK(clReleaseEvent(ue));
}
END_TEST

START_TEST(bi58_xfer_zero_bytes_null_host) {
  /* Not an error: nothing moves, the event is a completed one. */
  for (int nb = 0; nb < 2; nb++) {
    cl_event ev = NULL;
    EXPECT(clpin_write(T.queue, dev, 0, NULL, 0, nb ? CLPIN_NON_BLOCKING : 0, 0, NULL, &ev),
           CL_SUCCESS);
    ck_assert_ptr_nonnull(ev);
    CL_OK(clWaitForEvents(1, &ev));
    CL_OK(clReleaseEvent(ev));
    ev = NULL;
    EXPECT(clpin_read(T.queue, dev, 0, NULL, 0, nb ? CLPIN_NON_BLOCKING : 0, 0, NULL, &ev),
           CL_SUCCESS);
    ck_assert_ptr_nonnull(ev);
    CL_OK(clWaitForEvents(1, &ev));
    CL_OK(clReleaseEvent(ev));
  }
}
END_TEST

/* ---- tensors --------------------------------------------------------------- */

static unsigned char thost[256];

#define EXPECT_TENSOR(q, host, dtype, ndim, shape, flags, code)                                    \
  do {                                                                                             \
    clpin_tensor *t_ = (clpin_tensor *)&fake;                                                      \
    EXPECT(clpin_tensor_from_host(q, host, dtype, ndim, shape, flags, &t_), code);                 \
    ck_assert_ptr_eq(t_, (clpin_tensor *)&fake);                                                   \
  } while (0)

START_TEST(bi60_tensor_null_queue) {
  size_t shape[] = {4};
  EXPECT_TENSOR(NULL, thost, CLPIN_F32, 1, shape, 0, CL_INVALID_COMMAND_QUEUE);
}
END_TEST

START_TEST(bi61_tensor_null_out) {
  size_t shape[] = {4};
  EXPECT(clpin_tensor_from_host(T.queue, thost, CLPIN_F32, 1, shape, 0, NULL),
         CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi62_tensor_unknown_dtype) {
  size_t shape[] = {4};
  EXPECT_TENSOR(T.queue, thost, (clpin_dtype)(CLPIN_F64 + 1), 1, shape, 0, CLPIN_ERR_INVALID_DTYPE);
  EXPECT_TENSOR(T.queue, thost, (clpin_dtype)-1, 1, shape, 0, CLPIN_ERR_INVALID_DTYPE);
  EXPECT_TENSOR(T.queue, thost, (clpin_dtype)INT_MAX, 1, shape, 0, CLPIN_ERR_INVALID_DTYPE);
  ck_assert_uint_eq(clpin_dtype_size((clpin_dtype)(CLPIN_F64 + 1)), 0);
  ck_assert_uint_eq(clpin_dtype_size((clpin_dtype)-1), 0);
}
END_TEST

START_TEST(bi63_tensor_too_many_dims) {
  size_t shape[CLPIN_MAX_DIMS + 1];
  for (int i = 0; i <= CLPIN_MAX_DIMS; i++)
    shape[i] = 1;
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, CLPIN_MAX_DIMS + 1, shape, 0, CLPIN_ERR_INVALID_SHAPE);
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, UINT_MAX, shape, 0, CLPIN_ERR_INVALID_SHAPE);
}
END_TEST

START_TEST(bi64_tensor_null_shape) {
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 2, NULL, 0, CLPIN_ERR_INVALID_SHAPE);
}
END_TEST

START_TEST(bi65_tensor_element_count_overflow) {
  size_t shape[] = {SIZE_MAX, 2};
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 2, shape, 0, CLPIN_ERR_OVERFLOW);
  size_t shape3[] = {(size_t)1 << 32, (size_t)1 << 32, 1};
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 3, shape3, 0, CLPIN_ERR_OVERFLOW);
}
END_TEST

START_TEST(bi66_tensor_byte_size_overflow) {
  /* The element count fits in size_t, times the dtype size does not. */
  size_t shape[] = {(SIZE_MAX >> 3) + 1};
  EXPECT_TENSOR(T.queue, thost, CLPIN_F64, 1, shape, 0, CLPIN_ERR_OVERFLOW);
}
END_TEST

START_TEST(bi67_tensor_over_max_alloc) {
  size_t shape[] = {max_alloc + 1};
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 1, shape, 0, CLPIN_ERR_INVALID_SIZE);
  size_t shape2[] = {max_alloc / 4 + 1, 2};
  EXPECT_TENSOR(T.queue, thost, CLPIN_U16, 2, shape2, 0, CLPIN_ERR_INVALID_SIZE);
}
END_TEST

START_TEST(bi68_tensor_null_host) {
  size_t shape[] = {4};
  EXPECT_TENSOR(T.queue, NULL, CLPIN_F32, 1, shape, 0, CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi69_tensor_unknown_flag) {
  size_t shape[] = {4};
  EXPECT_TENSOR(T.queue, thost, CLPIN_F32, 1, shape, 1u << 9, CLPIN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(bi70_tensor_to_host_bad) {
  size_t shape[] = {4};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, thost, CLPIN_F32, 1, shape, 0, &t));
  unsigned char out[16];
  cl_event ev = (cl_event)&fake;
  EXPECT(clpin_tensor_to_host(NULL, T.queue, out, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_to_host(t, NULL, out, 0, NULL), CL_INVALID_COMMAND_QUEUE);
  EXPECT(clpin_tensor_to_host(t, T.queue, NULL, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_to_host(t, T.queue, out, 1u << 9, &ev), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_eq(ev, (cl_event)&fake);
  clpin_tensor_release(t);
}
END_TEST

START_TEST(bi71_tensor_mirror_bad) {
  size_t shape[] = {4};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, thost, CLPIN_F32, 1, shape, 0, &t));
  void *ptr = &fake;
  cl_mem mem = (cl_mem)&fake;
  clpin_head head = clpin_tensor_head(t);
  EXPECT(clpin_tensor_host_data(NULL, T.queue, CLPIN_READ, &ptr), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_host_data(t, T.queue, CLPIN_READ, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_host_data(t, T.queue, 1u << 5, &ptr), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_device_data(NULL, T.queue, CLPIN_READ, &mem), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_device_data(t, T.queue, CLPIN_READ, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_tensor_device_data(t, T.queue, 1u << 5, &mem), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "access has unknown bits 0x20"));
  EXPECT(clpin_tensor_host_data(t, T.queue, 0, &ptr), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "clpin_tensor_host_data: access is 0"));
  EXPECT(clpin_tensor_device_data(t, T.queue, 0, &mem), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "clpin_tensor_device_data: access is 0"));
  ck_assert_ptr_eq(ptr, &fake);
  ck_assert_ptr_eq(mem, (cl_mem)&fake);
  ck_assert_int_eq(clpin_tensor_head(t), head);
  clpin_tensor_release(t);
}
END_TEST

START_TEST(bi72_tensor_null_accessors) {
  EXPECT_NULL(clpin_tensor_buffer(NULL));
  EXPECT_NULL(clpin_tensor_shape(NULL));
  ck_assert_uint_eq(clpin_tensor_ndim(NULL), 0);
  ck_assert_uint_eq(clpin_tensor_nbytes(NULL), 0);
  ck_assert_int_eq(clpin_tensor_head(NULL), CLPIN_HEAD_UNINITIALIZED);
  clpin_stats before = test_stats(P);
  clpin_tensor_release(NULL);
  clpin_stats after = test_stats(P);
  assert_same(&before, &after);
}
END_TEST

/* The mirror lives in pool memory: once its context's pool is released, the
 * mirror calls answer CLPIN_ERR_POOL_RELEASED and leave *ptr alone. (On a
 * host-unified device a tensor has no pool mirror unless CLPIN_PINNED_H2D=1:
 * check_unified tests that one across a pool release.) */
START_TEST(bi73_tensor_mirror_after_release_context) {
  size_t pinned_h2d0 = clpin_get_option(CLPIN_OPT_PINNED);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
  test_cl other;
  test_cl_open(&other);
  size_t shape[] = {16};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(other.queue, thost, CLPIN_U8, 1, shape, 0, &t));
  void *ptr = NULL;
  CL_OK(clpin_tensor_host_data(t, other.queue, CLPIN_READ, &ptr)); /* the mirror exists */
  cl_mem mem;
  CL_OK(clpin_tensor_device_data(t, other.queue, CLPIN_WRITE, &mem)); /* the device side is newer */
  CL_OK(clpin_pool_release_context(other.ctx));
  ptr = &fake;
  EXPECT(clpin_tensor_host_data(t, other.queue, CLPIN_READ, &ptr), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_eq(ptr, &fake);
  unsigned char back[16];
  EXPECT(clpin_tensor_to_host(t, other.queue, back, 0, NULL), CL_SUCCESS); /* no mirror needed */
  EXPECT(clpin_tensor_host_data(t, other.queue, CLPIN_WRITE, &ptr), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_eq(ptr, &fake);
  clpin_tensor_release(t);
  test_cl_close(&other);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, pinned_h2d0));
}
END_TEST

/* The transfer and access flags are disjoint bits: a flag of the other
 * family is refused, and the detail names it and what the call takes,
 * instead of meaning something else. */
START_TEST(bi74_flag_of_the_other_family) {
  size_t shape[] = {4};
  clpin_tensor *t;
  CL_OK(clpin_tensor_from_host(T.queue, thost, CLPIN_F32, 1, shape, 0, &t));
  unsigned char out[16];
  const unsigned access[] = {CLPIN_READ, CLPIN_WRITE};
  for (int i = 0; i < 2; i++) {
    EXPECT(clpin_tensor_to_host(t, T.queue, out, access[i], NULL), CLPIN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "an access flag"));
    EXPECT_TENSOR(T.queue, thost, CLPIN_F32, 1, shape, access[i], CLPIN_ERR_INVALID_ARGUMENT);
  }
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "flags holds CLPIN_WRITE"));
  clpin_head head = clpin_tensor_head(t);
  void *ptr = &fake;
  cl_mem mem = (cl_mem)&fake;
  const unsigned transfer[] = {CLPIN_PIN_MEMORY, CLPIN_NON_BLOCKING, CLPIN_ZERO_COPY};
  for (int i = 0; i < 3; i++) {
    EXPECT(clpin_tensor_host_data(t, T.queue, CLPIN_READ | transfer[i], &ptr),
           CLPIN_ERR_INVALID_ARGUMENT);
    /* The detail says what the call takes; CLPIN_ZERO_COPY is the tensor
     * flag (clpin.h), never called a transfer flag. */
    ck_assert_ptr_nonnull(
        strstr(clpin_last_error_detail(), "it takes the access flags CLPIN_READ and CLPIN_WRITE"));
    ck_assert_ptr_nonnull(
        strstr(clpin_last_error_detail(),
               i < 2 ? "is a transfer flag" : "CLPIN_ZERO_COPY is the tensor flag"));
    ck_assert_ptr_null(strstr(clpin_last_error_detail(), "CLPIN_ZERO_COPY is a transfer"));
    EXPECT(clpin_tensor_device_data(t, T.queue, transfer[i], &mem), CLPIN_ERR_INVALID_ARGUMENT);
  }
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "access holds CLPIN_ZERO_COPY"));
  ck_assert_ptr_eq(ptr, &fake);
  ck_assert_ptr_eq(mem, (cl_mem)&fake);
  ck_assert_int_eq(clpin_tensor_head(t), head);
  clpin_tensor_release(t);
}
END_TEST

/* Every family of flags (src/internal.h, "flag families"): each call
 * refuses a bit it does not take, an unknown one or one of another family,
 * with CLPIN_ERR_INVALID_ARGUMENT, nothing changed (pool stats, the device
 * buffer, *event, the out-pointers), and a detail that names the bits and
 * the flags the call takes in words; and each call still takes every
 * combination of its own flags. */
#define UNKNOWN_BIT (1u << 12) /* in no family */
static void detail_names(const char *what, const char *takes) {
  const char *d = clpin_last_error_detail();
  ck_assert_msg(strstr(d, what) != NULL, "detail \"%s\" does not name %s", d, what);
  ck_assert_msg(strstr(d, takes) != NULL, "detail \"%s\" does not say it takes %s", d, takes);
  ck_assert_msg(strstr(d, " | ") == NULL, "detail \"%s\" reads as C", d);
}

static cl_int fill_ones(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user;
  (void)index;
  memset(host, 1, capacity);
  *used = capacity;
  return CL_SUCCESS;
}

START_TEST(bi75_flag_families) {
  const char *transfer = "it takes the transfer flags CLPIN_PIN_MEMORY and CLPIN_NON_BLOCKING";
  const unsigned tr_sets[] = {0, CLPIN_PIN_MEMORY, CLPIN_NON_BLOCKING,
                              CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING};
  unsigned char back[DEV_SIZE];
  cl_event ev = sentinel_event;

  /* Transfers (and their rect form): clpin_write, clpin_read. */
  EXPECT(clpin_write(T.queue, dev, 0, src, 64, UNKNOWN_BIT, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags has unknown bits 0x1000", transfer);
  EXPECT(clpin_read(T.queue, dev, 0, dst, 64, CLPIN_FILE_DIRECT, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_FILE_DIRECT", transfer);
  size_t origin[3] = {0, 0, 0}, region[3] = {64, 1, 1};
  EXPECT(clpin_write_rect(T.queue, dev, origin, origin, region, 0, 0, 0, 0, src, CLPIN_ZERO_COPY, 0,
                          NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_ZERO_COPY", transfer);
  ck_assert_ptr_null(strstr(clpin_last_error_detail(), "CLPIN_ZERO_COPY is a transfer"));
  ck_assert_ptr_eq(ev, sentinel_event);
  for (int i = 0; i < 4; i++) {
    cl_event e = NULL;
    CL_OK(clpin_write(T.queue, dev, 0, src, DEV_SIZE, tr_sets[i], 0, NULL, &e));
    memset(back, 0, sizeof back);
    CL_OK(clpin_read(T.queue, dev, 0, back, DEV_SIZE, tr_sets[i], 1, &e, NULL));
    CL_OK(clFinish(T.queue));
    CL_OK(clReleaseEvent(e));
    ck_assert_uint_eq(test_check(back, DEV_SIZE, 3), (size_t)-1);
    CL_OK(clpin_read_rect(T.queue, dev, origin, origin, region, 0, 0, 0, 0, back, tr_sets[i], 0,
                          NULL, NULL));
    CL_OK(clFinish(T.queue));
  }

  /* Tensors: clpin_tensor_from_host takes the tensor flag too;
   * clpin_tensor_to_host the transfer flags. */
  size_t shape[] = {16};
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 1, shape, UNKNOWN_BIT, CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags has unknown bits 0x1000",
               "the transfer flags CLPIN_PIN_MEMORY and CLPIN_NON_BLOCKING and the tensor flag "
               "CLPIN_ZERO_COPY");
  EXPECT_TENSOR(T.queue, thost, CLPIN_U8, 1, shape, CLPIN_LOADER_HOST_DONE,
                CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_LOADER_HOST_DONE", "and the tensor flag CLPIN_ZERO_COPY");
  for (unsigned f = 0; f < 8; f++) {
    unsigned flags = (f & 1 ? CLPIN_PIN_MEMORY : 0) | (f & 2 ? CLPIN_NON_BLOCKING : 0) |
                     (f & 4 ? CLPIN_ZERO_COPY : 0);
    clpin_tensor *t = NULL;
    CL_OK(clpin_tensor_from_host(T.queue, thost, CLPIN_U8, 1, shape, flags, &t));
    CL_OK(clFinish(T.queue));
    clpin_tensor_release(t);
  }
  clpin_tensor *t = NULL;
  CL_OK(clpin_tensor_from_host(T.queue, thost, CLPIN_U8, 1, shape, 0, &t));
  EXPECT(clpin_tensor_to_host(t, T.queue, back, UNKNOWN_BIT, &ev), CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags has unknown bits 0x1000", transfer);
  EXPECT(clpin_tensor_to_host(t, T.queue, back, CLPIN_ZERO_COPY, &ev), CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_ZERO_COPY", transfer);
  ck_assert_ptr_eq(ev, sentinel_event);
  for (int i = 0; i < 4; i++) {
    memset(back, 0, 16);
    CL_OK(clpin_tensor_to_host(t, T.queue, back, tr_sets[i], NULL));
    CL_OK(clFinish(T.queue));
    ck_assert_int_eq(memcmp(back, thost, 16), 0);
  }

  /* Access: clpin_tensor_host_data, clpin_tensor_device_data. */
  const char *access = "it takes the access flags CLPIN_READ and CLPIN_WRITE";
  void *ptr = &fake;
  cl_mem mem = (cl_mem)&fake;
  clpin_head head = clpin_tensor_head(t);
  EXPECT(clpin_tensor_host_data(t, T.queue, CLPIN_READ | UNKNOWN_BIT, &ptr),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("access has unknown bits 0x1000", access);
  EXPECT(clpin_tensor_device_data(t, T.queue, CLPIN_NON_BLOCKING, &mem),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("access holds CLPIN_NON_BLOCKING", access);
  EXPECT(clpin_tensor_host_data(t, T.queue, CLPIN_ZERO_COPY, &ptr), CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("access holds CLPIN_ZERO_COPY", access);
  ck_assert_ptr_null(strstr(clpin_last_error_detail(), "CLPIN_ZERO_COPY is a transfer"));
  ck_assert_ptr_eq(ptr, &fake);
  ck_assert_ptr_eq(mem, (cl_mem)&fake);
  ck_assert_int_eq(clpin_tensor_head(t), head);
  const unsigned ac_sets[] = {CLPIN_READ, CLPIN_WRITE, CLPIN_READ | CLPIN_WRITE};
  for (int i = 0; i < 3; i++) {
    ptr = NULL;
    mem = NULL;
    CL_OK(clpin_tensor_host_data(t, T.queue, ac_sets[i], &ptr));
    ck_assert_ptr_nonnull(ptr);
    CL_OK(clpin_tensor_device_data(t, T.queue, ac_sets[i], &mem));
    ck_assert_ptr_nonnull(mem);
  }
  CL_OK(clFinish(T.queue));
  clpin_tensor_release(t);

  /* clpin_host_reclaim: CLPIN_NON_BLOCKING or nothing. */
  const char *reclaim = "it takes CLPIN_NON_BLOCKING or nothing (0)";
  unsigned char *h = clpin_host_alloc(P, 4096);
  ck_assert_ptr_nonnull(h);
  EXPECT(clpin_host_reclaim(T.queue, h, 4096, UNKNOWN_BIT, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags has unknown bits 0x1000", "it takes CLPIN_NON_BLOCKING or nothing");
  EXPECT(clpin_host_reclaim(T.queue, h, 4096, CLPIN_PIN_MEMORY, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_PIN_MEMORY", reclaim);
  ck_assert_ptr_eq(ev, sentinel_event);
  const unsigned rc_sets[] = {0, CLPIN_NON_BLOCKING};
  for (int i = 0; i < 2; i++) {
    cl_int lent = clpin_host_lend(T.queue, h, 4096, 0, NULL, NULL);
    if (lent == CLPIN_ERR_NOT_UNIFIED) { /* a discrete device: past the flags, refused there */
      ck_assert_int_eq(clpin_host_reclaim(T.queue, h, 4096, rc_sets[i], 0, NULL, NULL),
                       CLPIN_ERR_NOT_UNIFIED);
      continue;
    }
    CL_OK(lent);
    CL_OK(clpin_host_reclaim(T.queue, h, 4096, rc_sets[i], 0, NULL, NULL));
    CL_OK(clFinish(T.queue));
  }
  CL_OK(clpin_host_free(h));

  /* Files: CLPIN_NON_BLOCKING and CLPIN_FILE_DIRECT. */
  const char *file = "it takes CLPIN_NON_BLOCKING and the file flag CLPIN_FILE_DIRECT";
  char path[] = "/tmp/clpin-bi75-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  ck_assert_int_eq(pwrite(fd, src, DEV_SIZE, 0), (ssize_t)DEV_SIZE);
  EXPECT(clpin_file_to_buffer(T.queue, dev, 0, DEV_SIZE, fd, 0, UNKNOWN_BIT, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags has unknown bits 0x1000", file);
  EXPECT(clpin_buffer_to_file(T.queue, dev, 0, DEV_SIZE, fd, 0, CLPIN_PIN_MEMORY, 0, NULL, &ev),
         CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("flags holds CLPIN_PIN_MEMORY", file);
  ck_assert_ptr_eq(ev, sentinel_event);
  for (unsigned f = 0; f < 4; f++) {
    unsigned flags = (f & 1 ? CLPIN_NON_BLOCKING : 0) | (f & 2 ? CLPIN_FILE_DIRECT : 0);
    cl_event e = NULL;
    CL_OK(clpin_file_to_buffer(T.queue, dev, 0, DEV_SIZE, fd, 0, flags, 0, NULL, &e));
    if (e) {
      CL_OK(clWaitForEvents(1, &e));
      CL_OK(clReleaseEvent(e));
    }
    e = NULL;
    CL_OK(clpin_buffer_to_file(T.queue, dev, 0, DEV_SIZE, fd, 0, flags, 0, NULL, &e));
    if (e) {
      CL_OK(clWaitForEvents(1, &e));
      CL_OK(clReleaseEvent(e));
    }
  }
  ck_assert_int_eq(pread(fd, back, DEV_SIZE, 0), (ssize_t)DEV_SIZE);
  ck_assert_uint_eq(test_check(back, DEV_SIZE, 3), (size_t)-1);
  close(fd);

  /* The loader: clpin_loader_desc.flags. */
  const char *loader = "it takes the loader flags CLPIN_LOADER_UNORDERED, "
                       "CLPIN_LOADER_WAIT_UPLOADS and CLPIN_LOADER_HOST_DONE";
  clpin_loader_desc d = test_loader_desc(4096, 2, 2, 1, fill_ones, NULL);
  clpin_loader *L = (clpin_loader *)&fake;
  d.flags = UNKNOWN_BIT;
  EXPECT(clpin_loader_create(1, &T.queue, &d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("desc.flags has unknown bits 0x1000", "it takes the loader flags");
  ck_assert_ptr_null(L);
  d.flags = CLPIN_NON_BLOCKING;
  EXPECT(clpin_loader_create(1, &T.queue, &d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  detail_names("desc.flags holds CLPIN_NON_BLOCKING", loader);
  for (unsigned f = 0; f < 8; f++) {
    d.flags = (f & 1 ? CLPIN_LOADER_UNORDERED : 0) | (f & 2 ? CLPIN_LOADER_WAIT_UPLOADS : 0) |
              (f & 4 ? CLPIN_LOADER_HOST_DONE : 0);
    L = NULL;
    CL_OK(clpin_loader_create(1, &T.queue, &d, &L));
    ck_assert_ptr_nonnull(L);
    CL_OK(clpin_loader_destroy(L));
  }
}
END_TEST

/* ---- options and error names ----------------------------------------------- */

START_TEST(bi80_set_option_unknown) {
  EXPECT(clpin_set_option(CLPIN_OPT__COUNT, 1), CLPIN_ERR_INVALID_OPTION);
  EXPECT(clpin_set_option((clpin_option)-1, 1), CLPIN_ERR_INVALID_OPTION);
  EXPECT(clpin_set_option((clpin_option)INT_MAX, 1), CLPIN_ERR_INVALID_OPTION);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT__COUNT), 0);
  ck_assert_uint_eq(clpin_get_option((clpin_option)-1), 0);
}
END_TEST

START_TEST(bi81_set_option_out_of_range) {
  static const struct {
    clpin_option opt;
    size_t bad;
  } cases[] = {
      {CLPIN_OPT_PINNED, 3},   {CLPIN_OPT_PINNED, SIZE_MAX},  {CLPIN_OPT_CHUNK, 0},
      {CLPIN_OPT_CHUNK, 4095}, {CLPIN_OPT_THREADS, 0},        {CLPIN_OPT_THREADS, 257},
      {CLPIN_OPT_DEBUG, 3},    {CLPIN_OPT_QUARANTINE, 65537}, {CLPIN_OPT_QUARANTINE, SIZE_MAX},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t was = clpin_get_option(cases[i].opt);
    EXPECT(clpin_set_option(cases[i].opt, cases[i].bad), CLPIN_ERR_INVALID_OPTION);
    ck_assert_uint_eq(clpin_get_option(cases[i].opt), was);
  }
}
END_TEST

/* Runs only as the check_badinput_env CTest entry, whose environment holds a
 * bad value for every option (see tests/badinput.cmake). */
START_TEST(bi82_bad_environment) {
  static const struct {
    const char *var;
    const char *bad;
  } env[] = {{"CLPIN_PINNED_H2D", "yes"}, {"CLPIN_MAX_CACHED", "lots"}, {"CLPIN_CHUNK", "1K"},
             {"CLPIN_THREADS", "0"},      {"CLPIN_DEBUG", "3"},         {"CLPIN_LAYER_MIN", "1X"}};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
    const char *v = getenv(env[i].var);
    ck_assert_msg(v && !strcmp(v, env[i].bad), "%s must be \"%s\" in this run", env[i].var,
                  env[i].bad);
  }
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_PINNED), CLPIN_PINNED_AUTO);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_MAX_CACHED), SIZE_MAX);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_LAYER_MIN), (size_t)1 << 20);
  ck_assert_uint_ge(clpin_get_option(CLPIN_OPT_CHUNK), 4096);
  ck_assert_uint_ne(clpin_get_option(CLPIN_OPT_CHUNK), 1024);
  ck_assert_uint_ge(clpin_get_option(CLPIN_OPT_THREADS), 1);
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_DEBUG), 0);
  /* A pool created now is uncapped: releases cache. */
  test_cl t;
  test_cl_open(&t);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(t.queue, &pool));
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 1 << 20, &b));
  CL_OK(clpin_release(b, NULL));
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CL_OK(clpin_pool_stats(pool, &s));
  ck_assert_uint_eq(s.blocks_cached, 1);
  test_cl_close(&t);
}
END_TEST

START_TEST(bi83_strerror_unknown_code) {
  static const cl_int codes[] = {12345, -20050, -20099, -19999, -100, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    ck_assert_str_eq(clpin_strerror(codes[i]), "unknown error code");
  ck_assert_str_eq(clpin_strerror(CLPIN_ERR_INVALID_SIZE),
                   "CLPIN_ERR_INVALID_SIZE: size is zero or larger than the device can allocate");
}
END_TEST

/* ---- the table and the tests agree ----------------------------------------- */

typedef struct {
  const char *id, *code;
} row;
static row rows[128];
static int nrows;

static void add_row(const char *id, const char *code) {
  if (nrows == (int)(sizeof rows / sizeof rows[0])) {
    fprintf(stderr, "check_badinput: too many rows\n");
    abort();
  }
  rows[nrows].id = id;
  rows[nrows].code = code;
  nrows++;
}
/* Register the test of row id, which documents code (a name or a text). */
#define ROW_TEXT(tc, fn, id, text)                                                                 \
  do {                                                                                             \
    tcase_add_test(tc, fn);                                                                        \
    add_row(id, text);                                                                             \
  } while (0)

START_TEST(table_matches_tests) {
  FILE *f = fopen(CLPIN_BAD_INPUT_DOC, "r");
  ck_assert_msg(f != NULL, "cannot open %s", CLPIN_BAD_INPUT_DOC);
  char line[2048];
  int seen[128] = {0};
  int table_rows = 0;
  while (fgets(line, sizeof line, f)) {
    const char *id = strstr(line, "| BI-");
    if (line[0] != '|' || !id || id != line)
      continue;
    table_rows++;
    int found = -1;
    for (int i = 0; i < nrows; i++) {
      size_t n = strlen(rows[i].id);
      if (!strncmp(line + 2, rows[i].id, n) && line[2 + n] == ' ')
        found = i;
    }
    ck_assert_msg(found >= 0, "docs/BAD_INPUT.md row without a test: %.12s", line);
    ck_assert_msg(!seen[found], "docs/BAD_INPUT.md lists %s twice", rows[found].id);
    seen[found] = 1;
    ck_assert_msg(strstr(line, rows[found].code) != NULL,
                  "docs/BAD_INPUT.md row %s does not name %s", rows[found].id, rows[found].code);
  }
  fclose(f);
  for (int i = 0; i < nrows; i++)
    ck_assert_msg(seen[i], "test row %s is missing from docs/BAD_INPUT.md", rows[i].id);
  ck_assert_int_eq(table_rows, nrows);
}
END_TEST

/* Every row with a test: X(test case, row number, test name after biNN_,
 * the code its row names). The test function is biNN_name and the row id
 * BI-NN, so neither is written twice. */
#define BAD_INPUT_ROWS(X)                                                                          \
  X(rows, 01, pool_get_null_queue, CL_INVALID_COMMAND_QUEUE)                                       \
  X(rows, 02, pool_get_null_out, CLPIN_ERR_INVALID_ARGUMENT)                                       \
  X(rows, 03, pool_get_for_context_null_ctx, CL_INVALID_CONTEXT)                                   \
  X(rows, 04, pool_get_for_context_null_out, CLPIN_ERR_INVALID_ARGUMENT)                           \
  X(rows, 05, release_context_null, CL_INVALID_CONTEXT)                                            \
  X(rows, 06, acquire_null_pool, CLPIN_ERR_INVALID_ARGUMENT)                                       \
  X(rows, 07, acquire_null_out, CLPIN_ERR_INVALID_ARGUMENT)                                        \
  X(rows, 08, acquire_zero, CLPIN_ERR_INVALID_SIZE)                                                \
  X(rows, 09, acquire_size_max, CLPIN_ERR_INVALID_SIZE)                                            \
  X(rows, 10, acquire_over_max_alloc, CLPIN_ERR_INVALID_SIZE)                                      \
  X(rows, 11, acquire_pow2_overflow, CLPIN_ERR_INVALID_SIZE)                                       \
  X(rows, 12, release_null, CL_SUCCESS)                                                            \
  X(rows, 13, release_twice_cached, CLPIN_ERR_DOUBLE_RELEASE)                                      \
  X(rows, 14, release_twice_in_flight, CLPIN_ERR_DOUBLE_RELEASE)                                   \
  X(rows, 15, release_zeroed_fake, CLPIN_ERR_INVALID_BLOCK)                                        \
  X(rows, 16, release_garbage_fake, CLPIN_ERR_INVALID_BLOCK)                                       \
  X(rows, 17, block_accessors_null_and_fake, NULL)                                                 \
  X(rows, 18, trim_null, CLPIN_ERR_INVALID_ARGUMENT)                                               \
  X(rows, 19, set_limit_null, CLPIN_ERR_INVALID_ARGUMENT)                                          \
  X(rows, 20, stats_null, CLPIN_ERR_INVALID_ARGUMENT)                                              \
  X(rows, 21, stats_struct_size_too_small, CLPIN_ERR_INVALID_ARGUMENT)                             \
  X(rows, 22, host_alloc_null_pool, NULL)                                                          \
  X(rows, 23, host_alloc_zero, NULL)                                                               \
  X(rows, 24, host_alloc_huge, NULL)                                                               \
  X(rows, 25, host_free_null, CL_SUCCESS)                                                          \
  X(rows, 26, host_free_malloc_pointer, CLPIN_ERR_FOREIGN_POINTER)                                 \
  X(rows, 27, host_free_interior_pointer, CLPIN_ERR_FOREIGN_POINTER)                               \
  X(rows, 28, host_free_twice, CLPIN_ERR_FOREIGN_POINTER)                                          \
  X(rows, 29, host_free_block_pointer, CLPIN_ERR_FOREIGN_POINTER)                                  \
  X(rows, 30, find_null_pool_or_pointer, NULL)                                                     \
  X(rows, 31, find_range_past_block_end, NULL)                                                     \
  X(rows, 32, find_size_overflow, NULL)                                                            \
  X(rows, 33, find_released_block, NULL)                                                           \
  X(rows, 34, stale_pool_acquire, CLPIN_ERR_POOL_RELEASED)                                         \
  X(rows, 35, stale_pool_trim, CLPIN_ERR_POOL_RELEASED)                                            \
  X(rows, 36, stale_pool_set_limit, CLPIN_ERR_POOL_RELEASED)                                       \
  X(rows, 37, stale_pool_stats, CL_SUCCESS)                                                        \
  X(rows, 38, stale_pool_host_alloc, NULL)                                                         \
  X(rows, 39, stale_pool_find, NULL)                                                               \
  X(rows, 40, stale_block_release, CLPIN_ERR_POOL_RELEASED)                                        \
  X(rows, 41, stale_host_free, CLPIN_ERR_POOL_RELEASED)                                            \
  X(rows, 42, release_context_twice, CL_SUCCESS)                                                   \
  X(rows, 43, after_shutdown, CLPIN_ERR_POOL_RELEASED)                                             \
  X(rows, 44, register_null, CLPIN_ERR_INVALID_ARGUMENT)                                           \
  X(rows, 45, register_bad_size, CLPIN_ERR_INVALID_SIZE)                                           \
  X(rows, 46, register_wraps, CLPIN_ERR_OVERFLOW)                                                  \
  X(rows, 47, register_overlap, CLPIN_ERR_ALREADY_REGISTERED)                                      \
  X(rows, 48, unregister_null, CLPIN_ERR_INVALID_ARGUMENT)                                         \
  X(rows, 49, unregister_unknown, CLPIN_ERR_NOT_REGISTERED)                                        \
  X(staging, 50, xfer_null_queue, CL_INVALID_COMMAND_QUEUE)                                        \
  X(staging, 51, xfer_null_buffer, CL_INVALID_MEM_OBJECT)                                          \
  X(staging, 52, xfer_null_host, CL_INVALID_VALUE)                                                 \
  X(staging, 53, xfer_unknown_flag, CLPIN_ERR_INVALID_ARGUMENT)                                    \
  X(staging, 54, xfer_past_end, CL_INVALID_VALUE)                                                  \
  X(staging, 55, xfer_offset_overflow, CL_INVALID_VALUE)                                           \
  X(staging, 56, xfer_wait_count_without_list, CL_INVALID_EVENT_WAIT_LIST)                         \
  X(staging, 57, xfer_wait_list_without_count, CL_INVALID_EVENT_WAIT_LIST)                         \
  X(staging, 58, xfer_zero_bytes_null_host, CL_SUCCESS)                                            \
  X(rows, 59, register_stale_pool, CLPIN_ERR_POOL_RELEASED)                                        \
  X(tensor, 60, tensor_null_queue, CL_INVALID_COMMAND_QUEUE)                                       \
  X(tensor, 61, tensor_null_out, CLPIN_ERR_INVALID_ARGUMENT)                                       \
  X(tensor, 62, tensor_unknown_dtype, CLPIN_ERR_INVALID_DTYPE)                                     \
  X(tensor, 63, tensor_too_many_dims, CLPIN_ERR_INVALID_SHAPE)                                     \
  X(tensor, 64, tensor_null_shape, CLPIN_ERR_INVALID_SHAPE)                                        \
  X(tensor, 65, tensor_element_count_overflow, CLPIN_ERR_OVERFLOW)                                 \
  X(tensor, 66, tensor_byte_size_overflow, CLPIN_ERR_OVERFLOW)                                     \
  X(tensor, 67, tensor_over_max_alloc, CLPIN_ERR_INVALID_SIZE)                                     \
  X(tensor, 68, tensor_null_host, CLPIN_ERR_INVALID_ARGUMENT)                                      \
  X(tensor, 69, tensor_unknown_flag, CLPIN_ERR_INVALID_ARGUMENT)                                   \
  X(tensor, 70, tensor_to_host_bad, CLPIN_ERR_INVALID_ARGUMENT)                                    \
  X(tensor, 71, tensor_mirror_bad, CLPIN_ERR_INVALID_ARGUMENT)                                     \
  X(tensor, 72, tensor_null_accessors, NULL)                                                       \
  X(tensor, 73, tensor_mirror_after_release_context, CLPIN_ERR_POOL_RELEASED)                      \
  X(tensor, 74, flag_of_the_other_family, CLPIN_ERR_INVALID_ARGUMENT)                              \
  X(staging, 75, flag_families, CLPIN_ERR_INVALID_ARGUMENT)                                        \
  X(options, 80, set_option_unknown, CLPIN_ERR_INVALID_OPTION)                                     \
  X(options, 81, set_option_out_of_range, CLPIN_ERR_INVALID_OPTION)

static Suite *badinput_suite(void) {
  Suite *s = suite_create("badinput");
  TCase *tc_rows = tcase_create("rows"), *tc_staging = tcase_create("staging");
  TCase *tc_tensor = tcase_create("tensor"), *tc_options = tcase_create("options");
  tcase_add_checked_fixture(tc_rows, setup, teardown);
  tcase_add_checked_fixture(tc_staging, staging_setup, staging_teardown);
  tcase_add_checked_fixture(tc_tensor, setup, teardown);
  tcase_add_checked_fixture(tc_options, setup, teardown);
  tcase_set_timeout(tc_rows, 60);
  tcase_set_timeout(tc_staging, 60);
  tcase_set_timeout(tc_tensor, 60);
#define REGISTER_ROW(group, nn, name, code) ROW_TEXT(tc_##group, bi##nn##_##name, "BI-" #nn, #code);
  BAD_INPUT_ROWS(REGISTER_ROW)
#undef REGISTER_ROW
  add_row("BI-82", "default kept"); /* its test runs as check_badinput_env */
  ROW_TEXT(tc_options, bi83_strerror_unknown_code, "BI-83", "unknown error code");
  suite_add_tcase(s, tc_rows);
  suite_add_tcase(s, tc_staging);
  suite_add_tcase(s, tc_tensor);
  suite_add_tcase(s, tc_options);

  TCase *tm = tcase_create("table");
  tcase_add_test(tm, table_matches_tests);
  suite_add_tcase(s, tm);
  return s;
}

static Suite *env_suite(void) {
  Suite *s = suite_create("badinput_env");
  TCase *tc = tcase_create("env");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, bi82_bad_environment);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "env"))
    return test_run_suite(env_suite());
  return test_run_suite(badinput_suite());
}
