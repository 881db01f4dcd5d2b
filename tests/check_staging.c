/* SPDX-License-Identifier: Apache-2.0 */
/* Staging transfers: clpin_write / clpin_read on every path, byte-exact, with
 * the pool's counters proving which path ran; non-blocking chains behind
 * user events; staging blocks held back while their DMA is pending; the
 * copy threads; argument errors. Runs on POCL (host-unified memory) and, in
 * ci/stages/30-oclgrind.sh, on Oclgrind (a discrete-like device). */
#include "faultlayer.h"
#include "testutil.h"
#include "internal.h"
#include "copythreads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* From this size on a transfer of one chunk or less is cut into four
 * pieces (docs/STAGING.md) and counted as pipelined. */
#define SPLIT_MIN ((size_t)1 << 20)
/* A small chunk keeps "many chunks" fast. */
#define CHUNK ((size_t)16384)
#define PIN CLPIN_PIN_MEMORY
#define NB CLPIN_NON_BLOCKING

static test_cl cl;
static clpin_pool *pool;

static void setup(void) {
  test_cl_open(&cl);
  CL_OK(clpin_pool_get(cl.queue, &pool));
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, CHUNK));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0)); /* stage every size: the paths under test */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
}

static void teardown(void) {
  test_cl_close(&cl);
  clpin_shutdown();
}

typedef struct {
  uint64_t direct, staged, pipelined, unpinned, fallbacks;
} counts;

static counts counts_now(void) {
  clpin_stats s = test_stats(pool);
  return (counts){s.bytes_pinned_direct, s.bytes_staged, s.bytes_pipelined, s.bytes_unpinned,
                  s.fallbacks};
}

static void assert_counted(counts before, counts d_expect) {
  counts a = counts_now();
  ck_assert_uint_eq(a.direct - before.direct, d_expect.direct);
  ck_assert_uint_eq(a.staged - before.staged, d_expect.staged);
  ck_assert_uint_eq(a.pipelined - before.pipelined, d_expect.pipelined);
  ck_assert_uint_eq(a.unpinned - before.unpinned, d_expect.unpinned);
  ck_assert_uint_eq(a.fallbacks - before.fallbacks, d_expect.fallbacks);
}

/* Which counter a pageable transfer of n bytes with CLPIN_PIN_MEMORY lands
 * in, by the device's unified-memory flag and CLPIN_PINNED_H2D. */
static counts expected_pinned(size_t n) {
  counts c = {0};
  if (n == 0)
    return c;
  if (cl.unified && clpin_get_option(CLPIN_OPT_PINNED) == 0)
    c.unpinned = n;
  else if (n <= clpin_get_option(CLPIN_OPT_CHUNK) && n < SPLIT_MIN)
    c.staged = n; /* one piece; from SPLIT_MIN on, even one chunk is cut in four */
  else
    c.pipelined = n;
  return c;
}

static void plain_fill(cl_mem m, size_t n, int byte) {
  unsigned char *p = malloc(n);
  memset(p, byte, n);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, p, 0, NULL, NULL));
  free(p);
}

/* Read the whole buffer through a second queue, so a transfer gated on a
 * user event in cl.queue cannot hold this read back. */
static unsigned char *peek(cl_mem m, size_t n) {
  cl_int err;
  cl_command_queue q2 = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
  CL_OK(err);
  unsigned char *p = malloc(n);
  CL_OK(clEnqueueReadBuffer(q2, m, CL_TRUE, 0, n, p, 0, NULL, NULL));
  clReleaseCommandQueue(q2);
  return p;
}

static bool all_bytes(const unsigned char *p, size_t n, int byte) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)byte)
      return false;
  return true;
}

static void finish(cl_event ev, unsigned flags) {
  ck_assert_ptr_nonnull(ev);
  if (flags & NB)
    CL_OK(clWaitForEvents(1, &ev));
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_eq(st, CL_COMPLETE);
  clReleaseEvent(ev);
}

/* Write n bytes from a host pointer misaligned by `skew` to offset `off` of a
 * buffer, check the whole buffer, read them back to another misaligned
 * pointer, check that and its guard bytes, and check the counters. */
static void roundtrip(size_t n, size_t off, size_t skew, unsigned flags, unsigned seed) {
  size_t size = off + n + 100;
  cl_mem m = test_buffer(&cl, size);
  plain_fill(m, size, 0xEE);
  unsigned char *raw = malloc(n + skew + 1);
  unsigned char *src = raw + skew;
  test_fill(src, n, seed);

  counts before = counts_now();
  cl_event ev = NULL;
  CL_OK(clpin_write(cl.queue, m, off, n ? src : NULL, n, flags, 0, NULL, &ev));
  finish(ev, flags);
  assert_counted(before, expected_pinned(n));
  unsigned char *dev = peek(m, size);
  ck_assert(all_bytes(dev, off, 0xEE));
  ck_assert_uint_eq(test_check(dev + off, n, seed), (size_t)-1);
  ck_assert(all_bytes(dev + off + n, size - off - n, 0xEE));
  free(dev);

  unsigned char *raw2 = malloc(n + skew + 64);
  memset(raw2, 0x5A, n + skew + 64);
  unsigned char *dst = raw2 + skew + 32;
  before = counts_now();
  ev = NULL;
  CL_OK(clpin_read(cl.queue, m, off, n ? dst : NULL, n, flags, 0, NULL, &ev));
  finish(ev, flags);
  assert_counted(before, expected_pinned(n));
  ck_assert_uint_eq(test_check(dst, n, seed), (size_t)-1);
  ck_assert(all_bytes(raw2, skew + 32, 0x5A));
  ck_assert(all_bytes(dst + n, 32, 0x5A));
  free(raw2);
  free(raw);
  clReleaseMemObject(m);
  test_assert_pool_balanced(pool);
}

static const size_t sizes[] = {
    0, 1, 3, 4095, 4096, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 5 * CHUNK + 77, 64 * CHUNK + 1};
#define NSIZES (sizeof sizes / sizeof *sizes)

static const struct { size_t off, skew; } places[] = {{0, 0}, {13, 1}, {4096, 3}, {CHUNK - 5, 7}};
#define NPLACES (sizeof places / sizeof *places)

/* Loop index: size x place. */
START_TEST(roundtrip_blocking) {
  size_t n = sizes[_i % NSIZES];
  roundtrip(n, places[_i / NSIZES].off, places[_i / NSIZES].skew, PIN, (unsigned)_i);
}
END_TEST

START_TEST(roundtrip_nonblocking) {
  size_t n = sizes[_i % NSIZES];
  roundtrip(n, places[_i / NSIZES].off, places[_i / NSIZES].skew, PIN | NB, (unsigned)_i + 7);
}
END_TEST

/* Chunks large enough to be split over several copy threads. */
static void parallel_copy_roundtrips(unsigned flags) {
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, (size_t)1 << 20));
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 4));
  roundtrip((9u << 20) + 3, 5, 1, flags, 1);
  roundtrip((1u << 20) - 1, 0, 3, flags, 3);
  /* One chunk or less, cut into four pieces (the last one shorter). */
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, (size_t)8 << 20));
  roundtrip((4u << 20) + 77, 13, 3, flags, 5);
  roundtrip(1u << 20, 4096, 0, flags, 7);
  roundtrip((8u << 20) - 4095, 1, 2, flags, 9);
}

START_TEST(roundtrip_parallel_copy_blocking) { parallel_copy_roundtrips(PIN); }
END_TEST

START_TEST(roundtrip_parallel_copy_nonblocking) { parallel_copy_roundtrips(PIN | NB); }
END_TEST

START_TEST(unpinned_without_flag) {
  for (unsigned nb = 0; nb < 2; nb++) {
    size_t n = 3 * CHUNK + 1;
    cl_mem m = test_buffer(&cl, n);
    unsigned char *src = malloc(n), *dst = malloc(n);
    test_fill(src, n, 9);
    counts before = counts_now();
    cl_event ev = NULL;
    CL_OK(clpin_write(cl.queue, m, 0, src, n, nb ? NB : 0, 0, NULL, &ev));
    finish(ev, nb ? NB : 0);
    CL_OK(clpin_read(cl.queue, m, 0, dst, n, nb ? NB : 0, 0, NULL, &ev));
    finish(ev, nb ? NB : 0);
    assert_counted(before, (counts){.unpinned = 2 * n});
    ck_assert_uint_eq(test_check(dst, n, 9), (size_t)-1);
    free(src);
    free(dst);
    clReleaseMemObject(m);
  }
}
END_TEST

START_TEST(pinned_h2d_option_picks_the_path) {
  /* POCL is host-unified: 0 must take the direct path there and the staged
   * one elsewhere (Oclgrind); 1 stages everywhere. */
  for (size_t h2d = 0; h2d < 2; h2d++) {
    CL_OK(clpin_set_option(CLPIN_OPT_PINNED, h2d));
    for (size_t k = 0; k < 2; k++) {
      size_t n = k ? 3 * CHUNK + 9 : CHUNK / 2;
      counts before = counts_now();
      roundtrip(n, 0, 0, PIN, (unsigned)(h2d * 2 + k));
      counts after = counts_now();
      if (cl.unified && h2d == 0)
        ck_assert_uint_eq(after.unpinned - before.unpinned, 2 * n);
      else
        ck_assert_uint_eq(after.staged + after.pipelined - before.staged - before.pipelined, 2 * n);
    }
  }
}
END_TEST

START_TEST(already_pinned_goes_direct) {
  size_t n = 3 * CHUNK + 100;
  cl_mem m = test_buffer(&cl, n + 64);
  unsigned char *h = clpin_host_alloc(pool, n + 16);
  ck_assert_ptr_nonnull(h);
  clpin_block *b;
  CL_OK(clpin_acquire(pool, n, &b));
  unsigned char *bh = clpin_block_host(b);
  for (unsigned flags = 0; flags < 4; flags++) {
    /* From clpin_host_alloc memory, at an offset inside it. */
    test_fill(h + 7, n, flags);
    counts before = counts_now();
    cl_event ev = NULL;
    CL_OK(clpin_write(cl.queue, m, 64, h + 7, n, flags, 0, NULL, &ev));
    finish(ev, flags);
    assert_counted(before, (counts){.direct = n});
    unsigned char *dev = peek(m, n + 64);
    ck_assert_uint_eq(test_check(dev + 64, n, flags), (size_t)-1);
    free(dev);
    /* Back into an acquired block. */
    memset(bh, 0, n);
    before = counts_now();
    CL_OK(clpin_read(cl.queue, m, 64, bh, n, flags, 0, NULL, &ev));
    finish(ev, flags);
    assert_counted(before, (counts){.direct = n});
    ck_assert_uint_eq(test_check(bh, n, flags), (size_t)-1);
  }
  /* Pageable memory of the same size is staged, not sent directly. */
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_host_free(h));
  unsigned char *p = malloc(n);
  test_fill(p, n, 3);
  counts before = counts_now();
  CL_OK(clpin_write(cl.queue, m, 0, p, n, PIN, 0, NULL, NULL));
  assert_counted(before, expected_pinned(n));
  free(p);
  clReleaseMemObject(m);
}
END_TEST

static cl_int status_of(cl_event ev) {
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  return st;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

START_TEST(gated_write_lands_only_after_gate) {
  size_t n = _i ? 10 * CHUNK + 5 : CHUNK / 2;
  cl_mem m = test_buffer(&cl, n);
  plain_fill(m, n, 0);
  unsigned char *src = malloc(n);
  test_fill(src, n, 21);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  cl_event ev = NULL;
  CL_OK(clpin_write(cl.queue, m, 0, src, n, PIN | NB, 1, &gate, &ev));
  nap_ms(30);
  ck_assert_int_ne(status_of(ev), CL_COMPLETE);
  unsigned char *dev = peek(m, n);
  ck_assert_msg(all_bytes(dev, n, 0), "data landed before the gate opened");
  free(dev);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  dev = peek(m, n);
  ck_assert_uint_eq(test_check(dev, n, 21), (size_t)-1);
  free(dev);
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  free(src);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(gated_read_lands_only_after_gate) {
  size_t n = _i ? 10 * CHUNK + 5 : CHUNK / 2;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 22);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, src, 0, NULL, NULL));
  memset(dst, 0x5A, n);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  cl_event ev = NULL;
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, PIN | NB, 1, &gate, &ev));
  nap_ms(30);
  ck_assert_int_ne(status_of(ev), CL_COMPLETE);
  ck_assert_msg(all_bytes(dst, n, 0x5A), "data landed before the gate opened");
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  ck_assert_uint_eq(test_check(dst, n, 22), (size_t)-1);
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  free(src);
  free(dst);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(nonblocking_chain) {
  /* gate -> write -> read -> wait on the read's event only. */
  size_t n = _i ? 7 * CHUNK + 1 : 1000;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 23);
  memset(dst, 0x5A, n);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  cl_event w = NULL, r = NULL;
  CL_OK(clpin_write(cl.queue, m, 0, src, n, PIN | NB, 1, &gate, &w));
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, PIN | NB, 1, &w, &r));
  nap_ms(20);
  ck_assert(all_bytes(dst, n, 0x5A));
  ck_assert_int_ne(status_of(r), CL_COMPLETE);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &r));
  ck_assert_uint_eq(test_check(dst, n, 23), (size_t)-1);
  clReleaseEvent(w);
  clReleaseEvent(r);
  clReleaseEvent(gate);
  free(src);
  free(dst);
  clReleaseMemObject(m);
}
END_TEST

/* Poll the pool until no block is in flight (the pool's completion callback
 * may run a moment after clWaitForEvents returns). */
static void wait_pool_settled(void) {
  for (int i = 0; i < 5000; i++) {
    clpin_stats s = test_stats(pool);
    if (s.blocks_in_flight == 0 && s.blocks_in_use == 0)
      return;
    nap_ms(1);
  }
  ck_abort_msg("staging blocks never went back to the pool");
}

START_TEST(failed_wait_event_moves_nothing) {
  /* _i: bit 0 read, bit 1 pipelined. A wait-list event that fails: the
   * deferred transfer moves nothing, its event fails, its blocks go back. */
  bool read = _i & 1;
  size_t n = _i & 2 ? 6 * CHUNK + 1 : CHUNK / 2;
  cl_mem m = test_buffer(&cl, n);
  plain_fill(m, n, 0x11);
  unsigned char *host = malloc(n);
  memset(host, 0x22, n);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev = NULL;
  CL_OK(err);
  if (read)
    CL_OK(clpin_read(cl.queue, m, 0, host, n, PIN | NB, 1, &gate, &ev));
  else
    CL_OK(clpin_write(cl.queue, m, 0, host, n, PIN | NB, 1, &gate, &ev));
  CL_OK(clSetUserEventStatus(gate, -1234));
  ck_assert_int_ne(clWaitForEvents(1, &ev), CL_SUCCESS);
  ck_assert_int_lt(status_of(ev), 0);
  clReleaseEvent(ev);
  /* A call behind the failed event fails at once and changes nothing. (It
   * also ends deferred transfers whose failed events never called back, as
   * on POCL, so their blocks go back.) */
  cl_int rc = read ? clpin_read(cl.queue, m, 0, host, n, PIN, 1, &gate, NULL)
                   : clpin_write(cl.queue, m, 0, host, n, PIN | NB, 1, &gate, &ev);
  ck_assert_int_eq(rc, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
  wait_pool_settled();
  unsigned char *dev = peek(m, n);
  ck_assert(all_bytes(dev, n, 0x11));
  ck_assert(all_bytes(host, n, 0x22));
  free(dev);
  clReleaseEvent(gate);
  free(host);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(nonblocking_without_event_then_finish) {
  /* No event asked for: clFinish(q) must cover the read's copy-out too. */
  if (test_skip_on(&cl, "rusticl", "nonblocking_without_event_then_finish", TEST_RUSTICL_FINISH))
    return;
  size_t n = _i ? 9 * CHUNK + 3 : 777;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 24);
  memset(dst, 0, n);
  CL_OK(clpin_write(cl.queue, m, 0, src, n, PIN | NB, 0, NULL, NULL));
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, PIN | NB, 0, NULL, NULL));
  CL_OK(clFinish(cl.queue));
  ck_assert_uint_eq(test_check(dst, n, 24), (size_t)-1);
  free(src);
  free(dst);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(out_of_order_queue) {
  cl_command_queue_properties qp = 0;
  CL_OK(clGetDeviceInfo(cl.device, CL_DEVICE_QUEUE_PROPERTIES, sizeof qp, &qp, NULL));
  cl_int err;
  cl_command_queue q =
      clCreateCommandQueue(cl.ctx, cl.device, qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
  CL_OK(err);
  size_t n = 11 * CHUNK + 11;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  for (unsigned nb = 0; nb < 2; nb++) {
    test_fill(src, n, 30 + nb);
    memset(dst, 0, n);
    cl_event w = NULL, r = NULL;
    CL_OK(clpin_write(q, m, 0, src, n, PIN | (nb ? NB : 0), 0, NULL, &w));
    CL_OK(clpin_read(q, m, 0, dst, n, PIN | (nb ? NB : 0), 1, &w, &r));
    CL_OK(clWaitForEvents(1, &r));
    ck_assert_uint_eq(test_check(dst, n, 30 + nb), (size_t)-1);
    clReleaseEvent(w);
    clReleaseEvent(r);
  }
  free(src);
  free(dst);
  clReleaseMemObject(m);
  clReleaseCommandQueue(q);
}
END_TEST

START_TEST(pending_blocks_are_not_reused) {
  /* _i: 0 small write, 1 pipelined write, 2 small read, 3 pipelined read. */
  if (cl.unified && clpin_get_option(CLPIN_OPT_PINNED) == 0)
    ck_abort_msg("expects the staged path");
  bool pipelined = _i & 1, read = _i & 2;
  size_t n = pipelined ? 9 * CHUNK + 1 : CHUNK;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *host = malloc(n);
  test_fill(host, n, 40);
  if (read) {
    CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, host, 0, NULL, NULL));
    memset(host, 0, n);
  } else {
    plain_fill(m, n, 0);
  }
  wait_pool_settled();
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev = NULL;
  CL_OK(err);
  if (read)
    CL_OK(clpin_read(cl.queue, m, 0, host, n, PIN | NB, 1, &gate, &ev));
  else
    CL_OK(clpin_write(cl.queue, m, 0, host, n, PIN | NB, 1, &gate, &ev));
  clpin_stats s = test_stats(pool);
  /* A transfer waiting to start holds no pinned memory: the engine takes
   * its staging blocks only once the wait list has ended. */
  ck_assert_uint_eq(s.blocks_in_flight + s.blocks_in_use, 0);
  ck_assert_uint_eq(s.blocks_cached, 0);
  /* Blocks handed out and scribbled over now, and given back before the
   * transfer starts, must not reach its data. */
  clpin_block *b[8];
  for (int k = 0; k < 8; k++) {
    CL_OK(clpin_acquire(pool, CHUNK, &b[k]));
    memset(clpin_block_host(b[k]), 0xFF, clpin_block_size(b[k]));
  }
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.hits, s.hits);
  ck_assert_uint_eq(s2.misses, s.misses + 8);
  for (int k = 0; k < 8; k++)
    CL_OK(clpin_release(b[k], NULL));
  ck_assert_int_ne(status_of(ev), CL_COMPLETE);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  if (read) {
    ck_assert_uint_eq(test_check(host, n, 40), (size_t)-1);
  } else {
    unsigned char *dev = peek(m, n);
    ck_assert_uint_eq(test_check(dev, n, 40), (size_t)-1);
    free(dev);
  }
  wait_pool_settled();
  /* And afterwards the staging blocks are idle in the cache with the 8. */
  ck_assert_uint_ge(test_stats(pool).blocks_cached, 8);
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  free(host);
  clReleaseMemObject(m);
}
END_TEST

START_TEST(zero_bytes) {
  size_t n = 64;
  cl_mem m = test_buffer(&cl, n);
  unsigned char host[8] = {0};
  counts before = counts_now();
  for (unsigned flags = 0; flags < 4; flags++) {
    cl_event ev = NULL;
    CL_OK(clpin_write(cl.queue, m, 0, NULL, 0, flags, 0, NULL, &ev));
    ck_assert_int_eq(status_of(ev), CL_COMPLETE);
    clReleaseEvent(ev);
    ev = NULL;
    CL_OK(clpin_read(cl.queue, m, n, host, 0, flags, 0, NULL, &ev));
    ck_assert_int_eq(status_of(ev), CL_COMPLETE);
    clReleaseEvent(ev);
    CL_OK(clpin_write(cl.queue, m, 3, host, 0, flags, 0, NULL, NULL));
  }
  assert_counted(before, (counts){0});
  clReleaseMemObject(m);
}
END_TEST

START_TEST(argument_errors) {
  size_t n = 64;
  cl_mem m = test_buffer(&cl, n);
  unsigned char host[128] = {0};
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  cl_event sentinel = (cl_event)(uintptr_t)0x1234, ev = sentinel;
  counts before = counts_now();
  for (int dir = 0; dir < 2; dir++) {
#define XFER(q, mem, off, p, len, fl, nw, wl)                                                      \
  (dir ? clpin_read(q, mem, off, p, len, fl, nw, wl, &ev)                                          \
       : clpin_write(q, mem, off, p, len, fl, nw, wl, &ev))
    ck_assert_int_eq(XFER(NULL, m, 0, host, 8, PIN, 0, NULL), CL_INVALID_COMMAND_QUEUE);
    ck_assert_int_eq(XFER(cl.queue, NULL, 0, host, 8, PIN, 0, NULL), CL_INVALID_MEM_OBJECT);
    ck_assert_int_eq(XFER(cl.queue, m, 0, NULL, 8, PIN, 0, NULL), CL_INVALID_VALUE);
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 8, 1u << 2, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 8, 0x80000000u, 0, NULL),
                     CLPIN_ERR_INVALID_ARGUMENT);
    /* An access flag is not a transfer flag: refused, and named. */
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 8, CLPIN_READ, 0, NULL),
                     CLPIN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "CLPIN_READ is an access flag"));
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 8, PIN, 1, NULL), CL_INVALID_EVENT_WAIT_LIST);
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 8, PIN, 0, &gate), CL_INVALID_EVENT_WAIT_LIST);
    ck_assert_int_eq(XFER(cl.queue, m, 1, host, n, PIN, 0, NULL), CL_INVALID_VALUE);
    ck_assert_int_eq(XFER(cl.queue, m, n + 1, host, 0, PIN, 0, NULL), CL_INVALID_VALUE);
    ck_assert_int_eq(XFER(cl.queue, m, SIZE_MAX, host, 2, PIN, 0, NULL), CL_INVALID_VALUE);
    ck_assert_int_eq(XFER(cl.queue, m, 2, host, SIZE_MAX - 1, PIN, 0, NULL), CL_INVALID_VALUE);
    ck_assert_int_eq(XFER(cl.queue, m, 0, host, 128, PIN | NB, 0, NULL), CL_INVALID_VALUE);
#undef XFER
  }
  ck_assert_ptr_eq(ev, sentinel);
  assert_counted(before, (counts){0});
  clReleaseEvent(gate);
  clReleaseMemObject(m);
}
END_TEST

/* Several threads, each with its own queue and buffer, at once. */
typedef struct {
  cl_mem m;
  cl_command_queue q;
  unsigned seed;
  int failures;
} worker_arg;

static void *transfer_thread(void *p) {
  worker_arg *a = p;
  size_t n = 6 * CHUNK + (a->seed % 100);
  unsigned char *src = malloc(n), *dst = malloc(n);
  for (int r = 0; r < 20; r++) {
    unsigned seed = a->seed * 100 + (unsigned)r;
    unsigned flags = PIN | (r & 1 ? NB : 0);
    size_t len = r % 3 ? n : CHUNK / 3;
    test_fill(src, len, seed);
    memset(dst, 0, len);
    cl_event w = NULL, rd = NULL;
    if (clpin_write(a->q, a->m, 0, src, len, flags, 0, NULL, &w) != CL_SUCCESS ||
        clpin_read(a->q, a->m, 0, dst, len, flags, 1, &w, &rd) != CL_SUCCESS ||
        clWaitForEvents(1, &rd) != CL_SUCCESS || test_check(dst, len, seed) != (size_t)-1)
      a->failures++;
    if (w)
      clReleaseEvent(w);
    if (rd)
      clReleaseEvent(rd);
  }
  free(src);
  free(dst);
  return NULL;
}

START_TEST(concurrent_transfers) {
  enum { T = 4 };
  pthread_t th[T];
  worker_arg args[T];
  for (int i = 0; i < T; i++) {
    cl_int err;
    args[i] = (worker_arg){test_buffer(&cl, 7 * CHUNK), NULL, (unsigned)i + 1, 0};
    args[i].q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
    CL_OK(err);
    ck_assert_int_eq(pthread_create(&th[i], NULL, transfer_thread, &args[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(args[i].failures, 0);
    clReleaseCommandQueue(args[i].q);
    clReleaseMemObject(args[i].m);
  }
  wait_pool_settled();
}
END_TEST

/* ---- the out-of-memory fallback (run under tests/faultlayer/) ----------- */

/* While on, every clCreateBuffer fails as out of memory (the test creates its
 * own buffers before): the pool cannot allocate, plain transfers still run. */
static void fail_pinned(bool on) {
  ck_assert_msg(faultlayer_active(), "the fault layer is not loaded: is OPENCL_LAYERS set to "
                                     "libclpin_faultlayer.so?");
  if (on)
    faultlayer_arm(faultlayer_entry_index("clCreateBuffer"), 1, 0,
                   CL_MEM_OBJECT_ALLOCATION_FAILURE);
  else
    faultlayer_disarm();
}

START_TEST(fallback_when_pool_cannot_allocate) {
  /* _i: bit 0 read, bit 1 non-blocking, bit 2 pipelined. */
  if (cl.unified && clpin_get_option(CLPIN_OPT_PINNED) == 0)
    ck_abort_msg("expects the staged path");
  bool read = _i & 1, pipelined = _i & 4;
  /* Oclgrind's runtime is not thread-safe, and a non-blocking staged
   * transfer runs on clpin's threads: there the non-blocking variants run
   * blocking (docs/STAGING.md, "Known limits"). */
  const char *platform = getenv("CLPIN_TEST_PLATFORM");
  bool threads_ok = !platform || !strstr(platform, "Oclgrind");
  unsigned flags = PIN | (_i & 2 && threads_ok ? NB : 0);
  size_t n = pipelined ? 5 * CHUNK + 3 : CHUNK / 2 + 1;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 50 + (unsigned)_i);
  memset(dst, 0, n);
  fail_pinned(true);
  /* The layer is active: the pool itself cannot allocate now. */
  clpin_block *b = NULL;
  cl_int err = clpin_acquire(pool, CHUNK, &b);
  ck_assert_msg(clpin__is_oom(err), "acquire under the fault layer gave %s", clpin_strerror(err));
  clpin_stats s0 = test_stats(pool);
  counts before = counts_now();
  cl_event ev = NULL;
  if (read) {
    CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, src, 0, NULL, NULL));
    CL_OK(clpin_read(cl.queue, m, 0, dst, n, flags, 0, NULL, &ev));
  } else {
    CL_OK(clpin_write(cl.queue, m, 0, src, n, flags, 0, NULL, &ev));
  }
  finish(ev, flags);
  assert_counted(before, (counts){.unpinned = n, .fallbacks = 1});
  ck_assert_uint_gt(test_stats(pool).oom_retries, s0.oom_retries);
  if (!read) {
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, dst, 0, NULL, NULL));
  }
  ck_assert_uint_eq(test_check(dst, n, 50 + (unsigned)_i), (size_t)-1);
  /* Memory is back: the next transfer stages again. */
  fail_pinned(false);
  before = counts_now();
  CL_OK(clpin_write(cl.queue, m, 0, src, n, PIN, 0, NULL, NULL));
  assert_counted(before, expected_pinned(n));
  free(src);
  free(dst);
  clReleaseMemObject(m);
}
END_TEST

/* _i: bit 0 non-blocking. A read queues up to eight DMAs; the slots past
 * the fourth are taken only where the pool gives them. With every
 * allocation from the fifth on refused, a long read still stages through
 * four slots, byte-exact, counted as pipelined and not as a fallback; with
 * memory back, the next read takes all eight (four cached, four new). */
START_TEST(read_runs_with_the_slots_it_gets) {
  if (cl.unified && clpin_get_option(CLPIN_OPT_PINNED) == 0)
    ck_abort_msg("expects the staged path");
  const char *platform = getenv("CLPIN_TEST_PLATFORM");
  bool threads_ok = !platform || !strstr(platform, "Oclgrind");
  unsigned flags = PIN | (_i & 1 && threads_ok ? NB : 0);
  size_t n = 40 * CHUNK + 5;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *dst = malloc(n);
  test_fill(src, n, 70 + (unsigned)_i);
  memset(dst, 0, n);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, src, 0, NULL, NULL));
  clpin_stats s0 = test_stats(pool);
  counts before = counts_now();
  ck_assert_msg(faultlayer_active(), "the fault layer is not loaded: is OPENCL_LAYERS set to "
                                     "libclpin_faultlayer.so?");
  faultlayer_arm(faultlayer_entry_index("clCreateBuffer"), 5, 0, CL_MEM_OBJECT_ALLOCATION_FAILURE);
  cl_event ev = NULL;
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, flags, 0, NULL, &ev));
  finish(ev, flags);
  unsigned long fired = faultlayer_fired();
  faultlayer_disarm();
  ck_assert_uint_ge(fired, 1);
  assert_counted(before, (counts){.pipelined = n});
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.driver_allocs - s0.driver_allocs, 4);
  ck_assert_uint_gt(s1.oom_retries, s0.oom_retries);
  ck_assert_uint_eq(test_check(dst, n, 70 + (unsigned)_i), (size_t)-1);
  memset(dst, 0, n);
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, PIN, 0, NULL, NULL));
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.driver_allocs - s1.driver_allocs, 4);
  ck_assert_uint_eq(s2.hits - s1.hits, 4);
  ck_assert_uint_eq(test_check(dst, n, 70 + (unsigned)_i), (size_t)-1);
  test_assert_balanced(&s2);
  free(src);
  free(dst);
  clReleaseMemObject(m);
}
END_TEST

/* ---- the copy threads ----------------------------------------------------- */

typedef struct {
  atomic_size_t parts_run;
  atomic_int done_calls;
  unsigned char seen[64];
} count_task;

static void count_run(void *arg, size_t part) {
  count_task *c = arg;
  c->seen[part]++;
  atomic_fetch_add(&c->parts_run, 1);
}

static void count_done(void *arg) {
  count_task *c = arg;
  atomic_fetch_add(&c->done_calls, 1);
}

START_TEST(copy_threads_run_every_part_once) {
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 3));
  for (int round = 0; round < 3; round++) {
    count_task c = {0};
    clpin__task t = {.run = count_run, .arg = &c, .nparts = 64};
    clpin__copythreads_run(&t);
    ck_assert_uint_eq(atomic_load(&c.parts_run), 64);
    for (int i = 0; i < 64; i++)
      ck_assert_int_eq(c.seen[i], 1);
    /* Async tasks: done() exactly once, after every part. */
    count_task a[16];
    clpin__task at[16];
    memset(a, 0, sizeof a);
    for (int k = 0; k < 16; k++) {
      at[k] = (clpin__task){
          .run = count_run, .done = count_done, .arg = &a[k], .nparts = (size_t)k % 5 + 1};
      clpin__copythreads_submit(&at[k]);
    }
    for (int k = 0; k < 16; k++) {
      for (int w = 0; w < 2000 && !atomic_load(&a[k].done_calls); w++)
        nap_ms(1);
      ck_assert_int_eq(atomic_load(&a[k].done_calls), 1);
      ck_assert_uint_eq(atomic_load(&a[k].parts_run), (size_t)k % 5 + 1);
    }
    ck_assert_uint_ge(clpin__copythreads_start(), 1);
    /* Stopping and using them again works. */
    clpin__copythreads_shutdown();
  }
}
END_TEST

/* "blocking" needs nothing of the OpenCL implementation beyond
 * single-threaded use; "nonblocking" needs event callbacks that fire as
 * commands complete and a thread-safe runtime (POCL, GPU drivers), which
 * Oclgrind does not have: ci/stages/30-oclgrind.sh runs "blocking" only. */
static Suite *staging_suite(void) {
  Suite *s = suite_create("staging");
  TCase *tc = tcase_create("blocking");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, roundtrip_blocking, 0, (int)(NSIZES * NPLACES));
  tcase_add_test(tc, roundtrip_parallel_copy_blocking);
  tcase_add_test(tc, unpinned_without_flag);
  tcase_add_test(tc, pinned_h2d_option_picks_the_path);
  tcase_add_test(tc, already_pinned_goes_direct);
  tcase_add_test(tc, zero_bytes);
  tcase_add_test(tc, argument_errors);
  tcase_add_test(tc, copy_threads_run_every_part_once);
  suite_add_tcase(s, tc);

  tc = tcase_create("nonblocking");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, roundtrip_nonblocking, 0, (int)(NSIZES * NPLACES));
  tcase_add_test(tc, roundtrip_parallel_copy_nonblocking);
  tcase_add_loop_test(tc, gated_write_lands_only_after_gate, 0, 2);
  tcase_add_loop_test(tc, gated_read_lands_only_after_gate, 0, 2);
  tcase_add_loop_test(tc, nonblocking_chain, 0, 2);
  tcase_add_loop_test(tc, nonblocking_without_event_then_finish, 0, 2);
  tcase_add_loop_test(tc, failed_wait_event_moves_nothing, 0, 4);
  tcase_add_test(tc, out_of_order_queue);
  tcase_add_loop_test(tc, pending_blocks_are_not_reused, 0, 4);
  tcase_add_test(tc, concurrent_transfers);
  suite_add_tcase(s, tc);

  /* Needs OPENCL_LAYERS=libclpin_faultlayer.so: CTest's
   * check_staging_fallback runs this case alone, check_staging the rest. */
  tc = tcase_create("fallback");
  tcase_set_tags(tc, "fallback");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, fallback_when_pool_cannot_allocate, 0, 8);
  tcase_add_loop_test(tc, read_runs_with_the_slots_it_gets, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Run by hand, leave out the case that needs the fault layer. */
  if (!getenv("CK_INCLUDE_TAGS") && !getenv("CK_EXCLUDE_TAGS"))
    setenv("CK_EXCLUDE_TAGS", "fallback", 1);
  return test_run_suite(staging_suite());
}
