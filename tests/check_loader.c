/* SPDX-License-Identifier: Apache-2.0 */
/* The loader (src/loader.c): byte-exact batches in every shape of loader,
 * order, epochs, fill errors, cancel, sharding, several queues, the
 * never-a-wrong-byte rules (a slot refilled only after its upload, a device
 * buffer uploaded into only after its done events) and a context released
 * while a loader runs. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static test_cl cl;

/* Time limits stretch under valgrind (stage 22-valgrind): it runs one
 * thread at a time, 20-50 times slower. */
static double slack(void) {
  const char *p = getenv("LD_PRELOAD");
  return p && strstr(p, "vgpreload") ? 20.0 : 1.0;
}

static void setup(void) { test_cl_open(&cl); }
static void teardown(void) { test_shutdown_close(&cl); }

/* The fill every test uses: batch i is test_pattern(i + 1) over `bytes(i)`
 * bytes; knobs for errors, the end and slowness. */
typedef struct {
  size_t capacity;
  size_t short_every; /* every such batch uses fewer bytes (0: never) */
  uint64_t end_at;    /* fill returns CLPIN_END from here (UINT64_MAX: never) */
  uint64_t fail_at;   /* fill returns CL_INVALID_VALUE at this index */
  long sleep_us;      /* each fill sleeps this long */
  bool overfill;      /* set *used above capacity at fail_at instead */
  atomic_uint calls;
  atomic_uint inside;   /* fills running now */
  atomic_uint bad_args; /* fills called with *used != capacity or another capacity */
} fillspec;

static size_t bytes_of(const fillspec *f, uint64_t i) {
  if (f->short_every && i % f->short_every == 1)
    return f->capacity / 2 + 1;
  return f->capacity;
}

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  fillspec *f = user;
  atomic_fetch_add(&f->calls, 1);
  /* No ck_assert on a loader thread (Check's messages belong to the test's
   * thread): a wrong argument is counted and asserted by the test. */
  if (*used != capacity || capacity != f->capacity)
    atomic_fetch_add(&f->bad_args, 1);
  if (index >= f->end_at)
    return CLPIN_END;
  if (index == f->fail_at) {
    if (f->overfill) {
      *used = capacity + 1;
      return CL_SUCCESS;
    }
    return CL_INVALID_VALUE;
  }
  atomic_fetch_add(&f->inside, 1);
  if (f->sleep_us)
    test_sleep_us(f->sleep_us);
  size_t n = bytes_of(f, index);
  test_fill(host, n, (unsigned)index + 1);
  *used = n;
  atomic_fetch_sub(&f->inside, 1);
  return CL_SUCCESS;
}

static fillspec spec(size_t capacity) {
  fillspec f;
  memset(&f, 0, sizeof f);
  f.capacity = capacity;
  f.end_at = UINT64_MAX;
  f.fail_at = UINT64_MAX;
  return f;
}

static clpin_loader_desc desc_of(fillspec *f, uint64_t batches, unsigned depth, unsigned workers) {
  return test_loader_desc(f->capacity, batches, depth, workers, fill, f);
}

/* A loader of desc_of()'s desc on the suite's queue; fails the test when
 * clpin_loader_create() does. */
static clpin_loader *loader_of(fillspec *f, uint64_t batches, unsigned depth, unsigned workers) {
  clpin_loader_desc d = desc_of(f, batches, depth, workers);
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  return L;
}

/* Read batch b back (after its upload) and check it is index's bytes. */
static void check_batch(fillspec *f, clpin_batch *b) {
  ck_assert_uint_eq(atomic_load(&f->bad_args), 0);
  uint64_t i = clpin_batch_index(b);
  size_t n = clpin_batch_bytes(b);
  ck_assert_uint_eq(n, bytes_of(f, i));
  unsigned char *back = malloc(n);
  ck_assert_ptr_nonnull(back);
  cl_event ev = clpin_batch_event(b);
  ck_assert_ptr_nonnull(ev);
  ck_assert_ptr_nonnull(clpin_batch_buffer(b));
  ck_assert_int_eq(clEnqueueReadBuffer(clpin_batch_queue(b), clpin_batch_buffer(b), CL_TRUE, 0, n,
                                       back, 1, &ev, NULL),
                   CL_SUCCESS);
  size_t bad = test_check(back, n, (unsigned)i + 1);
  ck_assert_msg(bad == (size_t)-1, "batch %llu: byte %zu differs", (unsigned long long)i, bad);
  free(back);
}

static struct clpin_loader_stats lstats(clpin_loader *L) {
  struct clpin_loader_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  ck_assert_int_eq(clpin_loader_stats(L, &s), CL_SUCCESS);
  return s;
}

/* Every shape of loader: sizes, depths, workers; ordered and byte-exact;
 * the end; steady state makes nothing. */
static const struct {
  size_t bytes;
  unsigned depth, workers;
} shapes[] = {{4096, 1, 1}, {1 << 20, 2, 3}, {(1 << 20) + 13, 3, 2}, {100, 0, 0}, {3 << 20, 2, 4}};

START_TEST(ordered_batches_are_exact) {
  fillspec f = spec(shapes[_i].bytes);
  f.short_every = 3;
  const uint64_t n = 17;
  clpin_loader *L = loader_of(&f, n, shapes[_i].depth, shapes[_i].workers);
  struct clpin_loader_stats s0 = lstats(L);
  unsigned depth = shapes[_i].depth ? shapes[_i].depth : 2;
  ck_assert_uint_eq(s0.buffers_created, depth + 1);
  ck_assert_uint_eq(s0.buffers, depth + 1);
  ck_assert_uint_ge(s0.slots, 2);
  ck_assert_uint_eq(s0.pinned_allocations, s0.slots);
  for (uint64_t i = 0; i < n; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    ck_assert_ptr_eq(clpin_batch_queue(b), cl.queue);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clpin_batch *b = (clpin_batch *)&f; /* must be overwritten */
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  ck_assert_ptr_null(b);
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  struct clpin_loader_stats s1 = lstats(L);
  ck_assert_uint_eq(s1.batches, n);
  ck_assert_uint_eq(s1.pinned_allocations, s0.pinned_allocations);
  ck_assert_uint_eq(s1.buffers_created, s0.buffers_created);
  ck_assert_uint_eq(s1.failed, 0);
  ck_assert_uint_eq(atomic_load(&f.calls), n); /* every batch filled once */
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

START_TEST(unordered_delivers_each_once) {
  fillspec f = spec(64 * 1024);
  const uint64_t n = 40;
  clpin_loader_desc d = desc_of(&f, n, 2, 4);
  d.flags = CLPIN_LOADER_UNORDERED;
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  unsigned char seen[40] = {0};
  for (uint64_t k = 0; k < n; k++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    uint64_t i = clpin_batch_index(b);
    ck_assert_uint_lt(i, n);
    ck_assert_msg(!seen[i], "batch %llu twice", (unsigned long long)i);
    seen[i] = 1;
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* batches 0: the epoch ends where fill says so; then reset starts the next
 * epoch with the same memory. Run ordered and unordered. */
START_TEST(fill_ends_the_epoch_and_reset_restarts) {
  fillspec f = spec(8192);
  f.end_at = 7;
  clpin_loader_desc d = desc_of(&f, 0, 2, 3);
  if (_i)
    d.flags = CLPIN_LOADER_UNORDERED;
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  struct clpin_loader_stats s0 = lstats(L);
  for (int epoch = 0; epoch < 3; epoch++) {
    unsigned mask = 0;
    for (uint64_t i = 0; i < 7; i++) {
      clpin_batch *b = NULL;
      ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
      if (!_i)
        ck_assert_uint_eq(clpin_batch_index(b), i);
      mask |= 1u << clpin_batch_index(b);
      check_batch(&f, b);
      ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
    }
    ck_assert_uint_eq(mask, 0x7f);
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
    ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
  }
  struct clpin_loader_stats s1 = lstats(L);
  ck_assert_uint_eq(s1.batches, 21);
  ck_assert_uint_eq(s1.pinned_allocations, s0.pinned_allocations);
  ck_assert_uint_eq(s1.buffers_created, s0.buffers_created);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* A reset in the middle of an epoch drops what was not delivered; a batch
 * the caller holds stays valid. */
START_TEST(reset_mid_epoch) {
  fillspec f = spec(16384);
  clpin_loader *L = loader_of(&f, 10, 2, 2);
  clpin_batch *held = NULL, *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &held), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  test_sleep_us(20000);
  ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
  check_batch(&f, held);
  ck_assert_int_eq(clpin_batch_release(held, 0, NULL), CL_SUCCESS);
  for (uint64_t i = 0; i < 10; i++) {
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* A failing fill at the first, a middle or the last batch: delivered once,
 * in place, with its index; nothing else lost. _i & 1: *used too large. */
START_TEST(fill_errors_are_delivered_in_place) {
  const uint64_t n = 9, at[] = {0, 4, 8};
  fillspec f = spec(4096 * 3);
  f.fail_at = at[_i / 2];
  f.overfill = _i & 1;
  cl_int want = f.overfill ? CLPIN_ERR_INVALID_SIZE : CL_INVALID_VALUE;
  clpin_loader *L = loader_of(&f, n, 2, 3);
  for (uint64_t i = 0; i < n; i++) {
    clpin_batch *b = NULL;
    cl_int rc = clpin_loader_next(L, &b);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    if (i == f.fail_at) {
      ck_assert_int_eq(rc, want);
      ck_assert_ptr_null(clpin_batch_buffer(b));
      ck_assert_ptr_null(clpin_batch_event(b));
    } else {
      ck_assert_int_eq(rc, CL_SUCCESS);
      check_batch(&f, b);
    }
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  struct clpin_loader_stats s = lstats(L);
  ck_assert_uint_eq(s.failed, 1);
  ck_assert_uint_eq(s.batches, n - 1);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

typedef struct {
  clpin_loader *L;
  cl_int rc;
  double t_end;
  atomic_int started;
} waiter;

static void *wait_next(void *arg) {
  waiter *w = arg;
  atomic_store(&w->started, 1);
  for (;;) {
    clpin_batch *b = NULL;
    cl_int rc = clpin_loader_next(w->L, &b);
    if (rc != CL_SUCCESS) {
      w->rc = rc;
      break;
    }
    clpin_batch_release(b, 0, NULL);
  }
  w->t_end = test_now();
  return NULL;
}

/* cancel from another thread while fills and uploads run: every waiter
 * returns CLPIN_ERR_CANCELLED within 100 ms plus one fill; destroy under
 * load is as quick; then reset brings it back. */
START_TEST(cancel_wakes_waiters) {
  fillspec f = spec(256 * 1024);
  f.sleep_us = 30000;
  clpin_loader *L = loader_of(&f, 0, 2, 3);
  waiter w[3];
  pthread_t th[3];
  for (int k = 0; k < 3; k++) {
    memset(&w[k], 0, sizeof w[k]);
    w[k].L = L;
    ck_assert_int_eq(pthread_create(&th[k], NULL, wait_next, &w[k]), 0);
  }
  test_sleep_us(100000);
  double t0 = test_now();
  ck_assert_int_eq(clpin_loader_cancel(L), CL_SUCCESS);
  for (int k = 0; k < 3; k++) {
    pthread_join(th[k], NULL);
    ck_assert_int_eq(w[k].rc, CLPIN_ERR_CANCELLED);
    ck_assert_msg(w[k].t_end - t0 < (0.100 + 0.030 + 0.5) * slack(), "waiter took %.3f s",
                  w[k].t_end - t0);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_ERR_CANCELLED);
  ck_assert_ptr_null(b);
  /* reset ends the cancel */
  ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  ck_assert_uint_eq(clpin_batch_index(b), 0);
  check_batch(&f, b);
  ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  /* destroy while workers fill */
  test_sleep_us(10000);
  t0 = test_now();
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  double took = test_now() - t0;
  ck_assert_msg(took < (0.100 + 0.030 + 0.5) * slack(), "destroy took %.3f s", took);
}
END_TEST

/* clpin_loader_next_timed: a slow fill makes it return in time with no
 * batch and takes nothing (the next call gets batch 0, then every batch in
 * order); a ready batch comes at once; the end and bad arguments as next. */
START_TEST(next_timed_returns_in_time) {
  fillspec f = spec(4096);
  f.sleep_us = 400000;
  const uint64_t n = 3;
  clpin_loader *L = loader_of(&f, n, 2, 1);
  clpin_batch *b = (clpin_batch *)&f; /* must be overwritten */
  double t0 = test_now();
  ck_assert_int_eq(clpin_loader_next_timed(L, &b, 50000000u), CL_SUCCESS);
  double took = test_now() - t0;
  ck_assert_ptr_null(b);
  ck_assert_msg(took >= 0.045 && took < 0.3 * slack(), "a 50 ms wait took %.3f s", took);
  ck_assert_int_eq(clpin_loader_next_timed(L, &b, 0), CL_SUCCESS); /* a poll */
  ck_assert_ptr_null(b);
  for (uint64_t i = 0; i < n; i++) {
    int empty = 0;
    while (clpin_loader_next_timed(L, &b, 20000000u) == CL_SUCCESS && !b)
      empty++;
    ck_assert_ptr_nonnull(b);
    ck_assert_int_ge(empty, 1); /* each fill takes 400 ms: some waits ran out */
    ck_assert_uint_eq(clpin_batch_index(b), i);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  ck_assert_int_eq(clpin_loader_next_timed(L, &b, 1000000000u), CLPIN_END);
  ck_assert_ptr_null(b);
  struct clpin_loader_stats s = lstats(L);
  ck_assert_uint_eq(s.batches, n);
  ck_assert_uint_eq(s.failed, 0);
  /* After reset the fills run ahead: a ready batch comes without waiting. */
  f.sleep_us = 0;
  ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
  test_sleep_us(200000);
  t0 = test_now();
  ck_assert_int_eq(clpin_loader_next_timed(L, &b, UINT64_MAX), CL_SUCCESS);
  ck_assert_msg(test_now() - t0 < 0.1 * slack(), "a ready batch waited");
  ck_assert_uint_eq(clpin_batch_index(b), 0);
  ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_cancel(L), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_next_timed(L, &b, UINT64_MAX), CLPIN_ERR_CANCELLED);
  ck_assert_int_eq(clpin_loader_next_timed(L, NULL, 0), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_next_timed(NULL, &b, 0), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(b);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* Never a wrong byte, 1: a slot is refilled only after its upload read it.
 * The upload of batch 2 waits for a user event (the done event of batch 0's
 * buffer); the only free slot for batch 3 is batch 2's. If the worker did
 * not wait for that upload, batch 3's bytes would reach batch 2's buffer. */
START_TEST(slot_waits_for_its_upload) {
  fillspec f = spec(64 * 1024);
  clpin_loader *L = loader_of(&f, 6, 1, 1); /* 2 buffers, 2 slots */
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  clpin_batch *b0 = NULL, *b1 = NULL, *b2 = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b0), CL_SUCCESS);
  check_batch(&f, b0);
  /* Batch 1 is read back before any gated upload is queued: POCL 3.1 can
   * hold an earlier command of an in-order queue behind a later one that
   * waits for a user event. */
  ck_assert_int_eq(clpin_loader_next(L, &b1), CL_SUCCESS);
  check_batch(&f, b1);
  ck_assert_int_eq(clpin_batch_release(b0, 1, &gate), CL_SUCCESS); /* batch 2 goes here */
  ck_assert_int_eq(clpin_batch_release(b1, 0, NULL), CL_SUCCESS);
  /* Batch 3 is filled into a free slot: batch 1's; batch 4's slot would be
   * batch 2's, whose upload still waits for the gate. */
  test_sleep_us(100000);
  ck_assert_int_eq(clpin_loader_next(L, &b2), CL_SUCCESS);
  ck_assert_uint_eq(clpin_batch_index(b2), 2);
  cl_int st = 0;
  clGetEventInfo(clpin_batch_event(b2), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  ck_assert_int_gt(st, CL_COMPLETE); /* held back by the gate */
  test_sleep_us(100000);
  clSetUserEventStatus(gate, CL_COMPLETE);
  check_batch(&f, b2);
  ck_assert_int_eq(clpin_batch_release(b2, 0, NULL), CL_SUCCESS);
  for (uint64_t i = 3; i < 6; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clReleaseEvent(gate);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* Never a wrong byte, 2: a device buffer is uploaded into again only after
 * the done events of its release: while the caller's (gated) work runs, the
 * buffer still holds the batch it read. _i 1: with CLPIN_LOADER_HOST_DONE,
 * the loader thread waits for them on the host. */
START_TEST(buffer_waits_for_done_events) {
  fillspec f = spec(32 * 1024);
  clpin_loader_desc d = desc_of(&f, 8, 1, 2); /* 2 buffers */
  d.flags = _i ? CLPIN_LOADER_HOST_DONE : 0;
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  cl_int err;
  cl_event gate = clCreateUserEvent(cl.ctx, &err);
  ck_assert_int_eq(err, CL_SUCCESS);
  clpin_batch *b0 = NULL, *b1 = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b0), CL_SUCCESS);
  check_batch(&f, b0);
  ck_assert_int_eq(clpin_loader_next(L, &b1), CL_SUCCESS);
  check_batch(&f, b1); /* before any gated upload is queued (see above) */
  cl_mem buf0 = clpin_batch_buffer(b0);
  clRetainMemObject(buf0);
  ck_assert_int_eq(clpin_batch_release(b0, 1, &gate), CL_SUCCESS);
  ck_assert_int_eq(clpin_batch_release(b1, 0, NULL), CL_SUCCESS);
  test_sleep_us(150000); /* batch 2 is filled, its upload into buf0 waits */
  unsigned char *back = malloc(f.capacity);
  ck_assert_int_eq(clEnqueueReadBuffer(cl.queue, buf0, CL_TRUE, 0, f.capacity, back, 0, NULL, NULL),
                   CL_SUCCESS);
  ck_assert_msg(test_check(back, f.capacity, 1) == (size_t)-1,
                "buffer 0 was overwritten before its done event");
  clSetUserEventStatus(gate, CL_COMPLETE);
  for (uint64_t i = 2; i < 8; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  free(back);
  clReleaseMemObject(buf0);
  clReleaseEvent(gate);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* Two shards see disjoint batches whose union is the epoch. */
START_TEST(shards_split_the_epoch) {
  const uint64_t n = 11;
  fillspec f = spec(8192);
  unsigned char seen[11] = {0};
  for (unsigned r = 0; r < 2; r++) {
    clpin_loader_desc d = desc_of(&f, n, 2, 2);
    d.shard = r;
    d.nshards = 2;
    clpin_loader *L = NULL;
    ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
    for (;;) {
      clpin_batch *b = NULL;
      cl_int rc = clpin_loader_next(L, &b);
      if (rc == CLPIN_END)
        break;
      ck_assert_int_eq(rc, CL_SUCCESS);
      uint64_t i = clpin_batch_index(b);
      ck_assert_uint_eq(i % 2, r);
      ck_assert(!seen[i]);
      seen[i] = 1;
      check_batch(&f, b);
      clpin_batch_release(b, 0, NULL);
    }
    ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  }
  for (uint64_t i = 0; i < n; i++)
    ck_assert_msg(seen[i], "batch %llu seen by no shard", (unsigned long long)i);
}
END_TEST

/* Several queues: round robin, in order, each batch in its queue's context.
 * Queues on every device of the platform (POCL_DEVICES="pthread pthread":
 * two), in one context and in a context each. */
START_TEST(several_queues_round_robin) {
  cl_device_id devs[4];
  cl_uint ndev = 0;
  ck_assert_int_eq(clGetDeviceIDs(cl.platform, CL_DEVICE_TYPE_ALL, 4, devs, &ndev), CL_SUCCESS);
  if (ndev > 4)
    ndev = 4;
  cl_int err;
  cl_context ctx[3] = {NULL, NULL, NULL};
  cl_command_queue q[3];
  const unsigned nq = 3;
  if (_i == 0) {
    ctx[0] = clCreateContext(NULL, ndev, devs, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    for (unsigned k = 0; k < nq; k++) {
      q[k] = clCreateCommandQueue(ctx[0], devs[k % ndev], 0, &err);
      ck_assert_int_eq(err, CL_SUCCESS);
    }
  } else {
    for (unsigned k = 0; k < nq; k++) {
      ctx[k] = clCreateContext(NULL, 1, &devs[k % ndev], NULL, NULL, &err);
      ck_assert_int_eq(err, CL_SUCCESS);
      q[k] = clCreateCommandQueue(ctx[k], devs[k % ndev], 0, &err);
      ck_assert_int_eq(err, CL_SUCCESS);
    }
  }
  fillspec f = spec(48 * 1024);
  const uint64_t n = 20;
  clpin_loader_desc d = desc_of(&f, n, 2, 3);
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(nq, q, &d, &L), CL_SUCCESS);
  for (uint64_t i = 0; i < n; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    ck_assert_ptr_eq(clpin_batch_queue(b), q[i % nq]);
    check_batch(&f, b);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  ck_assert_uint_eq(lstats(L).buffers_created, nq * 3);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  for (unsigned k = 0; k < nq; k++) {
    clReleaseCommandQueue(q[k]);
    if (ctx[k]) {
      clpin_pool_release_context(ctx[k]);
      clReleaseContext(ctx[k]);
    }
  }
}
END_TEST

/* Bad input: clear codes, nothing made, nothing lost. */
START_TEST(bad_arguments) {
  fillspec f = spec(4096);
  clpin_loader_desc d = desc_of(&f, 4, 1, 1);
  clpin_loader *L = (clpin_loader *)&f;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, NULL, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(L);
  ck_assert_int_eq(clpin_loader_create(0, &cl.queue, &d, &L), CL_INVALID_COMMAND_QUEUE);
  cl_command_queue nullq = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &nullq, &d, &L), CL_INVALID_COMMAND_QUEUE);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "queue"));
  clpin_loader_desc e = d;
  e.struct_size = 8;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  e = d;
  e.fill = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  e = d;
  e.batch_bytes = 0;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_SIZE);
  e = d;
  e.batch_bytes = (size_t)1 << 62;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_SIZE);
  e = d;
  e.nshards = 2;
  e.shard = 2;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  e = d;
  e.flags = 1u << 5;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(L);
  ck_assert_int_eq(clpin_loader_next(NULL, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_cancel(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_reset(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_destroy(NULL), CL_SUCCESS);
  ck_assert_int_eq(clpin_batch_release(NULL, 0, NULL), CL_SUCCESS);
  ck_assert_uint_eq(clpin_batch_index(NULL), UINT64_MAX);
  ck_assert_ptr_null(clpin_batch_buffer(NULL));
  ck_assert_str_ne(clpin_strerror(CLPIN_END), "unknown error code");
  ck_assert_str_ne(clpin_strerror(CLPIN_ERR_CANCELLED), "unknown error code");

  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  clpin_batch *b0 = NULL, *b1 = NULL, *b2 = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b0), CL_SUCCESS);
  ck_assert_int_eq(clpin_batch_release(b0, 1, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "num_done is 1 but done is NULL"));
  cl_event nullev = NULL;
  ck_assert_int_eq(clpin_batch_release(b0, 1, &nullev), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_next(L, &b1), CL_SUCCESS);
  /* The caller holds both buffers: next() says so instead of hanging. */
  ck_assert_int_eq(clpin_loader_next(L, &b2), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "release"));
  ck_assert_int_eq(clpin_batch_release(b0, 0, NULL), CL_SUCCESS);
  ck_assert_int_eq(clpin_batch_release(b0, 0, NULL), CLPIN_ERR_INVALID_ARGUMENT); /* twice */
  ck_assert_int_eq(clpin_loader_next(L, &b2), CL_SUCCESS);
  ck_assert_uint_eq(clpin_batch_index(b2), 2);
  check_batch(&f, b2);
  clpin_batch_release(b1, 0, NULL);
  clpin_batch_release(b2, 0, NULL);
  struct clpin_loader_stats s;
  s.struct_size = 4;
  ck_assert_int_eq(clpin_loader_stats(L, &s), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* The versioned-struct rule and the loader's flag family (clpin.h, "API
 * rules"): a 0.2-sized desc takes bit 0 as 0.2's CLPIN_LOADER_UNORDERED; a
 * desc of today's size refuses it (CLPIN_PIN_MEMORY's bit); a larger desc is
 * taken when its extra bytes are zero, refused when not; stats fill up to
 * the caller's size. */
START_TEST(struct_and_flag_rules) {
  fillspec f = spec(4096);
  clpin_loader *L = NULL;
  /* A caller newer than 0.2 (here: a desc with zeroed bytes past ours):
   * bit 0 is CLPIN_PIN_MEMORY, refused. */
  struct {
    clpin_loader_desc d;
    unsigned char extra[64];
  } big;
  memset(&big, 0, sizeof big);
  big.d = desc_of(&f, 3, 2, 2);
  big.d.struct_size = sizeof big;
  big.d.flags = CLPIN_PIN_MEMORY;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "CLPIN_PIN_MEMORY"));
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "which this call does not take"));
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "it takes the loader flags"));
  big.d.flags = CLPIN_READ;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "CLPIN_READ"));
  ck_assert_ptr_null(L);
  big.d.flags = 0;

  clpin_loader_desc d = desc_of(&f, 6, 2, 2);

  /* 0.2's size: bit 0 is unordered, and batches all arrive, exact. */
  d.flags = 1u;
  d.struct_size = CLPIN_LOADER_DESC_SIZE_V0_2;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  unsigned seen = 0;
  clpin_batch *b = NULL;
  while (clpin_loader_next(L, &b) == CL_SUCCESS) {
    check_batch(&f, b);
    seen |= 1u << clpin_batch_index(b);
    clpin_batch_release(b, 0, NULL);
  }
  ck_assert_uint_eq(seen, 0x3f);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  L = NULL;
  d.struct_size = CLPIN_LOADER_DESC_SIZE_V0_2 - 1;
  d.flags = 0;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "first released layout"));

  /* A caller newer than the library: zero extra bytes are taken. */
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  check_batch(&f, b);
  clpin_batch_release(b, 0, NULL);

  /* Received stats: 0.2's size, a larger one (zeroed past ours), too small. */
  struct {
    struct clpin_loader_stats s;
    uint64_t more[4];
  } st;
  memset(&st, 0xab, sizeof st);
  st.s.struct_size = sizeof st;
  ck_assert_int_eq(clpin_loader_stats(L, &st.s), CL_SUCCESS);
  ck_assert_uint_eq(st.s.struct_size, sizeof st);
  ck_assert_uint_eq(st.more[3], 0);
  ck_assert_uint_eq(st.s.batches, 1);
  memset(&st, 0xab, sizeof st);
  st.s.struct_size = CLPIN_LOADER_STATS_SIZE_V0_2;
  ck_assert_int_eq(clpin_loader_stats(L, &st.s), CL_SUCCESS);
  ck_assert_uint_eq(st.s.workers, 2);
  st.s.struct_size = CLPIN_LOADER_STATS_SIZE_V0_2 - 8;
  ck_assert_int_eq(clpin_loader_stats(L, &st.s), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  L = NULL;

  big.extra[17] = 1;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "not zero"));
  ck_assert_ptr_null(L);
}
END_TEST

/* Destroy with batches still held and never released: no leak, no hang. */
START_TEST(destroy_with_held_batches) {
  fillspec f = spec(4096);
  clpin_loader *L = loader_of(&f, 0, 2, 2);
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
}
END_TEST

/* The context's pool released while a loader runs: no crash and no freed
 * memory touched (ASan); batches delivered before are exact, after it they
 * fail with CLPIN_ERR_POOL_RELEASED (or stay exact); destroy is clean.
 * _i = 1: with CLPIN_LOADER_WAIT_UPLOADS, where each thread (not an event
 * callback) leaves the slot's pool once it waited for the upload. */
typedef struct {
  cl_context ctx;
  atomic_int stop;
  int releases;
} releaser;

static void *release_loop(void *arg) {
  releaser *r = arg;
  while (!atomic_load(&r->stop)) {
    test_sleep_us(3000);
    ck_assert_int_eq(clpin_pool_release_context(r->ctx), CL_SUCCESS);
    r->releases++;
  }
  return NULL;
}

START_TEST(release_races_loader) {
  int rounds = (int)test_env_count("LIFECYCLE_ROUNDS", slack() > 1 ? 2 : 6);
  for (int round = 0; round < rounds; round++) {
    fillspec f = spec(128 * 1024);
    clpin_loader_desc d = desc_of(&f, 0, 2, 3);
    if (_i == 1)
      d.flags |= CLPIN_LOADER_WAIT_UPLOADS;
    clpin_loader *L = NULL;
    ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
    releaser r = {.ctx = cl.ctx};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_loop, &r), 0);
    int ok = 0, failed = 0;
    for (int k = 0; k < 60; k++) {
      clpin_batch *b = NULL;
      cl_int rc = clpin_loader_next(L, &b);
      if (rc == CL_SUCCESS) {
        check_batch(&f, b);
        ok++;
      } else {
        ck_assert_int_eq(rc, CLPIN_ERR_POOL_RELEASED);
        failed++;
      }
      clpin_batch_release(b, 0, NULL);
    }
    atomic_store(&r.stop, 1);
    pthread_join(th, NULL);
    ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
    ck_assert_int_eq(ok + failed, 60);
  }
}
END_TEST

static Suite *loader_suite(void) {
  Suite *s = suite_create("loader");
  TCase *basic = test_tcase(s, "basic", setup, teardown, 300);
  tcase_add_loop_test(basic, ordered_batches_are_exact, 0, sizeof shapes / sizeof shapes[0]);
  tcase_add_test(basic, unordered_delivers_each_once);
  tcase_add_loop_test(basic, fill_ends_the_epoch_and_reset_restarts, 0, 2);
  tcase_add_test(basic, reset_mid_epoch);
  tcase_add_loop_test(basic, fill_errors_are_delivered_in_place, 0, 6);
  tcase_add_test(basic, shards_split_the_epoch);
  tcase_add_loop_test(basic, several_queues_round_robin, 0, 2);
  tcase_add_test(basic, bad_arguments);
  tcase_add_test(basic, struct_and_flag_rules);
  tcase_add_test(basic, destroy_with_held_batches);
  TCase *order = test_tcase(s, "order", setup, teardown, 300);
  tcase_add_test(order, slot_waits_for_its_upload);
  tcase_add_loop_test(order, buffer_waits_for_done_events, 0, 2);
  TCase *threads = test_tcase(s, "threads", setup, teardown, 600);
  tcase_add_test(threads, cancel_wakes_waiters);
  tcase_add_test(threads, next_timed_returns_in_time);
  TCase *races = test_tcase(s, "races", setup, teardown, 600);
  tcase_add_loop_test(races, release_races_loader, 0, 2);
  return s;
}

int main(void) { return test_run_suite(loader_suite()); }
