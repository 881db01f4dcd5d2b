/* SPDX-License-Identifier: Apache-2.0 */
/* The loader on the caller's slot memory (clpin_loader_desc.slot_memory,
 * clpin_loader_slots): fill's `host` is always slot s at slot_memory + s x
 * batch_bytes, batches are byte-exact, nothing is taken from the pool; a
 * 0.2-sized desc keeps working; bad sizes are refused. And the use it
 * exists for: the slots are anonymous shared memory (memfd_create,
 * MAP_SHARED) registered with clpin_host_register, and a process forked
 * after OpenCL is initialised writes every batch into it while the fill
 * callback only tells it which slot and index (the child makes no OpenCL or
 * clpin call). */
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static test_cl cl;

static void setup(void) { test_cl_open(&cl); }
static void teardown(void) { test_shutdown_close(&cl); }

typedef struct {
  unsigned char *base; /* the slot memory */
  size_t batch, nslots;
  size_t stride;            /* desc.slot_stride (0: batch) */
  atomic_uint outside;      /* fills whose host was not a slot of base */
  int to_child, from_child; /* the child's pipes (-1: fill here) */
  pthread_mutex_t pipe_mu;  /* one request on the pipes at a time */
} slotspec;

static cl_int fill(void *user, uint64_t index, void *host, size_t capacity, size_t *used) {
  slotspec *f = user;
  uintptr_t h = (uintptr_t)host, b = (uintptr_t)f->base;
  size_t off = (size_t)(h - b), stride = f->stride ? f->stride : f->batch;
  if (f->base && (h < b || off % stride || off / stride >= f->nslots || capacity != f->batch))
    atomic_fetch_add(&f->outside, 1);
  if (f->to_child < 0) {
    test_fill(host, capacity, (unsigned)index + 3);
    *used = capacity;
    return CL_SUCCESS;
  }
  /* Another process fills the slot: ask it, wait for its answer. */
  uint64_t req[2] = {index, off};
  int32_t reply = -1;
  pthread_mutex_lock(&f->pipe_mu);
  ssize_t w = write(f->to_child, req, sizeof req);
  ssize_t r = w == (ssize_t)sizeof req ? read(f->from_child, &reply, sizeof reply) : -1;
  pthread_mutex_unlock(&f->pipe_mu);
  if (r != (ssize_t)sizeof reply)
    return CL_OUT_OF_RESOURCES; /* the child is gone: this batch fails */
  *used = capacity;
  return reply;
}

static clpin_loader_desc desc_of(slotspec *f, uint64_t batches, unsigned workers) {
  return test_loader_desc(f->batch, batches, 0, workers, fill, f);
}

static void check_batch(clpin_batch *b, size_t n) {
  uint64_t i = clpin_batch_index(b);
  ck_assert_uint_eq(clpin_batch_bytes(b), n);
  unsigned char *back = malloc(n);
  ck_assert_ptr_nonnull(back);
  cl_event ev = clpin_batch_event(b);
  ck_assert_int_eq(clEnqueueReadBuffer(clpin_batch_queue(b), clpin_batch_buffer(b), CL_TRUE, 0, n,
                                       back, 1, &ev, NULL),
                   CL_SUCCESS);
  size_t bad = test_check(back, n, (unsigned)i + 3);
  ck_assert_msg(bad == (size_t)-1, "batch %llu: byte %zu differs", (unsigned long long)i, bad);
  free(back);
}

/* Run one epoch of n batches in order, each checked. */
static void run_epoch(clpin_loader *L, uint64_t n, size_t batch) {
  for (uint64_t i = 0; i < n; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    check_batch(b, batch);
    ck_assert_int_eq(clpin_batch_release(b, 0, NULL), CL_SUCCESS);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
}

/* A loader on f->nslots slots of malloc'ed, registered memory (f->base). */
static clpin_loader *open_on_malloc_slots(slotspec *f, clpin_loader_desc *d) {
  f->base = malloc(f->nslots * f->batch);
  ck_assert_ptr_nonnull(f->base);
  clpin_pool *pool = NULL;
  ck_assert_int_eq(clpin_pool_get(cl.queue, &pool), CL_SUCCESS);
  ck_assert_int_eq(clpin_host_register(pool, f->base, f->nslots * f->batch), CL_SUCCESS);
  d->slot_memory = f->base;
  d->slot_memory_bytes = f->nslots * f->batch;
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, d, &L), CL_SUCCESS);
  return L;
}

static void close_on_malloc_slots(clpin_loader *L, slotspec *f) {
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  ck_assert_int_eq(clpin_host_unregister(f->base), CL_SUCCESS);
  free(f->base);
}

/* _i 0: 3 workers leaving the pool in upload callbacks; 1: 6 workers, each
 * waiting for its own upload (CLPIN_LOADER_WAIT_UPLOADS). */
START_TEST(slots_in_caller_memory) {
  const size_t batch = 4096 * 3 + 17; /* slots that do not start on pages */
  const unsigned workers = _i ? 6 : 3;
  slotspec f = {.batch = batch, .to_child = -1, .from_child = -1};
  clpin_loader_desc d = desc_of(&f, 9, workers);
  if (_i)
    d.flags |= CLPIN_LOADER_WAIT_UPLOADS;
  ck_assert_int_eq(clpin_loader_slots(1, &d, &f.nslots), CL_SUCCESS);
  ck_assert_uint_eq(f.nslots, (workers + 1) * 1);
  size_t two = 0;
  ck_assert_int_eq(clpin_loader_slots(2, &d, &two), CL_SUCCESS);
  ck_assert_uint_eq(two, ((workers + 1) / 2 + 1) * 2); /* ceil(workers / 2) + 1 per queue */
  clpin_loader *L = open_on_malloc_slots(&f, &d);
  for (int epoch = 0; epoch < 2; epoch++) {
    if (epoch)
      ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
    run_epoch(L, 9, batch);
  }
  struct clpin_loader_stats s = {sizeof s};
  ck_assert_int_eq(clpin_loader_stats(L, &s), CL_SUCCESS);
  ck_assert_uint_eq(s.pinned_allocations, 0); /* nothing from the pool */
  ck_assert_uint_eq(s.slots, f.nslots);
  ck_assert_uint_eq(s.slot_bytes, f.nslots * batch);
  ck_assert_uint_eq(s.batches, 18);
  ck_assert_uint_eq(atomic_load(&f.outside), 0);
  close_on_malloc_slots(L, &f);
}
END_TEST

/* desc.slot_stride: slots one stride apart (here whole pages, each slot
 * followed by a page of its own), byte-exact; the memory may end right
 * after the last slot's batch; a stride below the batch, a stride without
 * slot memory, too little memory and an overflowing span are refused. */
START_TEST(slot_stride_spaces_the_slots) {
  const size_t batch = 4096 * 3 + 17, stride = 4096 * 5;
  slotspec f = {.batch = batch, .stride = stride, .to_child = -1, .from_child = -1};
  clpin_loader_desc d = desc_of(&f, 9, 3);
  d.flags |= CLPIN_LOADER_WAIT_UPLOADS;
  ck_assert_int_eq(clpin_loader_slots(1, &d, &f.nslots), CL_SUCCESS);
  size_t span = (f.nslots - 1) * stride + batch;
  f.base = aligned_alloc(4096, f.nslots * stride);
  ck_assert_ptr_nonnull(f.base);
  clpin_pool *pool = NULL;
  ck_assert_int_eq(clpin_pool_get(cl.queue, &pool), CL_SUCCESS);
  ck_assert_int_eq(clpin_host_register(pool, f.base, f.nslots * stride), CL_SUCCESS);
  clpin_loader *L = NULL;
  d.slot_memory = f.base;
  d.slot_stride = stride;
  d.slot_memory_bytes = span - 1;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "slot_memory_bytes"));
  d.slot_stride = batch - 1;
  d.slot_memory_bytes = SIZE_MAX;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "slot_stride is below"));
  d.slot_stride = SIZE_MAX / 2;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CLPIN_ERR_INVALID_SIZE);
  d.slot_memory = NULL;
  d.slot_memory_bytes = 0;
  d.slot_stride = stride;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "slot_stride is set"));
  ck_assert_ptr_null(L);
  d.slot_memory = f.base;
  d.slot_memory_bytes = span;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  for (int epoch = 0; epoch < 2; epoch++) {
    if (epoch)
      ck_assert_int_eq(clpin_loader_reset(L), CL_SUCCESS);
    run_epoch(L, 9, batch);
  }
  struct clpin_loader_stats s = {sizeof s};
  ck_assert_int_eq(clpin_loader_stats(L, &s), CL_SUCCESS);
  ck_assert_uint_eq(s.slot_bytes, f.nslots * stride);
  ck_assert_uint_eq(s.pinned_allocations, 0);
  ck_assert_uint_eq(atomic_load(&f.outside), 0);
  close_on_malloc_slots(L, &f);
}
END_TEST

/* A desc of 0.2's size (before slot_memory) takes the pool's slots; bytes
 * past this version's desc must be zero; sizes are checked. */
START_TEST(desc_sizes) {
  slotspec f = {.batch = 8192, .to_child = -1, .from_child = -1};
  f.base = NULL;
  f.nslots = 0;
  struct {
    clpin_loader_desc d;
    unsigned char extra[16];
  } big;
  memset(&big, 0, sizeof big);
  big.d = desc_of(&f, 3, 2);
  clpin_loader *L = NULL;

  /* 0.2's size: whatever lies past it is not read. */
  clpin_loader_desc old = desc_of(&f, 3, 2);
  old.struct_size = CLPIN_LOADER_DESC_SIZE_V0_2;
  old.slot_memory = (void *)&f; /* garbage a 0.2 caller never set */
  old.slot_memory_bytes = 1;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &old, &L), CL_SUCCESS);
  struct clpin_loader_stats s = {sizeof s};
  ck_assert_int_eq(clpin_loader_stats(L, &s), CL_SUCCESS);
  ck_assert_uint_eq(s.pinned_allocations, s.slots);
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
  check_batch(b, 8192);
  clpin_batch_release(b, 0, NULL);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  size_t n = 0;
  ck_assert_int_eq(clpin_loader_slots(1, &old, &n), CL_SUCCESS);
  ck_assert_uint_eq(n, 3);

  /* A newer, larger desc: zero extra bytes are fine, others refused. */
  big.d.struct_size = sizeof big;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CL_SUCCESS);
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  big.extra[7] = 1;
  L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &big.d, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_null(L);
  ck_assert_int_eq(clpin_loader_slots(1, &big.d, &n), CLPIN_ERR_INVALID_ARGUMENT);

  clpin_loader_desc e = desc_of(&f, 3, 2);
  e.struct_size = CLPIN_LOADER_DESC_SIZE_V0_2 - 1;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(clpin_last_error_detail(), "first released"));
  ck_assert_int_eq(clpin_loader_slots(1, &e, &n), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_slots(0, &big.d, &n), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_slots(1, NULL, &n), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_loader_slots(1, &old, NULL), CLPIN_ERR_INVALID_ARGUMENT);

  /* Slot memory: too small, or bytes without memory. */
  unsigned char small[3 * 8192 - 1];
  e = desc_of(&f, 3, 2);
  e.slot_memory = small;
  e.slot_memory_bytes = sizeof small;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_SIZE);
  e.slot_memory = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_ARGUMENT);
  e.slot_memory = small;
  e.batch_bytes = SIZE_MAX / 2;
  e.slot_memory_bytes = SIZE_MAX;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &e, &L), CLPIN_ERR_INVALID_SIZE);
  ck_assert_ptr_null(L);
}
END_TEST

/* The child: serves (index, offset) requests until its pipe closes. */
static void child_serve(unsigned char *base, size_t batch, int in, int out) {
  uint64_t req[2];
  while (read(in, req, sizeof req) == (ssize_t)sizeof req) {
    int32_t rc = CL_SUCCESS;
    if (req[0] == 5)
      rc = CL_INVALID_VALUE; /* a failure travels back as that batch's code */
    else
      test_fill(base + req[1], batch, (unsigned)req[0] + 3);
    if (write(out, &rc, sizeof rc) != (ssize_t)sizeof rc)
      break;
  }
  _exit(0);
}

START_TEST(a_forked_process_fills_shared_slots) {
  const size_t batch = 65536 + 5;
  slotspec f = {.batch = batch};
  pthread_mutex_init(&f.pipe_mu, NULL);
  clpin_loader_desc d = desc_of(&f, 12, 2);
  ck_assert_int_eq(clpin_loader_slots(1, &d, &f.nslots), CL_SUCCESS);
  size_t bytes = f.nslots * batch;
  int fd = memfd_create("clpin-test-slots", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
  f.base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(f.base, MAP_FAILED);
  clpin_pool *pool = NULL;
  ck_assert_int_eq(clpin_pool_get(cl.queue, &pool), CL_SUCCESS);
  ck_assert_int_eq(clpin_host_register(pool, f.base, bytes), CL_SUCCESS);

  /* Forked after OpenCL is initialised: the child only writes memory. */
  int req[2], rep[2];
  ck_assert_int_eq(pipe(req), 0);
  ck_assert_int_eq(pipe(rep), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(req[1]);
    close(rep[0]);
    /* Its own mapping of the memfd, as a process that did not inherit the
     * parent's would make. */
    unsigned char *mine = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mine == MAP_FAILED)
      _exit(3);
    child_serve(mine, batch, req[0], rep[1]);
  }
  close(req[0]);
  close(rep[1]);
  f.to_child = req[1];
  f.from_child = rep[0];
  d.slot_memory = f.base;
  d.slot_memory_bytes = bytes;
  clpin_loader *L = NULL;
  ck_assert_int_eq(clpin_loader_create(1, &cl.queue, &d, &L), CL_SUCCESS);
  for (uint64_t i = 0; i < 12; i++) {
    clpin_batch *b = NULL;
    cl_int rc = clpin_loader_next(L, &b);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    if (i == 5) {
      ck_assert_int_eq(rc, CL_INVALID_VALUE);
    } else {
      ck_assert_int_eq(rc, CL_SUCCESS);
      check_batch(b, batch);
    }
    clpin_batch_release(b, 0, NULL);
  }
  ck_assert_int_eq(clpin_loader_destroy(L), CL_SUCCESS);
  close(f.to_child); /* the child's read ends: it exits */
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(f.from_child);
  ck_assert_uint_eq(atomic_load(&f.outside), 0);
  ck_assert_int_eq(clpin_host_unregister(f.base), CL_SUCCESS);
  munmap(f.base, bytes);
  close(fd);
  pthread_mutex_destroy(&f.pipe_mu);
}
END_TEST

/* The caller releases each batch with a user event it completes only after
 * the next batch came: the uploads into those buffers wait for it, and the
 * batches still come, in order, exact, on 1 thread and on 4 (upload
 * callbacks: without CLPIN_LOADER_WAIT_UPLOADS, whose bargain such events
 * break). */
START_TEST(late_done_events_do_not_hold_the_next_batch) {
  const size_t batch = 8192;
  const uint64_t n = 12;
  slotspec f = {.batch = batch, .to_child = -1, .from_child = -1};
  clpin_loader_desc d = desc_of(&f, n, _i ? 4 : 1);
  ck_assert_int_eq(clpin_loader_slots(1, &d, &f.nslots), CL_SUCCESS);
  clpin_loader *L = open_on_malloc_slots(&f, &d);
  cl_event late = NULL; /* the previous batch's done event, still open */
  for (uint64_t i = 0; i < n; i++) {
    clpin_batch *b = NULL;
    ck_assert_int_eq(clpin_loader_next(L, &b), CL_SUCCESS);
    ck_assert_uint_eq(clpin_batch_index(b), i);
    if (late) {
      ck_assert_int_eq(clSetUserEventStatus(late, CL_COMPLETE), CL_SUCCESS);
      clReleaseEvent(late);
    }
    check_batch(b, batch);
    cl_int err;
    late = clCreateUserEvent(cl.ctx, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clpin_batch_release(b, 1, &late), CL_SUCCESS);
  }
  clpin_batch *b = NULL;
  ck_assert_int_eq(clpin_loader_next(L, &b), CLPIN_END);
  ck_assert_int_eq(clSetUserEventStatus(late, CL_COMPLETE), CL_SUCCESS);
  clReleaseEvent(late);
  ck_assert_uint_eq(atomic_load(&f.outside), 0);
  close_on_malloc_slots(L, &f);
}
END_TEST

static Suite *loader_slots_suite(void) {
  Suite *s = suite_create("loader_slots");
  TCase *tc = test_tcase(s, "slots", setup, teardown, 120);
  tcase_add_loop_test(tc, slots_in_caller_memory, 0, 2);
  tcase_add_loop_test(tc, late_done_events_do_not_hold_the_next_batch, 0, 2);
  tcase_add_test(tc, desc_sizes);
  tcase_add_test(tc, slot_stride_spaces_the_slots);
  tcase_add_test(tc, a_forked_process_fills_shared_slots);
  return s;
}

int main(void) { return test_run_suite(loader_slots_suite()); }
