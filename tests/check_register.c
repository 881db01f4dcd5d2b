/* SPDX-License-Identifier: Apache-2.0 */
/* Registered memory (clpin_host_register / clpin_host_unregister): byte-exact
 * transfers from and to registered regions with the pool's counters proving
 * the direct path ran; ranges crossing a region's edge taking the usual path;
 * every bad input leaving the pool unchanged; unregister and the pool's
 * release waiting for a gated non-blocking transfer; tensors; threads
 * registering, transferring and unregistering at once. Runs on POCL and,
 * like the staging suite, on any device CLPIN_TEST_PLATFORM names. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIN CLPIN_PIN_MEMORY
#define NB CLPIN_NON_BLOCKING

static test_cl cl;
static clpin_pool *pool;
static size_t page;

static void setup(void) {
  test_cl_open(&cl);
  CL_OK(clpin_pool_get(cl.queue, &pool));
  page = (size_t)sysconf(_SC_PAGESIZE);
}

static void teardown(void) {
  test_cl_close(&cl);
  clpin_shutdown();
}

static clpin_stats stats_of(clpin_pool *p) {
  clpin_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CL_OK(clpin_pool_stats(p, &s));
  return s;
}

/* Transfer counters of the pool, as one value each. */
typedef struct {
  uint64_t direct, other;
} moved;

static moved moved_now(void) {
  clpin_stats s = stats_of(pool);
  return (moved){s.bytes_pinned_direct, s.bytes_staged + s.bytes_pipelined + s.bytes_unpinned};
}

static void assert_moved(moved before, uint64_t direct, uint64_t other) {
  moved now = moved_now();
  ck_assert_uint_eq(now.direct - before.direct, direct);
  ck_assert_uint_eq(now.other - before.other, other);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Page-aligned memory of n pages, filled with a pattern. */
static unsigned char *pages(size_t n, unsigned seed) {
  unsigned char *p = aligned_alloc(page, n * page);
  ck_assert_ptr_nonnull(p);
  test_fill(p, n * page, seed);
  return p;
}

static void wait_event(cl_event ev) {
  ck_assert_ptr_nonnull(ev);
  CL_OK(clWaitForEvents(1, &ev));
  clReleaseEvent(ev);
}

/* ---- transfers ------------------------------------------------------------ */

/* Places of a transfer inside a region of 4 pages registered at +start. */
typedef struct {
  const char *name;
  size_t start, len; /* in the region */
} place;

#define REG_START 100            /* the region starts 100 B into its pages */
#define REG_LEN (4 * 4096 - 300) /* and ends 200 B before their end */
static const place places[] = {
    {"whole region", 0, REG_LEN},
    {"start", 0, 1000},
    {"interior, page-aligned in memory", 4096 - REG_START, 4096},
    {"interior, unaligned", 77, 5003},
    {"one byte at the end", REG_LEN - 1, 1},
    {"last bytes", REG_LEN - 999, 999},
};
#define NPLACES (sizeof places / sizeof places[0])

/* _i: place x {blocking, non-blocking} x {no flag, CLPIN_PIN_MEMORY} x {event, none}. */
START_TEST(registered_roundtrip_is_direct) {
  const place *pl = &places[(size_t)_i % NPLACES];
  unsigned variant = (unsigned)_i / NPLACES;
  unsigned flags = ((variant & 1) ? NB : 0) | ((variant & 2) ? PIN : 0);
  bool want_event = variant & 4;
  /* Without an event a non-blocking transfer is waited for by clFinish. */
  if ((flags & NB) && !want_event &&
      test_skip_on(&cl, "rusticl", "registered_roundtrip_is_direct (non-blocking, no event)",
                   TEST_RUSTICL_FINISH))
    return;
  unsigned char *mem = pages(4, 1);
  unsigned char *region = mem + REG_START;
  CL_OK(clpin_host_register(pool, region, REG_LEN));
  cl_mem m = test_buffer(&cl, REG_LEN + 64);
  unsigned char *zero = calloc(1, REG_LEN + 64);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, REG_LEN + 64, zero, 0, NULL, NULL));

  /* Write from the region to device offset 13. */
  test_fill(region + pl->start, pl->len, 40 + (unsigned)_i);
  moved before = moved_now();
  cl_event ev = NULL;
  CL_OK(clpin_write(cl.queue, m, 13, region + pl->start, pl->len, flags, 0, NULL,
                    want_event ? &ev : NULL));
  if (want_event)
    wait_event(ev);
  else
    CL_OK(clFinish(cl.queue));
  assert_moved(before, pl->len, 0);
  unsigned char *back = malloc(REG_LEN + 64);
  CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, REG_LEN + 64, back, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(back + 13, pl->len, 40 + (unsigned)_i), (size_t)-1);
  ck_assert_msg(!memcmp(back, zero, 13), "bytes before the written range changed");
  ck_assert_msg(!memcmp(back + 13 + pl->len, zero, REG_LEN + 64 - 13 - pl->len),
                "bytes after the written range changed");

  /* Read it back into the region, over other bytes. */
  memset(region + pl->start, 0xEE, pl->len);
  before = moved_now();
  ev = NULL;
  CL_OK(clpin_read(cl.queue, m, 13, region + pl->start, pl->len, flags, 0, NULL,
                   want_event ? &ev : NULL));
  if (want_event)
    wait_event(ev);
  else
    CL_OK(clFinish(cl.queue));
  assert_moved(before, pl->len, 0);
  ck_assert_uint_eq(test_check(region + pl->start, pl->len, 40 + (unsigned)_i), (size_t)-1);
  /* The bytes of the pages outside the region were never touched. */
  ck_assert_uint_eq(test_check(mem, REG_START, 1), (size_t)-1);
  size_t tail = 4 * page - REG_START - REG_LEN;
  for (size_t i = 0; i < tail; i++)
    ck_assert_uint_eq(mem[REG_START + REG_LEN + i], test_pattern(1, REG_START + REG_LEN + i));

  CL_OK(clpin_host_unregister(region));
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 0);
  free(back);
  free(zero);
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* A range running past either edge of the region is not registered memory:
 * it takes the usual path, counted elsewhere, and the data is still right.
 * _i: 0 past the end by one byte, 1 past the end by a page, 2 starting one
 * byte before the region, 3 all of the region plus a byte on each side;
 * _i & 4: with CLPIN_PIN_MEMORY. */
START_TEST(range_crossing_the_edge_is_not_registered) {
  unsigned which = (unsigned)_i & 3;
  unsigned flags = (_i & 4) ? PIN : 0;
  unsigned char *mem = pages(6, 2);
  unsigned char *region = mem + page + 50;
  size_t len = 2 * page;
  CL_OK(clpin_host_register(pool, region, len));
  unsigned char *from;
  size_t n;
  switch (which) {
  case 0: from = region + 100, n = len - 100 + 1; break;
  case 1: from = region + len - 10, n = page + 10 + 1; break;
  case 2: from = region - 1, n = 500; break;
  default: from = region - 1, n = len + 2; break;
  }
  cl_mem m = test_buffer(&cl, n);
  moved before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, from, n, flags, 0, NULL, NULL));
  assert_moved(before, 0, n);
  unsigned char *back = malloc(n);
  CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, back, 0, NULL, NULL));
  ck_assert(!memcmp(back, from, n));
  memset(from, 0x11, n);
  before = moved_now();
  cl_event ev = NULL;
  CL_OK(clpin_read(cl.queue, m, 0, from, n, flags | NB, 0, NULL, &ev));
  wait_event(ev);
  assert_moved(before, 0, n);
  ck_assert(!memcmp(back, from, n));
  /* The region itself still goes direct. */
  before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, region, n < len ? n : len, flags, 0, NULL, NULL));
  assert_moved(before, n < len ? n : len, 0);
  CL_OK(clpin_host_unregister(region));
  free(back);
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* After unregister the memory is ordinary memory again: the usual path. */
START_TEST(unregistered_memory_takes_the_usual_path) {
  unsigned char *mem = pages(2, 3);
  cl_mem m = test_buffer(&cl, 2 * page);
  CL_OK(clpin_host_register(pool, mem, 2 * page));
  moved before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, mem, 2 * page, 0, 0, NULL, NULL));
  assert_moved(before, 2 * page, 0);
  CL_OK(clpin_host_unregister(mem));
  before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, mem, 2 * page, 0, 0, NULL, NULL));
  assert_moved(before, 0, 2 * page);
  /* And it can be registered again. */
  CL_OK(clpin_host_register(pool, mem, 2 * page));
  before = moved_now();
  CL_OK(clpin_read(cl.queue, m, 0, mem, 2 * page, PIN, 0, NULL, NULL));
  assert_moved(before, 2 * page, 0);
  ck_assert_uint_eq(test_check(mem, 2 * page, 3), (size_t)-1);
  CL_OK(clpin_host_unregister(mem));
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* ---- stats ---------------------------------------------------------------- */

START_TEST(bytes_registered_counts_whole_pages) {
  unsigned char *mem = pages(16, 4);
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 0);
  CL_OK(clpin_host_register(pool, mem, 1)); /* one byte: its page */
  ck_assert_uint_eq(stats_of(pool).bytes_registered, page);
  CL_OK(clpin_host_register(pool, mem + 2 * page + 1, page)); /* straddles two pages */
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 3 * page);
  CL_OK(clpin_host_register(pool, mem + 8 * page, 4 * page)); /* aligned: exactly */
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 7 * page);
  CL_OK(clpin_host_unregister(mem + 2 * page + 1));
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 5 * page);
  CL_OK(clpin_host_unregister(mem));
  CL_OK(clpin_host_unregister(mem + 8 * page));
  clpin_stats s = stats_of(pool);
  ck_assert_uint_eq(s.bytes_registered, 0);
  /* Registering allocates nothing from the pool. */
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.driver_allocs, 0);
  free(mem);
}
END_TEST

/* A caller's struct of the 0.1 layout (without bytes_registered) is filled
 * up to its size and not beyond. */
START_TEST(old_stats_struct_is_not_overrun) {
  unsigned char *mem = pages(1, 5);
  CL_OK(clpin_host_register(pool, mem, page));
  union {
    clpin_stats s;
    unsigned char bytes[sizeof(clpin_stats)];
  } u;
  memset(&u, 0xAB, sizeof u);
  size_t old = offsetof(clpin_stats, bytes_registered);
  u.s.struct_size = old;
  CL_OK(clpin_pool_stats(pool, &u.s));
  for (size_t i = old; i < sizeof u; i++)
    ck_assert_uint_eq(u.bytes[i], 0xAB);
  CL_OK(clpin_host_unregister(mem));
  free(mem);
}
END_TEST

/* ---- bad input ------------------------------------------------------------ */

#define EXPECT(call, code)                                                                         \
  do {                                                                                             \
    clpin_stats before_ = stats_of(pool);                                                          \
    cl_int got_ = (call);                                                                          \
    ck_assert_msg(got_ == (code), "%s -> %d (%s), want %s", #call, got_, clpin_strerror(got_),     \
                  #code);                                                                          \
    clpin_stats after_ = stats_of(pool);                                                           \
    ck_assert_msg(!memcmp(&before_, &after_, sizeof before_), "%s changed the pool", #call);       \
  } while (0)

START_TEST(bad_input_changes_nothing) {
  unsigned char *mem = pages(8, 6);
  unsigned char *region = mem + page + 10;
  CL_OK(clpin_host_register(pool, region, page)); /* pages 1 and 2 */
  EXPECT(clpin_host_register(NULL, mem, page), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_host_register(pool, NULL, page), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_host_register(pool, mem, 0), CLPIN_ERR_INVALID_SIZE);
  EXPECT(clpin_host_register(pool, mem, SIZE_MAX), CLPIN_ERR_OVERFLOW);
  EXPECT(clpin_host_register(pool, mem, SIZE_MAX - (size_t)(uintptr_t)mem - 10),
         CLPIN_ERR_OVERFLOW);
  EXPECT(clpin_host_register(pool, mem, SIZE_MAX / 2), CLPIN_ERR_INVALID_SIZE);
  /* Duplicate, overlapping at either end, containing, contained, and
   * disjoint bytes on a shared page. */
  EXPECT(clpin_host_register(pool, region, page), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, mem, page + 11), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, region + page - 1, 100), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, mem, 8 * page), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, region + 5, 5), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, mem + page, 10), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, region + page, 1), CLPIN_ERR_ALREADY_REGISTERED);
  /* clpin's own pinned memory. */
  void *h = clpin_host_alloc(pool, 10000);
  ck_assert_ptr_nonnull(h);
  EXPECT(clpin_host_register(pool, h, 10000), CLPIN_ERR_ALREADY_REGISTERED);
  EXPECT(clpin_host_register(pool, (char *)h + 5000, 10), CLPIN_ERR_ALREADY_REGISTERED);
  /* Unregister: NULL, never registered, interior, page start of a region
   * that starts later in its page. */
  EXPECT(clpin_host_unregister(NULL), CLPIN_ERR_INVALID_ARGUMENT);
  EXPECT(clpin_host_unregister(mem + 5 * page), CLPIN_ERR_NOT_REGISTERED);
  EXPECT(clpin_host_unregister(region + 1), CLPIN_ERR_NOT_REGISTERED);
  EXPECT(clpin_host_unregister(mem + page), CLPIN_ERR_NOT_REGISTERED);
  EXPECT(clpin_host_unregister(h), CLPIN_ERR_NOT_REGISTERED);
  int on_stack;
  EXPECT(clpin_host_unregister(&on_stack), CLPIN_ERR_NOT_REGISTERED);
  /* The registration survived every refusal; the page right after it is free. */
  cl_mem m = test_buffer(&cl, page);
  moved before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, region, page, 0, 0, NULL, NULL));
  assert_moved(before, page, 0);
  CL_OK(clpin_host_register(pool, mem + 3 * page, 1));
  CL_OK(clpin_host_unregister(region));
  EXPECT(clpin_host_unregister(region), CLPIN_ERR_NOT_REGISTERED); /* twice */
  CL_OK(clpin_host_unregister(mem + 3 * page));
  CL_OK(clpin_host_free(h));
  clReleaseMemObject(m);
  ck_assert_uint_eq(test_check(mem, 8 * page, 6), (size_t)-1);
  free(mem);
}
END_TEST

/* ---- unregister waits ------------------------------------------------------ */

typedef struct {
  cl_event gate;
  long delay_ms;
  atomic_int opened;
  double opened_at;
} opener;

static void *open_later(void *arg) {
  opener *o = arg;
  nap_ms(o->delay_ms);
  o->opened_at = now_s();
  atomic_store(&o->opened, 1);
  clSetUserEventStatus(o->gate, CL_COMPLETE);
  return NULL;
}

static cl_int status_of(cl_event ev) {
  cl_int st;
  CL_OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
  return st;
}

/* A non-blocking transfer from/to the region waits on a user event that
 * another thread sets 300 ms later; unregister (or the pool's release) must
 * return only after that, with the transfer complete and its data right.
 * _i & 1: read (else write); _i & 2: no event asked for (clpin makes one);
 * _i & 4: clpin_pool_release_context instead of unregister. */
START_TEST(unregister_waits_for_gated_transfer) {
  bool read = _i & 1, no_event = _i & 2, release = _i & 4;
  size_t n = 3 * page + 123;
  unsigned char *mem = pages(5, 7);
  unsigned char *region = mem + 7;
  CL_OK(clpin_host_register(pool, region, n));
  cl_mem m = test_buffer(&cl, n);
  unsigned char *dev_data = malloc(n);
  test_fill(dev_data, n, 8);
  CL_OK(clEnqueueWriteBuffer(cl.queue, m, CL_TRUE, 0, n, dev_data, 0, NULL, NULL));
  test_fill(region, n, 9);
  cl_int err;
  opener o = {.delay_ms = 300};
  o.gate = clCreateUserEvent(cl.ctx, &err);
  CL_OK(err);
  atomic_init(&o.opened, 0);
  cl_event ev = NULL;
  moved before = moved_now();
  if (read)
    CL_OK(clpin_read(cl.queue, m, 0, region, n, PIN | NB, 1, &o.gate, no_event ? NULL : &ev));
  else
    CL_OK(clpin_write(cl.queue, m, 0, region, n, PIN | NB, 1, &o.gate, no_event ? NULL : &ev));
  assert_moved(before, n, 0);
  nap_ms(20);
  ck_assert_msg(!atomic_load(&o.opened), "the gate opened too early for this test");
  if (ev)
    ck_assert_int_gt(status_of(ev), CL_COMPLETE);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, open_later, &o), 0);
  double t0 = now_s();
  if (release)
    CL_OK(clpin_pool_release_context(cl.ctx));
  else
    CL_OK(clpin_host_unregister(region));
  double t1 = now_s();
  ck_assert_msg(atomic_load(&o.opened), "%s returned %.0f ms in, before the gate opened",
                release ? "clpin_pool_release_context" : "clpin_host_unregister", (t1 - t0) * 1e3);
  ck_assert(t1 >= o.opened_at);
  if (ev) {
    ck_assert_int_eq(status_of(ev), CL_COMPLETE);
    clReleaseEvent(ev);
  }
  pthread_join(th, NULL);
  CL_OK(clFinish(cl.queue));
  if (read) {
    ck_assert_uint_eq(test_check(region, n, 8), (size_t)-1);
  } else {
    unsigned char *back = malloc(n);
    CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, back, 0, NULL, NULL));
    ck_assert_uint_eq(test_check(back, n, 9), (size_t)-1);
    free(back);
  }
  if (release) {
    /* The registration went with the pool. */
    clpin_stats s = stats_of(pool);
    ck_assert_uint_eq(s.bytes_registered, 0);
    ck_assert_int_eq(clpin_host_unregister(region), CLPIN_ERR_NOT_REGISTERED);
  } else {
    ck_assert_uint_eq(stats_of(pool).bytes_registered, 0);
  }
  clReleaseEvent(o.gate);
  free(dev_data);
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* Many non-blocking transfers from one registration: completed events are
 * dropped as new ones come (the list does not grow without bound), and
 * unregister still waits for the last. */
START_TEST(many_transfers_then_unregister) {
  size_t n = 8 * page;
  unsigned char *mem = pages(8, 10);
  CL_OK(clpin_host_register(pool, mem, n));
  cl_mem m = test_buffer(&cl, n);
  for (int i = 0; i < 200; i++) {
    size_t off = (size_t)i * 37 % (n - 1000);
    CL_OK(clpin_write(cl.queue, m, off, mem + off, 1000, NB, 0, NULL, NULL));
  }
  CL_OK(clpin_host_unregister(mem));
  CL_OK(clFinish(cl.queue));
  unsigned char *back = malloc(n);
  CL_OK(clEnqueueReadBuffer(cl.queue, m, CL_TRUE, 0, n, back, 0, NULL, NULL));
  for (int i = 0; i < 200; i++) {
    size_t off = (size_t)i * 37 % (n - 1000);
    ck_assert(!memcmp(back + off, mem + off, 1000));
  }
  free(back);
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* ---- pool release ----------------------------------------------------------- */

START_TEST(registration_goes_with_its_pool) {
  unsigned char *mem = pages(4, 11);
  CL_OK(clpin_host_register(pool, mem, 2 * page));
  CL_OK(clpin_host_register(pool, mem + 3 * page, 10));
  ck_assert_uint_eq(stats_of(pool).bytes_registered, 3 * page);
  clpin_pool *stale = pool;
  if (_i == 0)
    CL_OK(clpin_pool_release_context(cl.ctx));
  else
    clpin_shutdown();
  /* The stale pool answers its final counters and refuses registrations. */
  clpin_stats s = stats_of(stale);
  ck_assert_uint_eq(s.bytes_registered, 0);
  ck_assert_int_eq(clpin_host_register(stale, mem + 2 * page, 10), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_host_unregister(mem), CLPIN_ERR_NOT_REGISTERED);
  ck_assert_int_eq(clpin_host_unregister(mem + 3 * page), CLPIN_ERR_NOT_REGISTERED);
  /* The memory is the caller's, intact, and registers in the new pool. */
  ck_assert_uint_eq(test_check(mem, 4 * page, 11), (size_t)-1);
  CL_OK(clpin_pool_get(cl.queue, &pool));
  ck_assert_ptr_ne(pool, stale);
  CL_OK(clpin_host_register(pool, mem, 2 * page));
  cl_mem m = test_buffer(&cl, 2 * page);
  moved before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, mem, 2 * page, PIN, 0, NULL, NULL));
  assert_moved(before, 2 * page, 0);
  CL_OK(clpin_host_unregister(mem));
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* A registration belongs to its pool: memory registered in another
 * context's pool is not direct memory here. */
START_TEST(registration_is_per_pool) {
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)cl.platform, 0};
  cl_context ctx2 = clCreateContext(props, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  clpin_pool *other;
  CL_OK(clpin_pool_get_for_context(ctx2, &other));
  ck_assert_ptr_ne(other, pool);
  unsigned char *mem = pages(2, 12);
  CL_OK(clpin_host_register(other, mem, 2 * page));
  cl_mem m = test_buffer(&cl, 2 * page);
  moved before = moved_now();
  CL_OK(clpin_write(cl.queue, m, 0, mem, 2 * page, 0, 0, NULL, NULL));
  assert_moved(before, 0, 2 * page);
  /* Unregister finds it in the other pool. */
  CL_OK(clpin_host_unregister(mem));
  ck_assert_uint_eq(stats_of(other).bytes_registered, 0);
  CL_OK(clpin_pool_release_context(ctx2));
  clReleaseContext(ctx2);
  clReleaseMemObject(m);
  free(mem);
}
END_TEST

/* ---- tensors ---------------------------------------------------------------- */

START_TEST(tensor_from_registered_memory_is_direct) {
  size_t shape[2] = {64, 100}, n = 64 * 100 * sizeof(float);
  float *host = aligned_alloc(page, (n + page - 1) / page * page);
  ck_assert_ptr_nonnull(host);
  for (size_t i = 0; i < 6400; i++)
    host[i] = (float)i * 0.5f;
  CL_OK(clpin_host_register(pool, host, n));
  unsigned flags = _i ? (PIN | NB) : PIN;
  /* The copying tensor path (a discrete GPU's): on a host-unified device a
   * tensor is host memory filled by one host copy (check_unified), unless
   * CLPIN_PINNED_H2D=1. */
  size_t pinned_h2d0 = clpin_get_option(CLPIN_OPT_PINNED);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));
  moved before = moved_now();
  clpin_tensor *t = NULL;
  CL_OK(clpin_tensor_from_host(cl.queue, host, CLPIN_F32, 2, shape, flags, &t));
  /* The upload's own event: rusticl 22.3's clFinish may return before a
   * non-blocking upload (TEST_RUSTICL_FINISH) and host is overwritten next. */
  cl_event up = clpin_tensor_event(t);
  if (up)
    CL_OK(clWaitForEvents(1, &up));
  CL_OK(clFinish(cl.queue));
  assert_moved(before, n, 0);
  memset(host, 0, n);
  before = moved_now();
  cl_event ev = NULL;
  CL_OK(clpin_tensor_to_host(t, cl.queue, host, flags, _i ? &ev : NULL));
  if (ev)
    wait_event(ev);
  assert_moved(before, n, 0);
  for (size_t i = 0; i < 6400; i++)
    ck_assert_float_eq(host[i], (float)i * 0.5f);
  CL_OK(clpin_host_unregister(host));
  clpin_tensor_release(t);
  free(host);
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, pinned_h2d0));
}
END_TEST

/* ---- threads ---------------------------------------------------------------- */

#define ROUNDS 40

typedef struct {
  int id;
  bool churn; /* register and unregister a fresh region every round */
  unsigned char *mem;
  cl_mem dev;
  size_t n;
  int failures;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  unsigned char *back = malloc(w->n);
  if (!w->churn && clpin_host_register(pool, w->mem, w->n) != CL_SUCCESS)
    w->failures++;
  for (int r = 0; r < ROUNDS && back; r++) {
    unsigned seed = (unsigned)(w->id * 1000 + r);
    test_fill(w->mem, w->n, seed);
    if (w->churn && clpin_host_register(pool, w->mem, w->n) != CL_SUCCESS)
      w->failures++;
    cl_event ev = NULL;
    if (clpin_write(cl.queue, w->dev, 0, w->mem, w->n, PIN | NB, 0, NULL, &ev) != CL_SUCCESS)
      w->failures++;
    memset(back, 0, w->n);
    if (clpin_read(cl.queue, w->dev, 0, back, w->n, PIN, ev ? 1 : 0, ev ? &ev : NULL, NULL) !=
            CL_SUCCESS ||
        test_check(back, w->n, seed) != (size_t)-1)
      w->failures++;
    if (ev)
      clReleaseEvent(ev);
    /* And back into the registered region, non-blocking, left running for
     * unregister to wait on. */
    memset(w->mem, 0, w->n);
    if (clpin_read(cl.queue, w->dev, 0, w->mem, w->n, NB, 0, NULL, NULL) != CL_SUCCESS)
      w->failures++;
    if (w->churn) {
      if (clpin_host_unregister(w->mem) != CL_SUCCESS)
        w->failures++;
    } else {
      clFinish(cl.queue);
    }
    if (test_check(w->mem, w->n, seed) != (size_t)-1)
      w->failures++;
  }
  if (!w->churn && clpin_host_unregister(w->mem) != CL_SUCCESS)
    w->failures++;
  free(back);
  return NULL;
}

START_TEST(threads_register_transfer_unregister) {
  enum { NW = 4 };
  worker w[NW];
  pthread_t th[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (worker){.id = i, .churn = i % 2 == 0, .n = 3 * page + 100 * (size_t)i};
    w[i].mem = aligned_alloc(page, 4 * page);
    ck_assert_ptr_nonnull(w[i].mem);
    w[i].dev = test_buffer(&cl, w[i].n);
  }
  for (int i = 0; i < NW; i++)
    ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < NW; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < NW; i++) {
    ck_assert_msg(w[i].failures == 0, "worker %d: %d failure(s)", i, w[i].failures);
    clReleaseMemObject(w[i].dev);
    free(w[i].mem);
  }
  clpin_stats s = stats_of(pool);
  ck_assert_uint_eq(s.bytes_registered, 0);
}
END_TEST

static Suite *register_suite(void) {
  Suite *s = suite_create("register");
  TCase *tc = tcase_create("transfers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, registered_roundtrip_is_direct, 0, (int)(NPLACES * 8));
  tcase_add_loop_test(tc, range_crossing_the_edge_is_not_registered, 0, 8);
  tcase_add_test(tc, unregistered_memory_takes_the_usual_path);
  tcase_add_test(tc, bytes_registered_counts_whole_pages);
  tcase_add_test(tc, old_stats_struct_is_not_overrun);
  tcase_add_test(tc, bad_input_changes_nothing);
  tcase_add_loop_test(tc, tensor_from_registered_memory_is_direct, 0, 2);
  suite_add_tcase(s, tc);

  TCase *tl = tcase_create("lifecycle");
  tcase_add_checked_fixture(tl, setup, teardown);
  tcase_add_loop_test(tl, unregister_waits_for_gated_transfer, 0, 8);
  tcase_add_test(tl, many_transfers_then_unregister);
  tcase_add_loop_test(tl, registration_goes_with_its_pool, 0, 2);
  tcase_add_test(tl, registration_is_per_pool);
  tcase_add_test(tl, threads_register_transfer_unregister);
  suite_add_tcase(s, tl);
  return s;
}

int main(void) { return test_run_suite(register_suite()); }
