/* SPDX-License-Identifier: Apache-2.0 */
/* The transfer engine: non-blocking staged transfers return at
 * once and deliver later; opposite directions and many queues at once;
 * wait lists with user events completed or failed later; which path
 * CLPIN_PINNED_H2D=auto takes on a host-unified device.
 *
 * CLPIN_TEST_BIG sets the size of the large transfers (default 256 MiB;
 * the sanitizer and valgrind stages use less). */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static test_cl cl;
static clpin_pool *pool;

static void setup(void) {
  test_cl_open(&cl);
  CL_OK(clpin_pool_get(cl.queue, &pool));
  /* Stage on every device (the engine is what is under test), in 1 MiB
   * chunks so that moderate sizes take the pipeline. */
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, MiB));
}

static void teardown(void) {
  CL_OK(clpin_pool_release_context(cl.ctx));
  clpin_shutdown();
  test_cl_close(&cl);
}

static size_t big_size(void) {
  const char *e = getenv("CLPIN_TEST_BIG");
  size_t n = e ? strtoull(e, NULL, 0) : 0;
  return n ? n : 256 * MiB;
}

static cl_int status_of(cl_event ev) {
  cl_int st = CL_QUEUED;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  return st;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* No pool block is used or in flight, and the counters balance. */
static void assert_pool_idle(void) {
  clpin_stats s = test_stats(pool);
  test_assert_balanced(&s);
  ck_assert_uint_eq(s.blocks_in_use, 0);
  ck_assert_uint_eq(s.blocks_in_flight, 0);
}

/* ---- non-blocking: return first, deliver later ----------------------------------- */

START_TEST(nonblocking_returns_before_the_data_moves) {
  size_t n = big_size();
  unsigned char *src = malloc(n), *dst = malloc(n);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  test_fill(src, n, 1);
  memset(dst, 0, n);
  cl_mem m = test_buffer(&cl, n);
  clpin_stats s0 = test_stats(pool);

  cl_event w;
  CL_OK(clpin_write(cl.queue, m, 0, src, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &w));
  /* Hundreds of MiB of host copies cannot be done yet. */
  ck_assert_int_gt(status_of(w), CL_COMPLETE);
  CL_OK(clWaitForEvents(1, &w));
  /* The write's event completed: src is the caller's again. Scribble on it;
   * nothing of the transfer may read it any more. */
  memset(src, 0xA5, n);
  sleep_ms(20);

  cl_event r;
  CL_OK(clpin_read(cl.queue, m, 0, dst, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &r));
  ck_assert_int_gt(status_of(r), CL_COMPLETE);
  CL_OK(clWaitForEvents(1, &r));
  ck_assert_uint_eq(test_check(dst, n, 1), (size_t)-1);
  /* The read's event completed: dst is the caller's. Nothing writes it. */
  memset(dst, 0x5A, n);
  sleep_ms(20);
  for (size_t i = 0; i < n; i += 4093)
    ck_assert_uint_eq(dst[i], 0x5A);
  ck_assert_uint_eq(dst[n - 1], 0x5A);

  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.bytes_pipelined - s0.bytes_pipelined, 2 * n);
  assert_pool_idle();
  clReleaseEvent(w);
  clReleaseEvent(r);
  clReleaseMemObject(m);
  free(src);
  free(dst);
}
END_TEST

/* Later commands on an in-order queue see the data: a plain read enqueued
 * right after a non-blocking clpin_write, and the reverse. */
START_TEST(queue_order_is_kept) {
  if (test_skip_on(&cl, "rusticl", "queue_order_is_kept", TEST_RUSTICL_FINISH))
    return;
  size_t n = 5 * MiB + 123;
  unsigned char *src = malloc(n), *dst = malloc(n);
  cl_mem m = test_buffer(&cl, n);
  for (unsigned round = 0; round < 4; round++) {
    test_fill(src, n, 10 + round);
    CL_OK(
        clpin_write(cl.queue, m, 0, src, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, NULL));
    memset(dst, 0, n);
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, dst, 0, NULL, NULL));
    ck_assert_uint_eq(test_check(dst, n, 10 + round), (size_t)-1);
    /* And a plain write, then a non-blocking clpin_read behind it. */
    test_fill(src, n, 20 + round);
    CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_FALSE, 0, n, src, 0, NULL, NULL));
    memset(dst, 0, n);
    CL_OK(clpin_read(cl.queue, m, 0, dst, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, NULL));
    CL_OK(clFinish(cl.queue));
    ck_assert_uint_eq(test_check(dst, n, 20 + round), (size_t)-1);
  }
  assert_pool_idle();
  clReleaseMemObject(m);
  free(src);
  free(dst);
}
END_TEST

/* ---- many directions and queues at once --------------------------------------------- */

typedef struct {
  cl_command_queue q;
  cl_mem m;
  size_t n;
  int rounds;
  unsigned seed;
  bool read; /* this thread reads (else writes) */
  bool nonblocking;
  int errors;
} mover;

static void *mover_main(void *arg) {
  mover *mv = arg;
  unsigned char *h = malloc(mv->n);
  unsigned flags = CLPIN_PIN_MEMORY | (mv->nonblocking ? CLPIN_NON_BLOCKING : 0);
  for (int r = 0; r < mv->rounds; r++) {
    cl_event ev = NULL;
    cl_int err;
    if (mv->read) {
      memset(h, 0, mv->n);
      err = clpin_read(mv->q, mv->m, 0, h, mv->n, flags, 0, NULL, mv->nonblocking ? &ev : NULL);
    } else {
      test_fill(h, mv->n, mv->seed + (unsigned)r);
      err = clpin_write(mv->q, mv->m, 0, h, mv->n, flags, 0, NULL, mv->nonblocking ? &ev : NULL);
    }
    if (err == CL_SUCCESS && ev) {
      err = clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
    if (err != CL_SUCCESS) {
      mv->errors++;
      continue;
    }
    if (mv->read && test_check(h, mv->n, mv->seed) != (size_t)-1)
      mv->errors++;
    if (!mv->read) {
      /* Read back with a plain transfer: what this thread wrote. */
      unsigned char *back = malloc(mv->n);
      CL_OK(clEnqueueReadBuffer(mv->q, mv->m, CL_TRUE, 0, mv->n, back, 0, NULL, NULL));
      if (test_check(back, mv->n, mv->seed + (unsigned)r) != (size_t)-1)
        mv->errors++;
      free(back);
    }
  }
  free(h);
  return NULL;
}

/* While movers run: every snapshot balances. */
static atomic_int monitor_stop;
static atomic_int monitor_broken;
static void *monitor_main(void *arg) {
  (void)arg;
  while (!atomic_load(&monitor_stop)) {
    clpin_stats s;
    char why[256];
    if (test_stats_get(pool, &s) != CL_SUCCESS || test_stats_broken(&s, why, sizeof why))
      atomic_store(&monitor_broken, 1);
    sleep_ms(1);
  }
  return NULL;
}

static void run_movers(mover *mv, int k) {
  pthread_t th[16], mon;
  atomic_store(&monitor_stop, 0);
  atomic_store(&monitor_broken, 0);
  ck_assert_int_eq(pthread_create(&mon, NULL, monitor_main, NULL), 0);
  for (int i = 0; i < k; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, mover_main, &mv[i]), 0);
  for (int i = 0; i < k; i++)
    pthread_join(th[i], NULL);
  atomic_store(&monitor_stop, 1);
  pthread_join(mon, NULL);
  ck_assert_msg(!atomic_load(&monitor_broken), "a snapshot broke the pool invariant");
  for (int i = 0; i < k; i++)
    ck_assert_msg(mv[i].errors == 0, "mover %d: %d bad rounds", i, mv[i].errors);
}

START_TEST(duplex_two_threads) {
  /* _i: 0 blocking, 1 non-blocking. One thread writes buffer A while the
   * other reads buffer B, which holds a known pattern. */
  size_t n = 3 * MiB + 4096;
  cl_int err;
  mover mv[2];
  for (int i = 0; i < 2; i++) {
    mv[i] = (mover){.q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err),
                    .m = test_buffer(&cl, n),
                    .n = n,
                    .rounds = 12,
                    .seed = 40,
                    .read = i == 1,
                    .nonblocking = _i == 1};
    CL_OK(err);
  }
  unsigned char *init = malloc(n);
  test_fill(init, n, 40);
  CL_OK(clEnqueueWriteBuffer(mv[1].q, mv[1].m, CL_TRUE, 0, n, init, 0, NULL, NULL));
  free(init);
  run_movers(mv, 2);
  assert_pool_idle();
  for (int i = 0; i < 2; i++) {
    clReleaseMemObject(mv[i].m);
    clReleaseCommandQueue(mv[i].q);
  }
}
END_TEST

START_TEST(eight_queues) {
  enum { K = 8 };
  size_t n = 2 * MiB + 77;
  cl_int err;
  mover mv[K];
  for (int i = 0; i < K; i++) {
    mv[i] = (mover){.q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err),
                    .m = test_buffer(&cl, n),
                    .n = n,
                    .rounds = 6,
                    .seed = 100u + (unsigned)i * 17,
                    .read = i % 2 == 1,
                    .nonblocking = i % 4 < 2};
    CL_OK(err);
    if (mv[i].read) {
      unsigned char *init = malloc(n);
      test_fill(init, n, mv[i].seed);
      CL_OK(clEnqueueWriteBuffer(mv[i].q, mv[i].m, CL_TRUE, 0, n, init, 0, NULL, NULL));
      free(init);
    }
  }
  run_movers(mv, K);
  assert_pool_idle();
  for (int i = 0; i < K; i++) {
    clReleaseMemObject(mv[i].m);
    clReleaseCommandQueue(mv[i].q);
  }
}
END_TEST

/* ---- wait lists with user events --------------------------------------------------- */

START_TEST(user_event_completed_later) {
  /* _i: 0 write, 1 read. */
  bool read = _i == 1;
  size_t n = 3 * MiB + 5;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *h = malloc(n), *init = malloc(n);
  test_fill(init, n, 60);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, init, 0, NULL, NULL));
  test_fill(h, n, 61);
  if (read)
    memset(h, 0, n);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev;
  CL_OK(err);
  if (read)
    CL_OK(clpin_read(cl.queue, m, 0, h, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &gate, &ev));
  else
    CL_OK(clpin_write(cl.queue, m, 0, h, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &gate, &ev));
  sleep_ms(30);
  /* Nothing moves before the gate opens. */
  ck_assert_int_gt(status_of(ev), CL_COMPLETE);
  if (read)
    ck_assert_uint_eq(h[0], 0);
  CL_OK(clSetUserEventStatus(gate, CL_COMPLETE));
  CL_OK(clWaitForEvents(1, &ev));
  if (read) {
    ck_assert_uint_eq(test_check(h, n, 60), (size_t)-1);
  } else {
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, init, 0, NULL, NULL));
    ck_assert_uint_eq(test_check(init, n, 61), (size_t)-1);
  }
  assert_pool_idle();
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  clReleaseMemObject(m);
  free(h);
  free(init);
}
END_TEST

/* Once the engine lets go, the pool is idle: wait up to 2 s, then check. */
static void wait_pool_idle(void) {
  for (int i = 0; i < 2000; i++) {
    clpin_stats s = test_stats(pool);
    if (s.blocks_in_use == 0 && s.blocks_in_flight == 0)
      break;
    sleep_ms(1);
  }
  assert_pool_idle();
}

START_TEST(user_event_failed_later) {
  /* _i: 0 write, 1 read. The gate fails: the transfer's event fails with
   * the status the driver gives a command behind the failed gate (a marker
   * on a queue of its own shows it) and the destination is untouched. */
  bool read = _i == 1;
  size_t n = 3 * MiB + 5;
  cl_int err;
  /* A queue of its own: the failed gate leaves nothing behind on cl.queue. */
  cl_command_queue q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
  CL_OK(err);
  cl_mem m = test_buffer(&cl, n);
  unsigned char *h = malloc(n), *init = malloc(n);
  test_fill(init, n, 70);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, init, 0, NULL, NULL));
  test_fill(h, n, 71);
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev, ref;
  CL_OK(err);
  cl_command_queue q_ref = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
  CL_OK(err);
  CL_OK(clEnqueueMarkerWithWaitList(q_ref, 1, &gate, &ref));
  CL_OK(clFlush(q_ref));
  if (read)
    CL_OK(clpin_read(q, m, 0, h, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &gate, &ev));
  else
    CL_OK(clpin_write(q, m, 0, h, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &gate, &ev));
  CL_OK(clSetUserEventStatus(gate, -1));
  clWaitForEvents(1, &ev);
  /* Ended, and failed. */
  for (int i = 0; i < 2000 && status_of(ev) > CL_COMPLETE; i++)
    sleep_ms(1);
  ck_assert_int_lt(status_of(ev), 0);
  for (int i = 0; i < 2000 && status_of(ref) > CL_COMPLETE; i++)
    sleep_ms(1);
  ck_assert_int_eq(status_of(ev), status_of(ref));
  clReleaseEvent(ref);
  if (read) {
    ck_assert_uint_eq(test_check(h, n, 71), (size_t)-1);
  } else {
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, init, 0, NULL, NULL));
    ck_assert_uint_eq(test_check(init, n, 70), (size_t)-1);
  }
  /* Nothing leaked: once the engine let go, the pool is idle. */
  wait_pool_idle();
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  clReleaseMemObject(m);
  clReleaseCommandQueue(q);
  clReleaseCommandQueue(q_ref); /* its marker has ended (failed): nothing left */
  free(h);
  free(init);
}
END_TEST

START_TEST(user_event_failed_mid_propagation) {
  /* A read behind a user event the application fails after the call, on a
   * queue of its own: the driver fails the commands behind the gate from
   * the application's thread while the engine sees its W fail. Run alone
   * it is one more failed gate; as the test check_engine_failrace it runs
   * with tests/failrace/ preloaded, which holds POCL's windows open so
   * that the engine meets the driver's thread inside them on every run
   * (it crashed in POCL then, before the engine stopped failing fin behind
   * a failed W). */
  size_t n = 3 * MiB;
  cl_int err;
  cl_command_queue q = clCreateCommandQueue(cl.ctx, cl.device, 0, &err);
  CL_OK(err);
  cl_mem m = test_buffer(&cl, n);
  unsigned char *h = malloc(n);
  test_fill(h, n, 81);
  cl_event gate = clCreateUserEvent(cl.ctx, &err), ev;
  CL_OK(err);
  CL_OK(clpin_read(q, m, 0, h, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 1, &gate, &ev));
  CL_OK(clSetUserEventStatus(gate, -8));
  for (int i = 0; i < 2000 && status_of(ev) > CL_COMPLETE; i++)
    sleep_ms(1);
  ck_assert_int_lt(status_of(ev), 0);
  ck_assert_uint_eq(test_check(h, n, 81), (size_t)-1);
  /* The engine lets go of its events a grace period later. */
  sleep_ms(400);
  wait_pool_idle();
  clReleaseEvent(ev);
  clReleaseEvent(gate);
  clReleaseMemObject(m);
  clReleaseCommandQueue(q);
  free(h);
}
END_TEST

/* ---- the path on a host-unified device -------------------------------------------- */

START_TEST(auto_takes_the_plain_path_on_unified_memory) {
  if (!cl.unified)
    ck_abort_msg("needs a host-unified-memory device (POCL's CPU device in CI)");
  size_t n = 4 * MiB;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *h = malloc(n);
  test_fill(h, n, 80);
  for (size_t v = 0; v < 3; v++) {
    CL_OK(clpin_set_option(CLPIN_OPT_PINNED, v == 2 ? CLPIN_PINNED_AUTO : v));
    clpin_stats s0 = test_stats(pool);
    CL_OK(clpin_write(cl.queue, m, 0, h, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
    CL_OK(clpin_read(cl.queue, m, 0, h, n, CLPIN_PIN_MEMORY, 0, NULL, NULL));
    clpin_stats s1 = test_stats(pool);
    uint64_t staged =
        (s1.bytes_staged - s0.bytes_staged) + (s1.bytes_pipelined - s0.bytes_pipelined);
    uint64_t plain = s1.bytes_unpinned - s0.bytes_unpinned;
    if (v == 1) {
      ck_assert_uint_eq(staged, 2 * n);
      ck_assert_uint_eq(plain, 0);
    } else {
      ck_assert_uint_eq(staged, 0);
      ck_assert_uint_eq(plain, 2 * n);
    }
    ck_assert_uint_eq(test_check(h, n, 80), (size_t)-1);
  }
  /* And the default is auto. */
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_PINNED), CLPIN_PINNED_AUTO);
  free(h);
  clReleaseMemObject(m);
}
END_TEST

/* Below CLPIN_STAGE_MIN a write takes the plain path ("never slower"), also
 * below CLPIN_STAGE_MIN_H2D. A blocking read below CLPIN_STAGE_MIN goes
 * through one pool block up to 256 KiB (the driver reads into pinned memory
 * faster than into pageable, staging.c) and is plain above that; a
 * non-blocking small read is the driver's own. */
START_TEST(small_transfers_are_not_staged) {
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 512 * KiB));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 768 * KiB));
  size_t n = 1024 * KiB;
  cl_mem m = test_buffer(&cl, n);
  unsigned char *src = malloc(n), *h = malloc(n);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(h);
  test_fill(src, n, 90);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, src, 0, NULL, NULL));
  clpin_stats s0 = test_stats(pool);
  /* 256 KiB at an odd offset, into an odd address: one pool block. */
  memset(h, 0, n);
  CL_OK(clpin_read(cl.queue, m, 3, h + 1, 256 * KiB, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s1 = test_stats(pool);
  ck_assert_uint_eq(s1.bytes_staged - s0.bytes_staged, 256 * KiB);
  ck_assert_uint_eq(s1.bytes_unpinned - s0.bytes_unpinned, 0);
  ck_assert_int_eq(memcmp(h + 1, src + 3, 256 * KiB), 0);
  ck_assert_int_eq(h[0], 0);
  ck_assert_int_eq(h[256 * KiB + 1], 0);
  test_assert_balanced(&s1);
  /* One byte more: plain, up to CLPIN_STAGE_MIN. */
  CL_OK(clpin_read(cl.queue, m, 0, h, 256 * KiB + 1, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s2 = test_stats(pool);
  ck_assert_uint_eq(s2.bytes_unpinned - s1.bytes_unpinned, 256 * KiB + 1);
  ck_assert_uint_eq(s2.bytes_staged - s1.bytes_staged, 0);
  /* Non-blocking: the driver's own read. */
  cl_event ev = NULL;
  CL_OK(
      clpin_read(cl.queue, m, 0, h, 64 * KiB, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
  clpin_stats s3 = test_stats(pool);
  ck_assert_uint_eq(s3.bytes_unpinned - s2.bytes_unpinned, 64 * KiB);
  CL_OK(clpin_read(cl.queue, m, 0, h, 512 * KiB, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s4 = test_stats(pool);
  ck_assert_uint_eq(s4.bytes_staged - s3.bytes_staged, 512 * KiB);
  ck_assert_int_eq(memcmp(h, src, 512 * KiB), 0);
  /* A write of the same size is below CLPIN_STAGE_MIN_H2D: plain. */
  CL_OK(clpin_write(cl.queue, m, 0, h, 512 * KiB, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s5 = test_stats(pool);
  ck_assert_uint_eq(s5.bytes_unpinned - s4.bytes_unpinned, 512 * KiB);
  CL_OK(clpin_write(cl.queue, m, 0, h, 768 * KiB, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s6 = test_stats(pool);
  ck_assert_uint_eq(s6.bytes_staged - s5.bytes_staged, 768 * KiB);
  /* And CLPIN_STAGE_MIN still holds for writes when it is the larger. */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_write(cl.queue, m, 0, h, 512 * KiB - 1, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_stats s7 = test_stats(pool);
  ck_assert_uint_eq(s7.bytes_unpinned - s6.bytes_unpinned, 512 * KiB - 1);
  free(src);
  free(h);
  clReleaseMemObject(m);
}
END_TEST

static Suite *engine_suite(void) {
  Suite *s = suite_create("engine");
  TCase *nb = tcase_create("nonblocking");
  tcase_add_checked_fixture(nb, setup, teardown);
  tcase_set_timeout(nb, 600);
  tcase_add_test(nb, nonblocking_returns_before_the_data_moves);
  tcase_add_test(nb, queue_order_is_kept);
  tcase_add_loop_test(nb, user_event_completed_later, 0, 2);
  tcase_add_loop_test(nb, user_event_failed_later, 0, 2);
  suite_add_tcase(s, nb);
  /* Its own case: check_engine_failrace runs it alone (CK_RUN_CASE). */
  TCase *race = tcase_create("failrace");
  tcase_add_checked_fixture(race, setup, teardown);
  tcase_add_test(race, user_event_failed_mid_propagation);
  suite_add_tcase(s, race);
  TCase *threads = tcase_create("threads");
  tcase_add_checked_fixture(threads, setup, teardown);
  tcase_set_timeout(threads, 600);
  tcase_add_loop_test(threads, duplex_two_threads, 0, 2);
  tcase_add_test(threads, eight_queues);
  suite_add_tcase(s, threads);
  TCase *paths = tcase_create("paths");
  tcase_add_checked_fixture(paths, setup, teardown);
  tcase_add_test(paths, auto_takes_the_plain_path_on_unified_memory);
  tcase_add_test(paths, small_transfers_are_not_staged);
  suite_add_tcase(s, paths);
  return s;
}

int main(void) { return test_run_suite(engine_suite()); }
