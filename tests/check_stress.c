/* SPDX-License-Identifier: Apache-2.0 */
/* Stress: 16 threads x CLPIN_STRESS_OPS mixed operations on one pool.
 *
 * Workers acquire blocks of random power-of-two and odd sizes, fill each with
 * a pattern of their own, and verify it before every release, so a block
 * handed to two owners at once shows up as a corrupted pattern. Blocks are
 * released plainly, with a user event that a completer thread finishes later
 * (sometimes with an error status), or with the event of a real non-blocking
 * transfer reading the block; the transfer's result is read back and checked,
 * so a block reused while its DMA still runs shows up as corrupted device
 * data. Every acquire also checks that the block it got is not one whose
 * pending event is still incomplete. Blocks are handed between threads
 * through a locked queue; a janitor thread trims, changes the limit and checks
 * the stats invariant meanwhile. With the staging API built, workers also run
 * non-blocking clpin_write/clpin_read round trips of pageable memory.
 *
 * At the end: the stats balance (cached + in_use + in_flight == reserved,
 * nothing in use or in flight), trim leaves nothing reserved, and after
 * clpin_pool_release_context every buffer clpin ever handed out has been
 * destroyed (counted with memory-object destructor callbacks).
 *
 * CLPIN_STRESS_OPS (default 6000) is the number of operations per thread;
 * docs/RELIABILITY.md gives the command for the full run. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NTHREADS 16
#define MAX_HELD 8
#define MAX_BLOCK ((size_t)1 << 18) /* largest request of a worker */
#define XFER_MAX ((size_t)1 << 18)  /* largest transfer */
#define HANDOFF_CAP 64

static test_cl T;
static clpin_pool *P;
static long ops_per_thread;

/* ---- pattern ------------------------------------------------------------ */

static uint64_t rng(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t word_of(uint64_t seed, size_t i) {
  return (seed ^ (uint64_t)i) * 0x9E3779B97F4A7C15ull;
}

static void fill(void *p, size_t n, uint64_t seed) {
  unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = word_of(seed, i);
    memcpy(b + i, &w, 8);
  }
  uint64_t w = word_of(seed, i);
  memcpy(b + i, &w, n - i);
}

/* Offset of the first wrong byte, or -1. */
static long verify(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = word_of(seed, i);
    if (memcmp(b + i, &w, 8))
      return (long)i;
  }
  uint64_t w = word_of(seed, i);
  if (memcmp(b + i, &w, n - i))
    return (long)i;
  return -1;
}

/* ---- shared state ------------------------------------------------------- */

typedef struct {
  clpin_block *b;
  size_t n;
  uint64_t seed;
} held_t;

static pthread_mutex_t handoff_lock = PTHREAD_MUTEX_INITIALIZER;
static held_t handoff[HANDOFF_CAP];
static int handoff_n;

/* User events waiting for the completer thread. */
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_event *events;
static size_t events_n, events_cap;

/* Blocks released with a pending event, and that event (retained): a block
 * acquired while its event is still incomplete is a violation. */
typedef struct inflight {
  clpin_block *b;
  cl_event ev;
  struct inflight *next;
} inflight;
#define INFLIGHT_BUCKETS 4096
static pthread_mutex_t inflight_lock = PTHREAD_MUTEX_INITIALIZER;
static inflight *inflight_tab[INFLIGHT_BUCKETS];

/* Buffers seen alive (registered with a destructor callback). */
static pthread_mutex_t buffers_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_mem *buffers;
static size_t buffers_n, buffers_cap;
static atomic_long buffers_destroyed, buffers_registered;

static atomic_int stop_helpers;
static atomic_long n_acquires, n_fail, n_violations, n_handoffs, n_user_events, n_xfer_events,
    n_staged, n_trims, n_limits, n_checks;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "stress: " __VA_ARGS__);                                                       \
    fputc('\n', stderr);                                                                           \
    atomic_fetch_add(&n_fail, 1);                                                                  \
  } while (0)

static size_t bucket_of(const void *b) { return ((uintptr_t)b >> 4) % INFLIGHT_BUCKETS; }

static void inflight_put(clpin_block *b, cl_event ev) {
  inflight *e = malloc(sizeof *e);
  if (!e || clRetainEvent(ev) != CL_SUCCESS) {
    FAIL("inflight_put: out of memory or clRetainEvent failed");
    free(e);
    return;
  }
  e->b = b;
  e->ev = ev;
  pthread_mutex_lock(&inflight_lock);
  size_t k = bucket_of(b);
  e->next = inflight_tab[k];
  inflight_tab[k] = e;
  pthread_mutex_unlock(&inflight_lock);
}

/* Called on every acquired block: if it was released with an event, that
 * event must have completed (CL_COMPLETE or an error status). */
static void inflight_check(clpin_block *b) {
  pthread_mutex_lock(&inflight_lock);
  inflight **pp = &inflight_tab[bucket_of(b)], *found = NULL;
  while (*pp) {
    if ((*pp)->b == b) {
      inflight *e = *pp;
      *pp = e->next;
      e->next = found;
      found = e;
    } else {
      pp = &(*pp)->next;
    }
  }
  pthread_mutex_unlock(&inflight_lock);
  while (found) {
    inflight *e = found;
    found = e->next;
    cl_int status = CL_QUEUED;
    cl_int err =
        clGetEventInfo(e->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    if (err != CL_SUCCESS)
      FAIL("clGetEventInfo -> %d", err);
    else if (status > CL_COMPLETE) {
      FAIL("block %p handed out while its pending event has status %d", (void *)b, status);
      atomic_fetch_add(&n_violations, 1);
    }
    clReleaseEvent(e->ev);
    free(e);
  }
}

static void inflight_clear(void) {
  for (int k = 0; k < INFLIGHT_BUCKETS; k++) {
    while (inflight_tab[k]) {
      inflight *e = inflight_tab[k];
      inflight_tab[k] = e->next;
      clReleaseEvent(e->ev);
      free(e);
    }
  }
}

/* Buffers are tracked while alive: the first time a block shows a buffer
 * not in the list, a destructor callback is registered; the callback takes
 * the handle off the list (it runs before the driver can reuse the handle),
 * so a new buffer at a recycled address is registered again. */
static void CL_CALLBACK on_destroy(cl_mem m, void *user) {
  (void)user;
  pthread_mutex_lock(&buffers_lock);
  for (size_t i = 0; i < buffers_n; i++) {
    if (buffers[i] == m) {
      buffers[i] = buffers[--buffers_n];
      break;
    }
  }
  pthread_mutex_unlock(&buffers_lock);
  atomic_fetch_add(&buffers_destroyed, 1);
}

static void buffer_seen(cl_mem m) {
  pthread_mutex_lock(&buffers_lock);
  for (size_t i = 0; i < buffers_n; i++) {
    if (buffers[i] == m) {
      pthread_mutex_unlock(&buffers_lock);
      return;
    }
  }
  if (buffers_n == buffers_cap) {
    size_t cap = buffers_cap ? 2 * buffers_cap : 256;
    cl_mem *nb = realloc(buffers, cap * sizeof *nb);
    if (!nb) {
      pthread_mutex_unlock(&buffers_lock);
      FAIL("buffer_seen: out of memory");
      return;
    }
    buffers = nb;
    buffers_cap = cap;
  }
  buffers[buffers_n++] = m;
  pthread_mutex_unlock(&buffers_lock);
  /* Outside the lock: the callback may run inline. The block is ours, so
   * the buffer cannot be destroyed meanwhile. */
  cl_int err = clSetMemObjectDestructorCallback(m, on_destroy, NULL);
  if (err != CL_SUCCESS)
    FAIL("clSetMemObjectDestructorCallback -> %d", err);
  else
    atomic_fetch_add(&buffers_registered, 1);
}

static void events_push(cl_event ev) {
  pthread_mutex_lock(&events_lock);
  if (events_n == events_cap) {
    size_t cap = events_cap ? 2 * events_cap : 256;
    cl_event *ne = realloc(events, cap * sizeof *ne);
    if (!ne) {
      pthread_mutex_unlock(&events_lock);
      FAIL("events_push: out of memory");
      clSetUserEventStatus(ev, CL_COMPLETE);
      clReleaseEvent(ev);
      return;
    }
    events = ne;
    events_cap = cap;
  }
  events[events_n++] = ev;
  pthread_mutex_unlock(&events_lock);
}

/* Complete the oldest pending user event, if any; false if none. */
static bool events_complete_one(uint64_t *rs) {
  pthread_mutex_lock(&events_lock);
  if (!events_n) {
    pthread_mutex_unlock(&events_lock);
    return false;
  }
  cl_event ev = events[0];
  memmove(events, events + 1, (events_n - 1) * sizeof *events);
  events_n--;
  pthread_mutex_unlock(&events_lock);
  /* One in eight completes with an error status: the block must come back
   * all the same. */
  cl_int st = (rng(rs) % 8 == 0) ? -1 : CL_COMPLETE;
  cl_int err = clSetUserEventStatus(ev, st);
  if (err != CL_SUCCESS)
    FAIL("clSetUserEventStatus -> %d", err);
  clReleaseEvent(ev);
  return true;
}

static clpin_stats stats_now(void) {
  clpin_stats s;
  cl_int err = test_stats_get(P, &s);
  if (err != CL_SUCCESS)
    FAIL("clpin_pool_stats -> %d", err);
  return s;
}

/* Threads count failures instead of asserting (FAIL), hence the text form. */
static void check_invariant(const clpin_stats *s, const char *where) {
  char why[256];
  if (test_stats_broken(s, why, sizeof why))
    FAIL("%s: %s", where, why);
}

/* ---- helper threads ----------------------------------------------------- */

static void *completer_main(void *arg) {
  (void)arg;
  uint64_t rs = 0x1234567;
  struct timespec nap = {0, 50 * 1000};
  while (!atomic_load(&stop_helpers)) {
    if (!events_complete_one(&rs))
      nanosleep(&nap, NULL);
  }
  while (events_complete_one(&rs))
    ;
  return NULL;
}

static void *janitor_main(void *arg) {
  (void)arg;
  uint64_t rs = 0xfeedbeef;
  static const size_t limits[] = {0, (size_t)1 << 20, (size_t)16 << 20, SIZE_MAX};
  struct timespec nap = {0, 200 * 1000};
  while (!atomic_load(&stop_helpers)) {
    switch (rng(&rs) % 4) {
    case 0: {
      cl_int err = clpin_pool_trim(P);
      if (err != CL_SUCCESS)
        FAIL("clpin_pool_trim -> %d", err);
      atomic_fetch_add(&n_trims, 1);
      break;
    }
    case 1: {
      cl_int err = clpin_pool_set_limit(P, limits[rng(&rs) % 4]);
      if (err != CL_SUCCESS)
        FAIL("clpin_pool_set_limit -> %d", err);
      atomic_fetch_add(&n_limits, 1);
      break;
    }
    default: {
      clpin_stats s = stats_now();
      check_invariant(&s, "janitor");
      atomic_fetch_add(&n_checks, 1);
      break;
    }
    }
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* Complete one user event after 100 ms, while the main thread waits in
 * clpin_pool_release_context. */
static void *complete_later(void *arg) {
  struct timespec nap = {0, 100 * 1000 * 1000};
  nanosleep(&nap, NULL);
  cl_int err = clSetUserEventStatus((cl_event)arg, CL_COMPLETE);
  if (err != CL_SUCCESS)
    FAIL("clSetUserEventStatus -> %d", err);
  return NULL;
}

/* ---- workers ------------------------------------------------------------ */

typedef struct {
  int id;
  uint64_t rs;
  cl_command_queue q;
  cl_mem dev; /* target of the transfers that read held blocks */
  held_t held[MAX_HELD];
  int nheld;
  /* The last transfer from a block released with its event: checked later. */
  cl_event xfer_ev;
  size_t xfer_n;
  uint64_t xfer_seed;
  unsigned char *scratch; /* XFER_MAX bytes */
  cl_mem dev2;
  unsigned char *src, *dst; /* pageable, XFER_MAX bytes each */
} worker;

static size_t random_size(uint64_t *rs) {
  uint64_t r = rng(rs);
  switch (r % 4) {
  case 0: /* a power of two, 1 ... MAX_BLOCK */ return (size_t)1 << (rng(rs) % 19);
  case 1: /* odd, small */ return (size_t)(rng(rs) % 8192) | 1;
  default: { /* odd, log-uniform up to MAX_BLOCK */
    unsigned k = (unsigned)(rng(rs) % 18) + 1;
    return ((size_t)(rng(rs) % ((size_t)1 << k)) | 1);
  }
  }
}

static void do_acquire(worker *w) {
  size_t n = random_size(&w->rs);
  clpin_block *b = NULL;
  cl_int err = clpin_acquire(P, n, &b);
  if (err != CL_SUCCESS) {
    FAIL("clpin_acquire(%zu) -> %d", n, err);
    return;
  }
  atomic_fetch_add(&n_acquires, 1);
  inflight_check(b);
  if (clpin_block_size(b) < n)
    FAIL("block of %zu bytes for a request of %zu", clpin_block_size(b), n);
  buffer_seen(clpin_block_buffer(b));
  uint64_t seed = rng(&w->rs);
  fill(clpin_block_host(b), n, seed);
  w->held[w->nheld++] = (held_t){b, n, seed};
}

static held_t take(worker *w, int i) {
  held_t h = w->held[i];
  w->held[i] = w->held[--w->nheld];
  long bad = verify(clpin_block_host(h.b), h.n, h.seed);
  if (bad >= 0)
    FAIL("thread %d: block %p (%zu bytes) corrupted at %ld", w->id, (void *)h.b, h.n, bad);
  return h;
}

static void release_plain(worker *w, int i) {
  held_t h = take(w, i);
  cl_int err = clpin_release(h.b, NULL);
  if (err != CL_SUCCESS)
    FAIL("clpin_release -> %d", err);
}

static void release_user_event(worker *w, int i) {
  held_t h = take(w, i);
  cl_int err;
  cl_event ev = clCreateUserEvent(T.ctx, &err);
  if (err != CL_SUCCESS) {
    FAIL("clCreateUserEvent -> %d", err);
    clpin_release(h.b, NULL);
    return;
  }
  inflight_put(h.b, ev);
  err = clpin_release(h.b, ev);
  if (err != CL_SUCCESS)
    FAIL("clpin_release(pending user event) -> %d", err);
  atomic_fetch_add(&n_user_events, 1);
  events_push(ev); /* the completer finishes and releases it */
}

/* Wait for the last transfer released with a block and check what landed. */
static void xfer_settle(worker *w) {
  if (!w->xfer_ev)
    return;
  cl_int err = clWaitForEvents(1, &w->xfer_ev);
  if (err != CL_SUCCESS)
    FAIL("clWaitForEvents(transfer) -> %d", err);
  clReleaseEvent(w->xfer_ev);
  w->xfer_ev = NULL;
  err = clEnqueueReadBuffer(w->q, w->dev, CL_TRUE, 0, w->xfer_n, w->scratch, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    FAIL("clEnqueueReadBuffer -> %d", err);
  long bad = verify(w->scratch, w->xfer_n, w->xfer_seed);
  if (bad >= 0)
    FAIL("thread %d: transfer from a released block corrupted at %ld of %zu (block reused "
         "before its DMA finished?)",
         w->id, bad, w->xfer_n);
}

/* A real non-blocking transfer reads the block; release the block with the
 * transfer's event, and check the data later. */
static void release_transfer_event(worker *w, int i) {
  xfer_settle(w);
  held_t h = take(w, i);
  size_t n = h.n < XFER_MAX ? h.n : XFER_MAX;
  cl_event ev = NULL;
  /* Already-pinned memory: clpin_write goes straight to DMA from the block. */
  cl_int err =
      clpin_write(w->q, w->dev, 0, clpin_block_host(h.b), n, CLPIN_NON_BLOCKING, 0, NULL, &ev);
  if (err != CL_SUCCESS) {
    FAIL("non-blocking write from a block -> %d", err);
    clpin_release(h.b, NULL);
    return;
  }
  clFlush(w->q);
  inflight_put(h.b, ev);
  err = clpin_release(h.b, ev);
  if (err != CL_SUCCESS)
    FAIL("clpin_release(transfer event) -> %d", err);
  atomic_fetch_add(&n_xfer_events, 1);
  w->xfer_ev = ev;
  w->xfer_n = n;
  w->xfer_seed = h.seed;
}

static void give_away(worker *w, int i) {
  held_t h = take(w, i); /* verified now; the taker verifies again */
  pthread_mutex_lock(&handoff_lock);
  if (handoff_n < HANDOFF_CAP) {
    handoff[handoff_n++] = h;
    pthread_mutex_unlock(&handoff_lock);
    return;
  }
  pthread_mutex_unlock(&handoff_lock);
  w->held[w->nheld++] = h; /* queue full: keep it */
}

static void adopt(worker *w) {
  if (w->nheld == MAX_HELD)
    return;
  pthread_mutex_lock(&handoff_lock);
  if (!handoff_n) {
    pthread_mutex_unlock(&handoff_lock);
    return;
  }
  held_t h = handoff[0];
  memmove(handoff, handoff + 1, (size_t)(handoff_n - 1) * sizeof *handoff);
  handoff_n--;
  pthread_mutex_unlock(&handoff_lock);
  long bad = verify(clpin_block_host(h.b), h.n, h.seed);
  if (bad >= 0)
    FAIL("thread %d: handed-over block corrupted at %ld", w->id, bad);
  /* The new owner writes its own pattern. */
  h.seed = rng(&w->rs);
  fill(clpin_block_host(h.b), h.n, h.seed);
  w->held[w->nheld++] = h;
  atomic_fetch_add(&n_handoffs, 1);
}

/* A non-blocking staging round trip of pageable memory. */
static void staged_round_trip(worker *w) {
  size_t n = (size_t)(rng(&w->rs) % XFER_MAX) + 1;
  size_t off = (size_t)(rng(&w->rs) % 64);
  if (off + n > XFER_MAX)
    n = XFER_MAX - off;
  uint64_t seed = rng(&w->rs);
  fill(w->src, n, seed);
  memset(w->dst, 0, n);
  unsigned flags = CLPIN_NON_BLOCKING | (rng(&w->rs) % 4 ? CLPIN_PIN_MEMORY : 0);
  cl_event e1 = NULL, e2 = NULL;
  cl_int err = clpin_write(w->q, w->dev2, off, w->src, n, flags, 0, NULL, &e1);
  if (err != CL_SUCCESS) {
    FAIL("clpin_write(%zu, NON_BLOCKING) -> %d", n, err);
    return;
  }
  err = clpin_read(w->q, w->dev2, off, w->dst, n, flags, 1, &e1, &e2);
  if (err != CL_SUCCESS) {
    FAIL("clpin_read(%zu, NON_BLOCKING) -> %d", n, err);
    clWaitForEvents(1, &e1);
    clReleaseEvent(e1);
    return;
  }
  err = clWaitForEvents(1, &e2);
  if (err != CL_SUCCESS)
    FAIL("clWaitForEvents(read) -> %d", err);
  clReleaseEvent(e1);
  clReleaseEvent(e2);
  long bad = verify(w->dst, n, seed);
  if (bad >= 0)
    FAIL("thread %d: staged round trip of %zu bytes at offset %zu wrong at %ld", w->id, n, off,
         bad);
  atomic_fetch_add(&n_staged, 1);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  for (long op = 0; op < ops_per_thread; op++) {
    unsigned r = (unsigned)(rng(&w->rs) % 100);
    if (w->nheld == 0 || (w->nheld < MAX_HELD && r < 40)) {
      do_acquire(w);
      continue;
    }
    int i = (int)(rng(&w->rs) % (uint64_t)w->nheld);
    if (r < 60)
      release_plain(w, i);
    else if (r < 70)
      release_user_event(w, i);
    else if (r < 78)
      release_transfer_event(w, i);
    else if (r < 86)
      give_away(w, i);
    else if (r < 94)
      adopt(w);
    else {
      staged_round_trip(w);
    }
  }
  while (w->nheld)
    release_plain(w, w->nheld - 1);
  xfer_settle(w);
  return NULL;
}

/* ---- the test ----------------------------------------------------------- */

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (!v || !*v)
    return dflt;
  char *end;
  long n = strtol(v, &end, 10);
  ck_assert_msg(*end == '\0' && n > 0, "%s=%s is not a positive number", name, v);
  return n;
}

static void wait_no_in_flight(const char *where) {
  clpin_stats s = stats_now();
  for (int i = 0; i < 2000 && s.blocks_in_flight; i++) {
    struct timespec nap = {0, 5 * 1000 * 1000};
    nanosleep(&nap, NULL);
    s = stats_now();
  }
  ck_assert_msg(s.blocks_in_flight == 0 && s.bytes_in_flight == 0,
                "%s: %zu blocks still in flight after 10 s", where, s.blocks_in_flight);
}

START_TEST(stress_mixed) {
  ops_per_thread = env_long("CLPIN_STRESS_OPS", 6000);
  uint64_t seed = (uint64_t)env_long("CLPIN_STRESS_SEED", (long)time(NULL));
  printf("stress: CLPIN_STRESS_OPS=%ld CLPIN_STRESS_SEED=%llu\n", ops_per_thread,
         (unsigned long long)seed);
  test_cl_open(&T);
  CL_OK(clpin_pool_get(T.queue, &P));
  /* Small chunks so that round trips above 64 KiB take the pipeline. */
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, 64 * 1024));
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0)); /* stage every size: the paths under test */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  worker *ws = calloc(NTHREADS, sizeof *ws);
  ck_assert_ptr_nonnull(ws);
  for (int i = 0; i < NTHREADS; i++) {
    cl_int err;
    ws[i].id = i;
    ws[i].rs = (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)) ^ seed;
    ws[i].q = clCreateCommandQueue(T.ctx, T.device, 0, &err);
    CL_OK(err);
    ws[i].dev = test_buffer(&T, XFER_MAX);
    ws[i].scratch = malloc(XFER_MAX);
    ck_assert_ptr_nonnull(ws[i].scratch);
    ws[i].dev2 = test_buffer(&T, XFER_MAX);
    ws[i].src = malloc(XFER_MAX);
    ws[i].dst = malloc(XFER_MAX);
    ck_assert(ws[i].src && ws[i].dst);
  }
  atomic_store(&stop_helpers, 0);
  pthread_t th[NTHREADS], completer, janitor;
  ck_assert_int_eq(pthread_create(&completer, NULL, completer_main, NULL), 0);
  ck_assert_int_eq(pthread_create(&janitor, NULL, janitor_main, NULL), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < NTHREADS; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &ws[i]), 0);
  for (int i = 0; i < NTHREADS; i++)
    pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* Blocks left in the hand-off queue. */
  for (int i = 0; i < handoff_n; i++) {
    long bad = verify(clpin_block_host(handoff[i].b), handoff[i].n, handoff[i].seed);
    if (bad >= 0)
      FAIL("queued block corrupted at %ld", bad);
    cl_int err = clpin_release(handoff[i].b, NULL);
    if (err != CL_SUCCESS)
      FAIL("clpin_release(queued) -> %d", err);
  }
  handoff_n = 0;
  atomic_store(&stop_helpers, 1);
  pthread_join(janitor, NULL);
  pthread_join(completer, NULL); /* completes every remaining user event */
  for (int i = 0; i < NTHREADS; i++)
    CL_OK(clFinish(ws[i].q));
  wait_no_in_flight("after the run");

  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  clpin_stats s = stats_now();
  printf("stress: %d threads x %ld ops in %.2f s (%.0f ops/s): %ld acquires, %ld hand-offs, "
         "%ld user-event releases, %ld transfer-event releases, %ld staged round trips, "
         "%ld trims, %ld limit changes, %ld invariant checks; pool hits %llu misses %llu "
         "driver allocs %llu frees %llu peak %zu bytes\n",
         NTHREADS, ops_per_thread, secs, NTHREADS * (double)ops_per_thread / secs,
         atomic_load(&n_acquires), atomic_load(&n_handoffs), atomic_load(&n_user_events),
         atomic_load(&n_xfer_events), atomic_load(&n_staged), atomic_load(&n_trims),
         atomic_load(&n_limits), atomic_load(&n_checks), (unsigned long long)s.hits,
         (unsigned long long)s.misses, (unsigned long long)s.driver_allocs,
         (unsigned long long)s.driver_frees, s.peak_bytes_reserved);

  check_invariant(&s, "end");
  ck_assert_uint_eq(s.blocks_in_use, 0);
  ck_assert_uint_eq(s.bytes_in_use, 0);
  ck_assert_uint_eq(s.bytes_requested, 0);
  ck_assert_uint_eq(s.blocks_in_flight, 0);
  ck_assert_uint_eq(s.bytes_cached, s.bytes_reserved);
  ck_assert_uint_ge(s.hits + s.misses, (uint64_t)atomic_load(&n_acquires));
  ck_assert_uint_le(s.driver_allocs, s.misses + s.oom_retries);

  /* Trim frees everything idle. */
  CL_OK(clpin_pool_set_limit(P, SIZE_MAX));
  CL_OK(clpin_pool_trim(P));
  s = stats_now();
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.blocks_cached, 0);
  ck_assert_uint_eq(s.driver_allocs, s.driver_frees);

  /* release_context with blocks in use and in flight (a user event completed
   * by another thread while release_context waits) frees every buffer. */
  clpin_block *b[6];
  for (int i = 0; i < 6; i++) {
    CL_OK(clpin_acquire(P, (size_t)4096 << i, &b[i]));
    inflight_check(b[i]);
    buffer_seen(clpin_block_buffer(b[i]));
  }
  CL_OK(clpin_release(b[0], NULL)); /* cached */
  cl_int err;
  cl_event ue = clCreateUserEvent(T.ctx, &err);
  CL_OK(err);
  CL_OK(clpin_release(b[1], ue)); /* in flight */
  ck_assert_int_eq(pthread_create(&completer, NULL, complete_later, ue), 0);
  CL_OK(clpin_pool_release_context(T.ctx)); /* b[2..5] still in use */
  pthread_join(completer, NULL);
  cl_int st = 1;
  CL_OK(clGetEventInfo(ue, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  ck_assert_int_le(st, CL_COMPLETE);
  CL_OK(clReleaseEvent(ue));
  for (int i = 2; i < 6; i++)
    ck_assert_int_eq(clpin_release(b[i], NULL), CLPIN_ERR_POOL_RELEASED);
  /* The released pool's final counters: everything freed. */
  s = stats_now();
  check_invariant(&s, "after release_context");
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.driver_allocs, s.driver_frees);

  for (int i = 0; i < NTHREADS; i++) {
    clReleaseMemObject(ws[i].dev);
    clReleaseCommandQueue(ws[i].q);
    free(ws[i].scratch);
    clReleaseMemObject(ws[i].dev2);
    free(ws[i].src);
    free(ws[i].dst);
  }
  free(ws);
  /* Every buffer clpin handed out has been destroyed. */
  long reg = atomic_load(&buffers_registered), gone = atomic_load(&buffers_destroyed);
  for (int i = 0; i < 200 && gone < reg; i++) {
    struct timespec nap = {0, 5 * 1000 * 1000};
    nanosleep(&nap, NULL);
    gone = atomic_load(&buffers_destroyed);
  }
  printf("stress: %ld distinct block buffers seen, %ld destroyed\n", reg, gone);
  ck_assert_int_eq(gone, reg);
  ck_assert_int_eq(atomic_load(&n_violations), 0);
  ck_assert_msg(atomic_load(&n_fail) == 0, "%ld failures (see stderr)", atomic_load(&n_fail));
  inflight_clear();
  free(buffers);
  free(events);
  clReleaseCommandQueue(T.queue);
  clReleaseContext(T.ctx);
}
END_TEST

int main(void) {
  Suite *s = suite_create("stress");
  TCase *tc = tcase_create("mixed");
  tcase_set_timeout(tc, 1800);
  tcase_add_test(tc, stress_mixed);
  suite_add_tcase(s, tc);
  return test_run_suite(s);
}
