/* SPDX-License-Identifier: Apache-2.0 */
/* The loader under injected driver failures (tests/faultlayer): every call
 * it makes to create its queues, buffers and pinned slots fails in turn at
 * create, and every upload fails in turn while batches flow. Create fails
 * with the driver's code and leaves nothing behind; a failed upload is
 * delivered as that batch's error, in place, every other batch exact; after
 * destroy no OpenCL object of the loader is alive. */
#include "faultlayer.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static test_cl cl;

static void setup(void) {
  test_cl_open(&cl); /* the ICD loader loads the layer on the first call */
  ck_assert_msg(faultlayer_active(), "the fault layer is not loaded (OPENCL_LAYERS)");
}
static unsigned char *slot_mem; /* desc_of(true)'s slots, freed at teardown */

static void teardown(void) {
  test_shutdown_close(&cl);
  free(slot_mem);
  slot_mem = NULL;
}

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  (void)user;
  test_fill(host, capacity, (unsigned)index + 7);
  *used = capacity;
  return CL_SUCCESS;
}

enum { BYTES = 64 * 1024, BATCHES = 8 };

/* The caller's slot memory (clpin_loader_desc.slot_memory) for the runs
 * that use it: enough for every desc of this file. */
enum { SLOT_MEM_BYTES = 3 * BYTES };

static clpin_loader_desc desc(void) { return test_loader_desc(BYTES, BATCHES, 2, 2, fill, NULL); }

/* desc(), with the slots in the caller's memory when `caller` is set. */
static clpin_loader_desc desc_of(bool caller) {
  clpin_loader_desc d = desc();
  if (caller) {
    size_t n = 0;
    ck_assert_int_eq(clpin_loader_slots(1, &d, &n), CL_SUCCESS);
    ck_assert_uint_le(n * BYTES, SLOT_MEM_BYTES);
    if (!slot_mem)
      slot_mem = malloc(SLOT_MEM_BYTES);
    ck_assert_ptr_nonnull(slot_mem);
    d.slot_memory = slot_mem;
    d.slot_memory_bytes = SLOT_MEM_BYTES;
  }
  return d;
}

/* Live objects before the test, to compare with after it. */
typedef struct {
  long mem, event, queue;
} live_t;

static live_t live_now(void) {
  return (live_t){faultlayer_live(FAULTLAYER_MEM), faultlayer_live(FAULTLAYER_EVENT),
                  faultlayer_live(FAULTLAYER_QUEUE)};
}

/* The pool keeps idle pinned blocks cached: trim them before counting. */
static void assert_nothing_left(live_t before) {
  clpin_pool *pool;
  ck_assert_int_eq(clpin_pool_get(cl.queue, &pool), CL_SUCCESS);
  ck_assert_int_eq(clpin_pool_trim(pool), CL_SUCCESS);
  live_t after = live_now();
  ck_assert_int_eq(after.event, before.event);
  ck_assert_int_eq(after.queue, before.queue);
  ck_assert_int_le(after.mem, before.mem); /* the pool may free what it had cached */
}

static void drain_checked(clpin_loader *L, int *failed) {
  unsigned char *back = malloc(BYTES);
  for (uint64_t i = 0; i < BATCHES; i++) {
    clpin_batch *b = NULL;
    cl_int rc = clpin_loader_next(L, &b);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    if (rc == CL_SUCCESS) {
      cl_event ev = clpin_batch_event(b);
      ck_assert_int_eq(clEnqueueReadBuffer(clpin_batch_queue(b), clpin_batch_buffer(b), CL_TRUE, 0,
                                           BYTES, back, 1, &ev, NULL),
                       CL_SUCCESS);
      ck_assert_msg(test_check(back, BYTES, (unsigned)i + 7) == (size_t)-1, "batch %u differs",
                    (unsigned)i);
    } else {
      ck_assert_int_eq(rc, CL_OUT_OF_RESOURCES);
      ck_assert_ptr_null(clpin_batch_buffer(b));
      (*failed)++;
    }
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  free(back);
}

/* Each creating call of clpin_loader_create fails in turn. */
static const char *const create_calls[] = {"clCreateBuffer", "clCreateCommandQueue",
                                           "clEnqueueMapBuffer", "clGetCommandQueueInfo"};

/* _i: a call of create_calls, with the pool's slots (first round) or the
 * caller's (second). */
START_TEST(create_fails_cleanly) {
  enum { NCALLS = sizeof create_calls / sizeof create_calls[0] };
  clpin_loader_desc d = desc_of(_i >= NCALLS);
  /* Warm the pool's queue and caches so the counts compare like with like. */
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  int entry = faultlayer_entry_index(create_calls[_i % NCALLS]);
  ck_assert_int_ge(entry, 0);
  for (unsigned long nth = 1; nth <= 8; nth++) {
    live_t before = live_now();
    faultlayer_arm(entry, nth, 1, CL_OUT_OF_RESOURCES);
    L = NULL;
    cl_int rc = clpin_loader_create(1, &cl.queue, &d, &L);
    bool fired = faultlayer_fired() > 0;
    faultlayer_disarm();
    if (fired && rc != CL_SUCCESS) {
      ck_assert_ptr_null(L);
      ck_assert_int_eq(rc, CL_OUT_OF_RESOURCES);
    } else {
      /* The fault hit nothing (fewer calls), or a call clpin retries or
       * does without: the loader works. */
      ck_assert_int_eq(rc, CL_SUCCESS);
      int failed = 0;
      drain_checked(L, &failed);
      ck_assert_int_eq(failed, 0);
      ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
    }
    assert_nothing_left(before);
  }
}
END_TEST

/* A loader made and destroyed: the pool's own queues exist from here on, so
 * that live-object counts compare what a test's own loaders leave. */
static void warm_pool(void) {
  clpin_loader_desc w = desc();
  clpin_loader *warm = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &w, &warm), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_destroy(warm), CL_SUCCESS);
}

/* Each upload fails in turn: that batch's error, in place; _i 1: from the
 * caller's slot memory; _i 2: that, with CLPIN_LOADER_WAIT_UPLOADS. */
START_TEST(upload_fails_in_place) {
  int entry = faultlayer_entry_index("clEnqueueWriteBuffer");
  ck_assert_int_ge(entry, 0);
  warm_pool();
  for (unsigned long nth = 1; nth <= BATCHES; nth++) {
    clpin_loader_desc d = desc_of(_i >= 1);
    if (_i == 2)
      d.flags |= CLPIN_LOADER_WAIT_UPLOADS;
    live_t before = live_now();
    faultlayer_arm(entry, nth, 1, CL_OUT_OF_RESOURCES);
    clpin_loader *L = NULL;
    ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
    int failed = 0;
    drain_checked(L, &failed);
    ck_assert_int_eq(failed, 1);
    faultlayer_disarm();
    ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
    assert_nothing_left(before);
  }
}
END_TEST

/* CLPIN_LOADER_WAIT_UPLOADS: the threads wait for their uploads and
 * register no event callback for them (one a batch without it); every batch
 * exact, nothing left. */
START_TEST(wait_uploads_registers_no_callbacks) {
  int entry = faultlayer_entry_index("clSetEventCallback");
  ck_assert_int_ge(entry, 0);
  warm_pool();
  unsigned long calls[2];
  for (int wait = 0; wait < 2; wait++) {
    clpin_loader_desc d = desc_of(true);
    d.flags = wait ? CLPIN_LOADER_WAIT_UPLOADS : 0;
    live_t before = live_now();
    clpin_loader *L = NULL;
    unsigned long c0 = faultlayer_calls(entry); /* its threads upload from create on */
    ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
    int failed = 0;
    drain_checked(L, &failed);
    ck_assert_int_eq(failed, 0);
    calls[wait] = faultlayer_calls(entry) - c0;
    ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
    assert_nothing_left(before);
  }
  /* Without the flag one a batch, with it none. */
  ck_assert_msg(calls[1] == 0 && calls[0] >= BATCHES,
                "event callbacks in an epoch of %d batches: %lu without the flag, %lu with it",
                BATCHES, calls[0], calls[1]);
}
END_TEST

static Suite *loader_faults_suite(void) {
  Suite *s = suite_create("loader_faults");
  TCase *c = test_tcase(s, "faults", setup, teardown, 600);
  tcase_add_loop_test(c, create_fails_cleanly, 0,
                      2 * (int)(sizeof create_calls / sizeof create_calls[0]));
  tcase_add_loop_test(c, upload_fails_in_place, 0, 3);
  tcase_add_test(c, wait_uploads_registers_no_callbacks);
  return s;
}

int main(void) { return test_run_suite(loader_faults_suite()); }
