/* SPDX-License-Identifier: Apache-2.0 */
/* The pool: buckets, hits and misses, pending events, trim, cap, stats,
 * pinned memory by pointer, bad input, and threads. */
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static test_cl cl;
static clpin_pool *pool;

static size_t quarantine0; /* CLPIN_QUARANTINE as the test found it */

/* A Debug build with AddressSanitizer (the library gets CLPIN_POISON_IDLE
 * in Debug builds) gives each released block a new handle. */
#if defined(__SANITIZE_ADDRESS__) && !defined(NDEBUG)
#define STALE_HANDLES_DIE 1
#else
#define STALE_HANDLES_DIE 0
#endif

/* The pool's tests count hits and misses exactly: no quarantine here (were
 * CLPIN_QUARANTINE set in the environment), except in the quarantine
 * tests, which make their own pool. */
static void setup(void) {
  test_cl_open(&cl);
  quarantine0 = clpin_get_option(CLPIN_OPT_QUARANTINE);
  CL_OK(clpin_set_option(CLPIN_OPT_QUARANTINE, 0));
  CL_OK(clpin_pool_get(cl.queue, &pool));
}

static void teardown(void) {
  /* Put the option back: valgrind runs the whole suite in one process. */
  CL_OK(clpin_set_option(CLPIN_OPT_QUARANTINE, quarantine0));
  test_cl_close(&cl);
}

static size_t next_pow2(size_t n) {
  size_t p = CLPIN_MIN_BLOCK;
  while (p < n)
    p <<= 1;
  return p;
}

static size_t max_alloc(void) {
  cl_ulong m;
  CL_OK(clGetDeviceInfo(cl.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof m, &m, NULL));
  return (size_t)m;
}

START_TEST(capacity_is_next_power_of_two) {
  static const size_t sizes[] = {1,     100,   4095,  4096,           4097,
                                 65535, 65536, 65537, (1u << 20) + 1, 3u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    clpin_block *b = NULL;
    CL_OK(clpin_acquire(pool, sizes[i], &b));
    size_t cap = clpin_block_size(b);
    ck_assert_uint_ge(cap, sizes[i]);
    ck_assert_uint_eq(cap, next_pow2(sizes[i]));
    ck_assert_uint_eq(cap & (cap - 1), 0);
    /* The whole capacity is usable host memory backed by the block's buffer. */
    ck_assert_ptr_nonnull(clpin_block_host(b));
    size_t mem_size = 0;
    CL_OK(clGetMemObjectInfo(clpin_block_buffer(b), CL_MEM_SIZE, sizeof mem_size, &mem_size, NULL));
    ck_assert_uint_eq(mem_size, cap);
    cl_mem_flags flags = 0;
    CL_OK(clGetMemObjectInfo(clpin_block_buffer(b), CL_MEM_FLAGS, sizeof flags, &flags, NULL));
    ck_assert(flags & CL_MEM_ALLOC_HOST_PTR);
    test_fill(clpin_block_host(b), cap, (unsigned)i);
    ck_assert_uint_eq(test_check(clpin_block_host(b), cap, (unsigned)i), (size_t)-1);
    CL_OK(clpin_release(b, NULL));
  }
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(block_memory_reaches_the_device) {
  /* The mapped pointer and the buffer are one memory: what the host writes
   * into the block is what a device copy out of the buffer sees. */
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 10000, &b));
  test_fill(clpin_block_host(b), 10000, 7);
  cl_mem dev = test_buffer(&cl, 10000);
  CL_OK(clEnqueueCopyBuffer(cl.queue, clpin_block_buffer(b), dev, 0, 0, 10000, 0, NULL, NULL));
  unsigned char *back = malloc(10000);
  CL_OK(clEnqueueReadBuffer(cl.queue, dev, CL_TRUE, 0, 10000, back, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(back, 10000, 7), (size_t)-1);
  free(back);
  clReleaseMemObject(dev);
  CL_OK(clpin_release(b, NULL));
}
END_TEST

START_TEST(hit_reuses_without_driver_call) {
  clpin_block *a, *b;
  CL_OK(clpin_acquire(pool, 5000, &a));
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.misses, 1);
  ck_assert_uint_eq(s1.driver_allocs, 1);
  ck_assert_uint_eq(s1.bytes_requested, 5000);
  test_fill(clpin_block_host(a), 8192, 3);
  void *ha = clpin_block_host(a);
  CL_OK(clpin_release(a, NULL));
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.blocks_cached, 1);
  ck_assert_uint_eq(s2.bytes_cached, 8192);
  ck_assert_uint_eq(s2.bytes_requested, 0);
  /* Any size of the same bucket hits. */
  CL_OK(clpin_acquire(pool, 8000, &b));
  /* The same memory (a Debug + ASan build gives it a new handle). */
  ck_assert_ptr_eq(clpin_block_host(b), ha);
#if STALE_HANDLES_DIE
  /* There the late second release of a is refused, b untouched. */
  ck_assert_int_eq(clpin_release(a, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  ck_assert_ptr_null(clpin_block_host(a));
  ck_assert_uint_eq(test_stats(pool).blocks_in_use, 1);
#endif
  clpin_stats s3 = test_stats(pool);
  ck_assert_uint_eq(s3.hits, 1);
  ck_assert_uint_eq(s3.driver_allocs, 1);
  ck_assert_uint_eq(s3.blocks_in_use, 1);
  /* Still mapped: the data written before the release is still there. */
  ck_assert_uint_eq(test_check(clpin_block_host(b), 8192, 3), (size_t)-1);
  /* Another bucket misses. */
  clpin_block *c;
  CL_OK(clpin_acquire(pool, 9000, &c));
  ck_assert_uint_eq(test_stats(pool).misses, 2);
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_release(c, NULL));
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(pending_event_holds_block) {
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  clpin_block *a;
  CL_OK(clpin_acquire(pool, 4096, &a));
  CL_OK(clpin_release(a, gate));
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_in_flight, 1);
  ck_assert_uint_eq(s.bytes_in_flight, 4096);
  ck_assert_uint_eq(s.blocks_cached, 0);
  /* While the event is pending the block is never handed out. */
  clpin_block *others[4];
  for (int i = 0; i < 4; i++) {
    CL_OK(clpin_acquire(pool, 4096, &others[i]));
    ck_assert_ptr_ne(others[i], a);
  }
  ck_assert_int_eq(clpin_release(a, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  for (int i = 0; i < 4; i++)
    CL_OK(clpin_release(others[i], NULL));
  test_assert_pool_balanced(pool);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  /* The callback may run on another thread: wait for the block to land. */
  for (int i = 0; i < 10000 && test_stats(pool).blocks_in_flight; i++)
    usleep(100);
  s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_in_flight, 0);
  ck_assert_uint_eq(s.blocks_cached, 5);
  test_assert_pool_balanced(pool);
  /* The pool retained the event: the caller's release is safe now. */
  CL_OK(clReleaseEvent(gate));
  CL_OK(clpin_pool_trim(pool));
  ck_assert_uint_eq(test_stats(pool).bytes_reserved, 0);
}
END_TEST

START_TEST(failed_event_still_returns_block) {
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  clpin_block *a;
  CL_OK(clpin_acquire(pool, 4096, &a));
  CL_OK(clpin_release(a, gate));
  CL_OK(clSetUserEventStatus(gate, -1)); /* the command "failed" */
  for (int i = 0; i < 10000 && test_stats(pool).blocks_in_flight; i++)
    usleep(100);
  ck_assert_uint_eq(test_stats(pool).blocks_cached, 1);
  CL_OK(clReleaseEvent(gate));
}
END_TEST

START_TEST(pending_command_event) {
  /* A real transfer reading the block: released with its event. */
  cl_mem dev = test_buffer(&cl, 1 << 20);
  clpin_block *a;
  CL_OK(clpin_acquire(pool, 1 << 20, &a));
  test_fill(clpin_block_host(a), 1 << 20, 11);
  cl_event ev;
  CL_OK(
      clEnqueueWriteBuffer(cl.queue, dev, CL_FALSE, 0, 1 << 20, clpin_block_host(a), 0, NULL, &ev));
  CL_OK(clpin_release(a, ev));
  CL_OK(clReleaseEvent(ev));
  CL_OK(clFinish(cl.queue));
  unsigned char *back = malloc(1 << 20);
  CL_OK(clEnqueueReadBuffer(cl.queue, dev, CL_TRUE, 0, 1 << 20, back, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(back, 1 << 20, 11), (size_t)-1);
  free(back);
  clReleaseMemObject(dev);
  for (int i = 0; i < 10000 && test_stats(pool).blocks_in_flight; i++)
    usleep(100);
  ck_assert_uint_eq(test_stats(pool).blocks_cached, 1);
}
END_TEST

START_TEST(trim_frees_only_idle) {
  clpin_block *keep, *idle[3];
  CL_OK(clpin_acquire(pool, 100000, &keep));
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_acquire(pool, 4096u << i, &idle[i]));
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_release(idle[i], NULL));
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_cached, 3);
  ck_assert_uint_eq(s.bytes_cached, 4096 + 8192 + 16384);
  CL_OK(clpin_pool_trim(pool));
  s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_cached, 0);
  ck_assert_uint_eq(s.driver_frees, 3);
  ck_assert_uint_eq(s.blocks_in_use, 1);
  ck_assert_uint_eq(s.bytes_reserved, 131072);
  ck_assert_uint_eq(s.peak_bytes_reserved, 131072 + 4096 + 8192 + 16384);
  /* The block in use is untouched. */
  test_fill(clpin_block_host(keep), 100000, 5);
  ck_assert_uint_eq(test_check(clpin_block_host(keep), 100000, 5), (size_t)-1);
  CL_OK(clpin_release(keep, NULL));
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(cap_bounds_idle_bytes) {
  CL_OK(clpin_pool_set_limit(pool, 12288));
  clpin_block *b[4];
  CL_OK(clpin_acquire(pool, 4096, &b[0]));
  CL_OK(clpin_acquire(pool, 8192, &b[1]));
  CL_OK(clpin_acquire(pool, 4096, &b[2]));
  CL_OK(clpin_acquire(pool, 65536, &b[3]));
  for (int i = 0; i < 4; i++)
    CL_OK(clpin_release(b[i], NULL));
  clpin_stats s = test_stats(pool);
  /* 4096 + 8192 fit; the second 4096 and the 65536 would not. */
  ck_assert_uint_le(s.bytes_cached, 12288);
  ck_assert_uint_eq(s.bytes_cached, 12288);
  ck_assert_uint_eq(s.driver_frees, 2);
  test_assert_pool_balanced(pool);
  /* Lowering the cap frees idle blocks now. */
  CL_OK(clpin_pool_set_limit(pool, 4096));
  s = test_stats(pool);
  ck_assert_uint_le(s.bytes_cached, 4096);
  test_assert_pool_balanced(pool);
  CL_OK(clpin_pool_set_limit(pool, 0));
  ck_assert_uint_eq(test_stats(pool).bytes_cached, 0);
  /* Cap 0: nothing is ever cached. */
  clpin_block *x;
  CL_OK(clpin_acquire(pool, 4096, &x));
  CL_OK(clpin_release(x, NULL));
  ck_assert_uint_eq(test_stats(pool).blocks_cached, 0);
  CL_OK(clpin_pool_set_limit(pool, SIZE_MAX));
  CL_OK(clpin_acquire(pool, 4096, &x));
  CL_OK(clpin_release(x, NULL));
  ck_assert_uint_eq(test_stats(pool).blocks_cached, 1);
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(cap_applies_to_completions) {
  /* A block whose event completes over the cap is freed by the next call. */
  CL_OK(clpin_pool_set_limit(pool, 4096));
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  clpin_block *a, *b;
  CL_OK(clpin_acquire(pool, 4096, &a));
  CL_OK(clpin_acquire(pool, 4096, &b));
  CL_OK(clpin_release(a, gate));
  CL_OK(clpin_release(b, NULL)); /* fills the cap */
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  for (int i = 0; i < 10000 && test_stats(pool).blocks_in_flight; i++)
    usleep(100);
  clpin_block *c;
  CL_OK(clpin_acquire(pool, 1 << 16, &c)); /* a miss: tidies up */
  CL_OK(clpin_release(c, NULL));
  clpin_stats s = test_stats(pool);
  ck_assert_uint_le(s.bytes_cached, 4096);
  test_assert_pool_balanced(pool);
  CL_OK(clReleaseEvent(gate));
}
END_TEST

START_TEST(cap_option_sets_new_pools) {
  CL_OK(clpin_set_option(CLPIN_OPT_MAX_CACHED, 8192));
  cl_int err;
  cl_context ctx2 = clCreateContext(NULL, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  clpin_pool *p2;
  CL_OK(clpin_pool_get_for_context(ctx2, &p2));
  clpin_block *b[3];
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_acquire(p2, 4096, &b[i]));
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_release(b[i], NULL));
  ck_assert_uint_eq(test_stats(p2).bytes_cached, 8192);
  CL_OK(clpin_set_option(CLPIN_OPT_MAX_CACHED, SIZE_MAX));
  CL_OK(clpin_pool_release_context(ctx2));
  clReleaseContext(ctx2);
}
END_TEST

START_TEST(stats_struct_size) {
  clpin_stats s;
  s.struct_size = 8;
  ck_assert_int_eq(clpin_pool_stats(pool, &s), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_pool_stats(pool, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_pool_stats(NULL, &s), CLPIN_ERR_INVALID_ARGUMENT);
  /* A newer, larger struct: the fields this library does not know are 0. */
  struct {
    clpin_stats s;
    uint64_t future[4];
  } big;
  memset(&big, 0xff, sizeof big);
  big.s.struct_size = sizeof big;
  CL_OK(clpin_pool_stats(pool, &big.s));
  ck_assert_uint_eq(big.s.struct_size, sizeof big);
  ck_assert_uint_eq(big.future[0], 0);
  ck_assert_uint_eq(big.future[3], 0);
  ck_assert_uint_eq(big.s.hits, 0);
}
END_TEST

START_TEST(bad_sizes_change_nothing) {
  clpin_stats before = test_stats(pool);
  clpin_block *b = (clpin_block *)0x1;
  ck_assert_int_eq(clpin_acquire(pool, 0, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_acquire(pool, SIZE_MAX, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_acquire(pool, max_alloc() + 1, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_int_eq(clpin_acquire(pool, SIZE_MAX / 2 + 2, &b), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_eq(b, (clpin_block *)0x1);
  ck_assert_int_eq(clpin_acquire(NULL, 10, &b), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_acquire(pool, 10, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(clpin_host_alloc(pool, 0));
  ck_assert_ptr_null(clpin_host_alloc(NULL, 10));
  ck_assert_ptr_null(clpin_host_alloc(pool, SIZE_MAX));
  ck_assert_int_eq(clpin_pool_trim(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_pool_set_limit(NULL, 1), CLPIN_ERR_INVALID_ARGUMENT);
  clpin_stats after = test_stats(pool);
  ck_assert_mem_eq(&before, &after, sizeof before);
}
END_TEST

START_TEST(bad_releases_change_nothing) {
  clpin_block *a;
  CL_OK(clpin_acquire(pool, 4096, &a));
  CL_OK(clpin_release(NULL, NULL));
  CL_OK(clpin_release(a, NULL));
  clpin_stats before = test_stats(pool);
  ck_assert_int_eq(clpin_release(a, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  /* Not a block at all. */
  uint64_t fake[16] = {0};
  ck_assert_int_eq(clpin_release((clpin_block *)fake, NULL), CLPIN_ERR_INVALID_BLOCK);
  clpin_stats after = test_stats(pool);
  ck_assert_mem_eq(&before, &after, sizeof before);
  ck_assert_ptr_null(clpin_block_host(NULL));
  ck_assert_ptr_null(clpin_block_buffer(NULL));
  ck_assert_uint_eq(clpin_block_size(NULL), 0);
}
END_TEST

/* clpin_host_alloc memory freed with its pool answers POOL_RELEASED at
 * clpin_host_free, but clpin remembers only the newest 1024 such pointers:
 * a program that releases contexts without freeing their memory must not
 * make that list grow for ever (it stays bounded). */
START_TEST(released_host_alloc_list_is_bounded) {
  enum { N = 1100 }; /* more than the 1024 remembered */
  cl_int err;
  cl_context ctx2 = clCreateContext(NULL, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  clpin_pool *p2;
  CL_OK(clpin_pool_get_for_context(ctx2, &p2));
  static void *h[N];
  for (int i = 0; i < N; i++) {
    h[i] = clpin_host_alloc(p2, 64);
    ck_assert_ptr_nonnull(h[i]);
  }
  CL_OK(clpin_pool_release_context(ctx2));
  CL_OK(clReleaseContext(ctx2));
  int released = 0, foreign = 0;
  for (int i = 0; i < N; i++) {
    cl_int r = clpin_host_free(h[i]);
    ck_assert(r == CLPIN_ERR_POOL_RELEASED || r == CLPIN_ERR_FOREIGN_POINTER);
    released += r == CLPIN_ERR_POOL_RELEASED;
    foreign += r == CLPIN_ERR_FOREIGN_POINTER;
    /* Answered once: the second free of the same pointer is foreign. */
    ck_assert_int_eq(clpin_host_free(h[i]), CLPIN_ERR_FOREIGN_POINTER);
  }
  ck_assert_int_eq(released, 1024);
  ck_assert_int_eq(foreign, N - 1024);
}
END_TEST

START_TEST(block_of_released_pool) {
  /* A block of another (released) context's pool. */
  cl_int err;
  cl_context ctx2 = clCreateContext(NULL, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  clpin_pool *p2;
  CL_OK(clpin_pool_get_for_context(ctx2, &p2));
  clpin_block *b;
  CL_OK(clpin_acquire(p2, 4096, &b));
  void *h = clpin_host_alloc(p2, 100);
  ck_assert_ptr_nonnull(h);
  CL_OK(clpin_pool_release_context(ctx2));
  ck_assert_int_eq(clpin_release(b, NULL), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_acquire(p2, 10, &b), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_pool_trim(p2), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_null(clpin_pool_find(p2, h, 1, NULL));
  /* The final counters stay readable: everything was freed. */
  clpin_stats s = test_stats(p2);
  ck_assert_uint_eq(s.driver_allocs, 2);
  ck_assert_uint_eq(s.driver_frees, 2);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  /* The live pool is untouched. */
  ck_assert_uint_eq(test_stats(pool).driver_allocs, 0);
  clReleaseContext(ctx2);
}
END_TEST

START_TEST(host_alloc_and_find) {
  char *p = clpin_host_alloc(pool, 1000);
  ck_assert_ptr_nonnull(p);
  test_fill(p, 1000, 9);
  size_t off = 1;
  clpin_block *b = clpin_pool_find(pool, p, 1000, &off);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(off, 0);
  ck_assert_ptr_eq(clpin_block_host(b), p);
  /* Interior ranges are found with their offset; ranges past the end not. */
  ck_assert_ptr_eq(clpin_pool_find(pool, p + 100, 3996, &off), b);
  ck_assert_uint_eq(off, 100);
  ck_assert_ptr_null(clpin_pool_find(pool, p + 100, 3997, NULL));
  ck_assert_ptr_null(clpin_pool_find(pool, p - 1, 2, NULL));
  char stack[16];
  ck_assert_ptr_null(clpin_pool_find(pool, stack, 16, NULL));
  ck_assert_ptr_null(clpin_pool_find(NULL, p, 1, NULL));
  /* A foreign pointer, an interior pointer, a block's own pointer. */
  void *heap = malloc(64);
  clpin_stats before = test_stats(pool);
  ck_assert_int_eq(clpin_host_free(heap), CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_int_eq(clpin_host_free(p + 1), CLPIN_ERR_FOREIGN_POINTER);
  clpin_block *a;
  CL_OK(clpin_acquire(pool, 100, &a));
  ck_assert_int_eq(clpin_host_free(clpin_block_host(a)), CLPIN_ERR_FOREIGN_POINTER);
  CL_OK(clpin_release(a, NULL));
  free(heap);
  ck_assert_uint_eq(test_check(p, 1000, 9), (size_t)-1);
  before = test_stats(pool);
  ck_assert_uint_eq(before.blocks_in_use, 1);
  ck_assert_uint_eq(before.bytes_requested, 1000);
  CL_OK(clpin_host_free(p));
  CL_OK(clpin_host_free(NULL));
  clpin_stats after = test_stats(pool);
  ck_assert_uint_eq(after.blocks_in_use, 0);
  /* Freed memory is no longer live, and a second free is refused. */
  ck_assert_ptr_null(clpin_pool_find(pool, p, 1, NULL));
  ck_assert_int_eq(clpin_host_free(p), CLPIN_ERR_FOREIGN_POINTER);
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(random_sequence_stays_balanced) {
  enum { SLOTS = 24 };
  clpin_block *held[SLOTS] = {0};
  cl_event gates[SLOTS] = {0};
  unsigned seed = 1234;
  for (int step = 0; step < 3000; step++) {
    int i = rand_r(&seed) % SLOTS;
    int op = rand_r(&seed) % 10;
    if (op == 9) {
      CL_OK(clpin_pool_trim(pool));
    } else if (op == 8) {
      CL_OK(clpin_pool_set_limit(pool, (size_t)(rand_r(&seed) % 4) << 16));
    } else if (!held[i]) {
      size_t n = 1 + (size_t)rand_r(&seed) % (1 << 18);
      CL_OK(clpin_acquire(pool, n, &held[i]));
      memset(clpin_block_host(held[i]), i, n);
    } else if (op < 3) {
      cl_int err;
      if (gates[i]) {
        CL_OK(clSetUserEventStatus(gates[i], CL_COMPLETE));
        CL_OK(clReleaseEvent(gates[i]));
      }
      gates[i] = clCreateUserEvent(cl.ctx, &err);
      CL_OK(err);
      CL_OK(clpin_release(held[i], gates[i]));
      held[i] = NULL;
    } else {
      CL_OK(clpin_release(held[i], NULL));
      held[i] = NULL;
    }
    test_assert_pool_balanced(pool);
  }
  for (int i = 0; i < SLOTS; i++) {
    if (held[i])
      CL_OK(clpin_release(held[i], NULL));
    if (gates[i]) {
      CL_OK(clSetUserEventStatus(gates[i], CL_COMPLETE));
      CL_OK(clReleaseEvent(gates[i]));
    }
  }
  for (int i = 0; i < 10000 && test_stats(pool).blocks_in_flight; i++)
    usleep(100);
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_in_use, 0);
  ck_assert_uint_eq(s.blocks_in_flight, 0);
  ck_assert_uint_eq(s.misses, s.driver_allocs);
  test_assert_pool_balanced(pool);
}
END_TEST

/* ---- threads ---- */

typedef struct {
  int id;
  int ops;
  int failures;
  int acquires;
} worker_arg;

/* Mark a block sparsely (head, tail, one byte a page): enough to see another
 * thread writing into it, cheap enough for ThreadSanitizer. */
static size_t next_mark(size_t i, size_t n) {
  if (i < 64 || i + 64 >= n)
    return i + 1;
  return i + 4096 < n - 64 ? i + 4096 : n - 64;
}

static void mark(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i = next_mark(i, n))
    p[i] = test_pattern(seed, i);
}

static bool marked(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i = next_mark(i, n))
    if (p[i] != test_pattern(seed, i))
      return false;
  return true;
}

static void *worker(void *p) {
  worker_arg *w = p;
  unsigned seed = (unsigned)w->id * 7919u + 1;
  clpin_block *held[4] = {0};
  size_t sizes[4] = {0};
  unsigned seeds[4] = {0};
  for (int op = 0; op < w->ops; op++) {
    int i = rand_r(&seed) % 4;
    if (held[i]) {
      /* Nobody else wrote into our block while we held it. */
      if (!marked(clpin_block_host(held[i]), sizes[i], seeds[i]))
        w->failures++;
      if (clpin_release(held[i], NULL) != CL_SUCCESS)
        w->failures++;
      held[i] = NULL;
    } else {
      sizes[i] = 1 + (size_t)rand_r(&seed) % (3 * 65536);
      if (clpin_acquire(pool, sizes[i], &held[i]) != CL_SUCCESS) {
        w->failures++;
        held[i] = NULL;
        continue;
      }
      w->acquires++;
      seeds[i] = (unsigned)(w->id * 100000 + op);
      mark(clpin_block_host(held[i]), sizes[i], seeds[i]);
    }
  }
  for (int i = 0; i < 4; i++)
    if (held[i] && clpin_release(held[i], NULL) != CL_SUCCESS)
      w->failures++;
  return NULL;
}

START_TEST(threads_keep_data_and_balance) {
  enum { THREADS = 8 };
  pthread_t t[THREADS];
  worker_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (worker_arg){i, 1500, 0, 0};
    ck_assert_int_eq(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ck_assert_int_eq(args[i].failures, 0);
  }
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_in_use, 0);
  ck_assert_uint_eq(s.bytes_requested, 0);
  uint64_t acquires = 0;
  for (int i = 0; i < THREADS; i++)
    acquires += (uint64_t)args[i].acquires;
  ck_assert_uint_eq(s.hits + s.misses, acquires);
  ck_assert_uint_eq(s.misses, s.driver_allocs);
  test_assert_pool_balanced(pool);
}
END_TEST

typedef struct {
  size_t n;
  clpin_block *got;
  void *host; /* its memory */
  cl_int err;
} one_acquire;

static void *acquire_release_in_thread(void *p) {
  one_acquire *a = p;
  a->err = clpin_acquire(pool, a->n, &a->got);
  if (a->err == CL_SUCCESS) {
    a->host = clpin_block_host(a->got);
    a->err = clpin_release(a->got, NULL);
  }
  return NULL;
}

START_TEST(threads_share_cached_blocks) {
  /* A block cached by one thread is a hit for another (its stripe is
   * empty: it takes the block from the other's), and the counters follow. */
  clpin_block *mine;
  CL_OK(clpin_acquire(pool, 70000, &mine));
  void *mem = clpin_block_host(mine);
  CL_OK(clpin_release(mine, NULL));
  for (int round = 0; round < 3; round++) {
    one_acquire a = {70000, NULL, NULL, -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, acquire_release_in_thread, &a), 0);
    pthread_join(t, NULL);
    CL_OK(a.err);
    ck_assert_ptr_eq(a.host, mem);
    clpin_block *again;
    CL_OK(clpin_acquire(pool, 70000, &again));
    ck_assert_ptr_eq(clpin_block_host(again), mem);
    CL_OK(clpin_release(again, NULL));
  }
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.misses, 1);
  ck_assert_uint_eq(s.hits, 6);
  ck_assert_uint_eq(s.blocks_cached, 1);
  ck_assert_uint_eq(s.bytes_cached, 131072);
  test_assert_pool_balanced(pool);
  CL_OK(clpin_pool_trim(pool));
  s = test_stats(pool);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.driver_frees, 1);
}
END_TEST

/* ---- CLPIN_QUARANTINE: stale second releases ------------------------------ */

/* The fixture's pool replaced by one that holds n releases back. */
static void use_quarantine(size_t n) {
  CL_OK(clpin_set_option(CLPIN_OPT_QUARANTINE, n));
  CL_OK(clpin_pool_release_context(cl.ctx));
  CL_OK(clpin_pool_get(cl.queue, &pool));
}

START_TEST(quarantine_refuses_stale_second_release) {
  use_quarantine(4);
  clpin_block *a, *b;
  CL_OK(clpin_acquire(pool, 5000, &a));
  void *mem_a = clpin_block_host(a);
  CL_OK(clpin_release(a, NULL));
  /* The same size again: not the block just released, which waits. */
  CL_OK(clpin_acquire(pool, 5000, &b));
  ck_assert_ptr_ne(a, b);
  ck_assert_ptr_ne(mem_a, clpin_block_host(b));
  test_fill(clpin_block_host(b), 8192, 21);
  /* The owner of a releases it again, late: refused, and b is untouched. */
  clpin_stats before = test_stats(pool);
  ck_assert_int_eq(clpin_release(a, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  cl_event ev;
  CL_OK(clEnqueueMarkerWithWaitList(cl.queue, 0, NULL, &ev));
  ck_assert_int_eq(clpin_release(a, ev), CLPIN_ERR_DOUBLE_RELEASE);
  clReleaseEvent(ev);
  clpin_stats after = test_stats(pool);
  ck_assert_uint_eq(after.blocks_in_use, 1);
  ck_assert_uint_eq(after.blocks_cached, 1);
  ck_assert_uint_eq(after.hits, before.hits);
  ck_assert_uint_eq(test_check(clpin_block_host(b), 8192, 21), (size_t)-1);
  CL_OK(clpin_release(b, NULL));
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(quarantine_holds_the_last_n_releases) {
  use_quarantine(4);
  clpin_block *first, *blk;
  CL_OK(clpin_acquire(pool, 5000, &first));
  void *first_mem = clpin_block_host(first);
  CL_OK(clpin_release(first, NULL));
  /* Four more releases of the same size: each acquire misses, since every
   * idle block is still held back; the fifth release lets the first go. */
  for (int i = 0; i < 4; i++) {
    CL_OK(clpin_acquire(pool, 5000, &blk));
    ck_assert_ptr_ne(clpin_block_host(blk), first_mem);
    CL_OK(clpin_release(blk, NULL));
  }
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.misses, 5);
  ck_assert_uint_eq(s.hits, 0);
  ck_assert_uint_eq(s.blocks_cached, 5);
  CL_OK(clpin_acquire(pool, 5000, &blk));
  ck_assert_ptr_eq(clpin_block_host(blk), first_mem);
  ck_assert_uint_eq(test_stats(pool).hits, 1);
  CL_OK(clpin_release(blk, NULL));
  /* Trim frees the held-back blocks too; a stale release of one still
   * gets a code. */
  CL_OK(clpin_pool_trim(pool));
  s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_cached, 0);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.driver_frees, 5);
  ck_assert_int_eq(clpin_release(first, NULL), CLPIN_ERR_DOUBLE_RELEASE);
  test_assert_pool_balanced(pool);
}
END_TEST

START_TEST(quarantine_bounds_bytes_and_cap) {
  /* At most 256 MiB are held back, whatever the count: three 128 MiB
   * releases, and the first is reusable again. */
  use_quarantine(64);
  size_t big = (size_t)128 << 20;
  ck_assert_uint_ge(max_alloc(), big);
  clpin_block *b[3], *again;
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_acquire(pool, big, &b[i]));
  void *mem0 = clpin_block_host(b[0]);
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_release(b[i], NULL));
  CL_OK(clpin_acquire(pool, big, &again));
  ck_assert_ptr_eq(clpin_block_host(again), mem0);
  CL_OK(clpin_release(again, NULL));
  /* A cap counts the held-back bytes: lowering it frees them. */
  CL_OK(clpin_pool_set_limit(pool, big));
  clpin_stats s = test_stats(pool);
  ck_assert_uint_le(s.bytes_cached, big);
  /* And blocks over the cap are freed, not held. */
  clpin_block *c;
  CL_OK(clpin_acquire(pool, 2 * big, &c));
  CL_OK(clpin_release(c, NULL));
  ck_assert_uint_le(test_stats(pool).bytes_cached, big);
  test_assert_pool_balanced(pool);
  CL_OK(clpin_pool_trim(pool));
}
END_TEST

START_TEST(quarantine_stale_host_free) {
  use_quarantine(4);
  char *p = clpin_host_alloc(pool, 1000);
  ck_assert_ptr_nonnull(p);
  CL_OK(clpin_host_free(p));
  char *q = clpin_host_alloc(pool, 1000);
  ck_assert_ptr_nonnull(q);
  ck_assert_ptr_ne(p, q);
  test_fill(q, 1000, 5);
  /* The stale second free of p is refused and frees nothing of q's. */
  ck_assert_int_eq(clpin_host_free(p), CLPIN_ERR_FOREIGN_POINTER);
  ck_assert_ptr_nonnull(clpin_pool_find(pool, q, 1000, NULL));
  ck_assert_uint_eq(test_stats(pool).blocks_in_use, 1);
  ck_assert_uint_eq(test_check(q, 1000, 5), (size_t)-1);
  CL_OK(clpin_host_free(q));
  test_assert_pool_balanced(pool);
}
END_TEST

typedef struct {
  unsigned seed;
  int failures;
} stale_arg;

/* Acquire, write, check, release, and release again at once: with a
 * quarantine the second release is refused while the block is held back,
 * and no block is ever handed to two owners. The quarantine (64) is far
 * larger than what the other threads can release between one thread's two
 * calls, even under valgrind's serialised scheduling, where a quarantine of
 * 8 let a block be reused in between (1 of 9000 releases): the guarantee
 * holds only while the block is held back. */
static void *stale_releaser(void *p) {
  stale_arg *a = p;
  for (int i = 0; i < 1500; i++) {
    size_t n = (rand_r(&a->seed) & 1) ? 3000 : 20000;
    clpin_block *blk;
    if (clpin_acquire(pool, n, &blk) != CL_SUCCESS) {
      a->failures++;
      continue;
    }
    unsigned tag = a->seed ^ (unsigned)i;
    test_fill(clpin_block_host(blk), n, tag);
    sched_yield();
    if (test_check(clpin_block_host(blk), n, tag) != (size_t)-1)
      a->failures++;
    if (clpin_release(blk, NULL) != CL_SUCCESS)
      a->failures++;
    if (clpin_release(blk, NULL) != CLPIN_ERR_DOUBLE_RELEASE)
      a->failures++;
  }
  return NULL;
}

START_TEST(quarantine_under_threads) {
  enum { THREADS = 6 };
  use_quarantine(64);
  pthread_t t[THREADS];
  stale_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (stale_arg){(unsigned)i * 7919u + 1, 0};
    ck_assert_int_eq(pthread_create(&t[i], NULL, stale_releaser, &args[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ck_assert_int_eq(args[i].failures, 0);
  }
  clpin_stats s = test_stats(pool);
  ck_assert_uint_eq(s.blocks_in_use, 0);
  ck_assert_uint_ge(s.blocks_cached, 64);
  ck_assert_uint_gt(s.hits, 0); /* blocks were reused: the quarantine was not all */
  test_assert_pool_balanced(pool);
}
END_TEST

Suite *pool_suite(void);
Suite *pool_suite(void) {
  Suite *s = suite_create("pool");
  TCase *tc = tcase_create("pool");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, capacity_is_next_power_of_two);
  tcase_add_test(tc, block_memory_reaches_the_device);
  tcase_add_test(tc, hit_reuses_without_driver_call);
  tcase_add_test(tc, pending_event_holds_block);
  tcase_add_test(tc, failed_event_still_returns_block);
  tcase_add_test(tc, pending_command_event);
  tcase_add_test(tc, trim_frees_only_idle);
  tcase_add_test(tc, cap_bounds_idle_bytes);
  tcase_add_test(tc, cap_applies_to_completions);
  tcase_add_test(tc, cap_option_sets_new_pools);
  tcase_add_test(tc, stats_struct_size);
  tcase_add_test(tc, bad_sizes_change_nothing);
  tcase_add_test(tc, bad_releases_change_nothing);
  tcase_add_test(tc, block_of_released_pool);
  tcase_add_test(tc, released_host_alloc_list_is_bounded);
  tcase_add_test(tc, host_alloc_and_find);
  tcase_add_test(tc, random_sequence_stays_balanced);
  tcase_add_test(tc, threads_keep_data_and_balance);
  tcase_add_test(tc, threads_share_cached_blocks);
  tcase_add_test(tc, quarantine_refuses_stale_second_release);
  tcase_add_test(tc, quarantine_holds_the_last_n_releases);
  tcase_add_test(tc, quarantine_bounds_bytes_and_cap);
  tcase_add_test(tc, quarantine_stale_host_free);
  tcase_add_test(tc, quarantine_under_threads);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_run_suite(pool_suite()); }
