/* SPDX-License-Identifier: Apache-2.0 */
/* The process's one copy-thread budget (src/copythreads.c): every
 * pool, device and direction shares CLPIN_THREADS copy threads; transfers take
 * their parts in turn, each transfer's own copies in order.
 *
 *   default       the budget's default (3/4 of the cores, 1 ... 64) and the
 *                 per-transfer share (CLPIN_TRANSFER_THREADS, 16, at most
 *                 the budget)
 *   turns         one copy thread, three lanes queued: parts alternate between
 *                 lanes; a lane's two tasks run in order
 *   caps          six copy threads, two lanes capped at two parts at once: never
 *                 more than two of a lane's parts run at once, both lanes
 *                 run side by side, an uncapped task beside them takes the
 *                 rest of the budget
 *   growth        copy threads start as lanes need them: one lane capped at two
 *                 (a transfer's share: two) starts two of a budget of
 *                 eight, three such lanes at once six, and never more than
 *                 the budget; once the three are done the four copy threads past
 *                 one share park, and three lanes again wake them
 *   shared        several contexts on POCL's two devices (POCL_DEVICES=
 *                 "pthread pthread"): threads moving large staged transfers,
 *                 blocking and not, byte-exact, while other threads create
 *                 contexts, transfer and clpin_pool_release_context them;
 *                 never more copy threads copying at once than the budget */
#include "testutil.h"
#include "copythreads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- default ------------------------------------------------------------ */

START_TEST(default_budget) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN) * 3 / 4;
  size_t want = cores < 1 ? 1 : cores > 64 ? 64 : (size_t)cores;
  if (getenv("CLPIN_THREADS"))
    want = clpin_get_option(CLPIN_OPT_THREADS); /* the environment's */
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_THREADS), want);
  size_t share =
      getenv("CLPIN_TRANSFER_THREADS") ? clpin_get_option(CLPIN_OPT_TRANSFER_THREADS) : 16;
  ck_assert_uint_eq(clpin_get_option(CLPIN_OPT_TRANSFER_THREADS), share);
  ck_assert_uint_eq(clpin__copythreads_share(), want < share ? want : share);
  CL_OK(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, 16));
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 40));
  ck_assert_uint_eq(clpin__copythreads_share(), 16);
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 5));
  ck_assert_uint_eq(clpin__copythreads_share(), 5);
  CL_OK(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, 3));
  ck_assert_uint_eq(clpin__copythreads_share(), 3);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, 0), CLPIN_ERR_INVALID_OPTION);
  ck_assert_int_eq(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, 257), CLPIN_ERR_INVALID_OPTION);
  ck_assert_uint_eq(clpin__copythreads_share(), 3);
}
END_TEST

/* ---- turns -------------------------------------------------------------- */

static struct {
  pthread_mutex_t mu;
  char log[64];
  size_t n;
  atomic_bool go, started;
  atomic_int done;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void blocker_run(void *arg, size_t part) {
  (void)arg;
  (void)part;
  atomic_store(&F.started, true);
  while (!atomic_load(&F.go))
    test_sleep_us(200);
}

static void log_run(void *arg, size_t part) {
  (void)part;
  pthread_mutex_lock(&F.mu);
  if (F.n < sizeof F.log - 1)
    F.log[F.n++] = *(const char *)arg;
  pthread_mutex_unlock(&F.mu);
}

static void count_done(void *arg) {
  (void)arg;
  atomic_fetch_add(&F.done, 1);
}

START_TEST(lanes_take_turns) {
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 1));
  clpin__copythreads_stats st;
  clpin__copythreads_stats_get(&st, true);
  /* The one copy thread waits in the blocker while the lanes fill. */
  clpin__task blocker = {.run = blocker_run, .done = count_done, .nparts = 1};
  clpin__copythreads_submit(&blocker);
  for (int i = 0; i < 20000 && !atomic_load(&F.started); i++)
    test_sleep_us(100);
  ck_assert_msg(atomic_load(&F.started), "no copy thread started");
  static const char a1 = 'a', a2 = 'A', b = 'b', c = 'c';
  clpin__lane la = {0}, lb = {0};
  clpin__task t[4] = {
      {.run = log_run, .done = count_done, .arg = (void *)&a1, .nparts = 4, .lane = &la},
      {.run = log_run, .done = count_done, .arg = (void *)&a2, .nparts = 4, .lane = &la},
      {.run = log_run, .done = count_done, .arg = (void *)&b, .nparts = 8, .lane = &lb},
      {.run = log_run, .done = count_done, .arg = (void *)&c, .nparts = 2}, /* a lane of its own */
  };
  for (int i = 0; i < 4; i++)
    clpin__copythreads_submit(&t[i]);
  atomic_store(&F.go, true);
  for (int i = 0; i < 50000 && atomic_load(&F.done) < 5; i++)
    test_sleep_us(100);
  ck_assert_int_eq(atomic_load(&F.done), 5);
  pthread_mutex_lock(&F.mu);
  F.log[F.n] = '\0';
  /* Lanes in turn, one part each; lane a's second task after its first.
   * (The FIFO this replaced ran "aaaaAAAAbbbbbbbbcc".) */
  ck_assert_str_eq(F.log, "abcabcababAbAbAbAb");
  pthread_mutex_unlock(&F.mu);
  ck_assert(!la.ringed && !la.head && !lb.ringed && !lb.head);
  clpin__copythreads_stats_get(&st, false);
  ck_assert_uint_eq(st.budget, 1);
  ck_assert_uint_eq(st.threads, 1);
  ck_assert_uint_eq(st.max_busy, 1);
  ck_assert_uint_eq(st.parts, 19);
  ck_assert_uint_eq(st.helped, 0);
}
END_TEST

/* ---- caps --------------------------------------------------------------- */

#define CAP_THREADS 6
#define CAP 2
#define CAP_PARTS 12

/* Parts that sleep a while and count how many of their task's (the lane's)
 * and of all run at once. */
typedef struct {
  atomic_int now, most;
} gauge;
static gauge G_lane[3], G_all;

static void gauge_enter(gauge *g) {
  int v = atomic_fetch_add(&g->now, 1) + 1;
  for (int m = atomic_load(&g->most); v > m && !atomic_compare_exchange_weak(&g->most, &m, v);)
    ;
}

static void gauged_run(void *arg, size_t part) {
  (void)part;
  gauge *g = arg;
  gauge_enter(g);
  gauge_enter(&G_all);
  test_sleep_us(3000);
  atomic_fetch_sub(&G_all.now, 1);
  atomic_fetch_sub(&g->now, 1);
}

START_TEST(lane_caps) {
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, CAP_THREADS));
  ck_assert_uint_eq(clpin__copythreads_start(), CAP_THREADS);
  clpin__copythreads_stats st;
  clpin__copythreads_stats_get(&st, true);
  atomic_store(&F.done, 0);
  clpin__lane la = {.cap = CAP}, lb = {.cap = CAP};
  clpin__task t[5] = {
      {.run = gauged_run, .done = count_done, .arg = &G_lane[0], .nparts = CAP_PARTS, .lane = &la},
      {.run = gauged_run, .done = count_done, .arg = &G_lane[0], .nparts = CAP_PARTS, .lane = &la},
      {.run = gauged_run, .done = count_done, .arg = &G_lane[1], .nparts = CAP_PARTS, .lane = &lb},
      {.run = gauged_run, .done = count_done, .arg = &G_lane[1], .nparts = CAP_PARTS, .lane = &lb},
      /* A lane of its own, no cap. */
      {.run = gauged_run, .done = count_done, .arg = &G_lane[2], .nparts = CAP_PARTS},
  };
  for (int i = 0; i < 5; i++)
    clpin__copythreads_submit(&t[i]);
  for (int i = 0; i < 200000 && atomic_load(&F.done) < 5; i++)
    test_sleep_us(100);
  ck_assert_int_eq(atomic_load(&F.done), 5);
  /* A capped lane never had more parts running than its cap, across its
   * two tasks, and reached it; the lanes ran side by side (more parts at
   * once than one cap), never more than the copy threads. How far past that
   * depends on the scheduler: under valgrind, which runs one thread at a
   * time, the uncapped task got two copy threads, elsewhere up to four. */
  int most_a = atomic_load(&G_lane[0].most), most_b = atomic_load(&G_lane[1].most);
  int most_c = atomic_load(&G_lane[2].most), most_all = atomic_load(&G_all.most);
  ck_assert_int_eq(most_a, CAP);
  ck_assert_int_eq(most_b, CAP);
  ck_assert_int_ge(most_c, 1);
  ck_assert_int_gt(most_all, CAP);
  ck_assert_int_le(most_all, CAP_THREADS);
  ck_assert(!la.ringed && !la.head && !lb.ringed && !lb.head);
  ck_assert_uint_eq(la.running, 0);
  ck_assert_uint_eq(lb.running, 0);
  clpin__copythreads_stats_get(&st, false);
  ck_assert_uint_eq(st.max_lane, CAP);
  ck_assert_uint_eq(st.parts, 5 * CAP_PARTS);
  ck_assert_uint_eq(st.helped, 0);
}
END_TEST

/* ---- growth ------------------------------------------------------------- */

/* Run `lanes` lanes capped at CAP side by side, CAP_PARTS / 2 parts each,
 * and return the copy threads that exist afterwards. */
static size_t run_lanes(int lanes) {
  clpin__lane l[3] = {{.cap = CAP}, {.cap = CAP}, {.cap = CAP}};
  clpin__task t[3];
  atomic_store(&F.done, 0);
  atomic_store(&G_all.most, 0);
  for (int i = 0; i < lanes; i++) {
    t[i] = (clpin__task){.run = gauged_run,
                         .done = count_done,
                         .arg = &G_lane[i],
                         .nparts = CAP_PARTS / 2,
                         .lane = &l[i]};
    clpin__copythreads_submit(&t[i]);
  }
  for (int i = 0; i < 200000 && atomic_load(&F.done) < lanes; i++)
    test_sleep_us(100);
  ck_assert_int_eq(atomic_load(&F.done), lanes);
  for (int i = 0; i < lanes; i++)
    ck_assert(!l[i].active && !l[i].ringed && l[i].running == 0);
  clpin__copythreads_stats st;
  clpin__copythreads_stats_get(&st, false);
  return st.threads;
}

/* The copy threads parked once `want` are (the idle ones park after polling). */
static size_t wait_parked(size_t want) {
  clpin__copythreads_stats st = {0};
  for (int i = 0; i < 50000; i++) {
    clpin__copythreads_stats_get(&st, false);
    if (st.parked == want)
      break;
    test_sleep_us(100);
  }
  return st.parked;
}

START_TEST(threads_grow_with_lanes) {
  clpin__copythreads_shutdown(); /* none started yet */
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 8));
  CL_OK(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, CAP));
  ck_assert_uint_eq(run_lanes(1), CAP);
  ck_assert_uint_eq(run_lanes(1), CAP);
  ck_assert_uint_eq(wait_parked(0), 0);
  ck_assert_uint_eq(run_lanes(3), 3 * CAP);
  ck_assert_int_gt(atomic_load(&G_all.most), CAP); /* past one share's copy threads */
  /* One share's copy threads stay; the rest park, and wake for three lanes. */
  ck_assert_uint_eq(wait_parked(2 * CAP), 2 * CAP);
  ck_assert_uint_eq(run_lanes(1), 3 * CAP);
  ck_assert_uint_eq(wait_parked(2 * CAP), 2 * CAP);
  ck_assert_uint_eq(run_lanes(3), 3 * CAP);
  ck_assert_int_gt(atomic_load(&G_all.most), CAP); /* parked copy threads woke */
  clpin__copythreads_shutdown();
  ck_assert_uint_eq(wait_parked(0), 0);
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 3));
  ck_assert_uint_eq(run_lanes(3), 3);
  clpin__copythreads_shutdown();
}
END_TEST

/* ---- shared ------------------------------------------------------------- */

#define BUDGET 3
#define MOVERS 4   /* threads with a context each, transferring */
#define CHURNERS 2 /* threads making and releasing contexts meanwhile */
#define BIG ((size_t)6 << 20)

static struct {
  cl_platform_id platform;
  cl_device_id dev[4];
  cl_uint ndev;
  atomic_bool stop;
  atomic_long moved, released;
  long rounds;
} S;

typedef struct {
  int id;
  char failure[200];
} worker_arg;

static void note_failure(worker_arg *w, const char *what, cl_int err) {
  if (!w->failure[0])
    snprintf(w->failure, sizeof w->failure, "thread %d: %s (%d, %s)", w->id, what, (int)err,
             clpin_strerror(err));
}

/* Write src to a fresh buffer through clpin, read it back into dst through
 * clpin (non-blocking on odd rounds), compare. */
static void round_trip(worker_arg *w, cl_context ctx, cl_command_queue q, unsigned char *src,
                       unsigned char *dst, size_t n, unsigned seed, bool nb) {
  cl_int err;
  cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, &err);
  if (err != CL_SUCCESS)
    return note_failure(w, "clCreateBuffer", err);
  test_fill(src, n, seed);
  memset(dst, 0, n);
  unsigned flags = CLPIN_PIN_MEMORY | (nb ? CLPIN_NON_BLOCKING : 0);
  cl_event ev = NULL;
  err = clpin_write(q, buf, 0, src, n, flags, 0, NULL, nb ? &ev : NULL);
  if (err == CL_SUCCESS && nb) {
    err = clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
    ev = NULL;
  }
  if (err == CL_SUCCESS)
    err = clpin_read(q, buf, 0, dst, n, flags, 0, NULL, nb ? &ev : NULL);
  if (err == CL_SUCCESS && nb) {
    err = clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
  }
  clReleaseMemObject(buf);
  if (err != CL_SUCCESS)
    return note_failure(w, "transfer", err);
  size_t bad = test_check(dst, n, seed);
  if (bad != (size_t)-1 && !w->failure[0])
    snprintf(w->failure, sizeof w->failure, "thread %d: byte %zu of %zu differs (seed %u)", w->id,
             bad, n, seed);
}

static cl_context make_ctx(worker_arg *w, cl_device_id dev, cl_command_queue *q) {
  cl_int err;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)S.platform, 0};
  cl_context ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
  if (err != CL_SUCCESS) {
    note_failure(w, "clCreateContext", err);
    return NULL;
  }
  *q = clCreateCommandQueue(ctx, dev, 0, &err);
  if (err != CL_SUCCESS) {
    note_failure(w, "clCreateCommandQueue", err);
    clReleaseContext(ctx);
    return NULL;
  }
  return ctx;
}

static void *mover(void *arg) {
  worker_arg *w = arg;
  cl_command_queue q;
  cl_context ctx = make_ctx(w, S.dev[(cl_uint)w->id % S.ndev], &q);
  unsigned char *src = malloc(BIG), *dst = malloc(BIG);
  for (long r = 0; ctx && src && dst && r < S.rounds && !w->failure[0]; r++) {
    /* Sizes that are no multiple of a chunk or a page. */
    size_t n = BIG - (size_t)r * 12345 % (BIG / 3);
    round_trip(w, ctx, q, src, dst, n, (unsigned)(w->id * 1000 + r), r % 2 == 1);
    atomic_fetch_add(&S.moved, 1);
  }
  if (ctx) {
    cl_int err = clpin_pool_release_context(ctx);
    if (err != CL_SUCCESS)
      note_failure(w, "clpin_pool_release_context", err);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
  }
  free(src);
  free(dst);
  return NULL;
}

/* Contexts made, used once and released while the movers run. */
static void *churner(void *arg) {
  worker_arg *w = arg;
  size_t n = BIG / 2 + 4096 * (size_t)w->id;
  /* keep: the source of the write left in flight, untouched until its
   * event has ended. */
  unsigned char *src = malloc(n), *dst = malloc(n), *keep = malloc(n);
  for (unsigned k = 0; src && dst && keep && !atomic_load(&S.stop) && !w->failure[0]; k++) {
    cl_command_queue q;
    cl_context ctx = make_ctx(w, S.dev[(k + (unsigned)w->id) % S.ndev], &q);
    if (!ctx)
      break;
    /* A non-blocking write left in flight: the release drains it. */
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n, NULL, NULL);
    cl_event ev = NULL;
    test_fill(keep, n, k);
    cl_int err =
        buf ? clpin_write(q, buf, 0, keep, n, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev)
            : CL_OUT_OF_HOST_MEMORY;
    if (err == CL_SUCCESS && k % 2 == 0)
      round_trip(w, ctx, q, src, dst, n, k + 7, false);
    cl_int rel = clpin_pool_release_context(ctx);
    if (err != CL_SUCCESS)
      note_failure(w, "non-blocking write", err);
    if (rel != CL_SUCCESS)
      note_failure(w, "clpin_pool_release_context", rel);
    if (ev) {
      clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
    if (buf)
      clReleaseMemObject(buf);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    atomic_fetch_add(&S.released, 1);
  }
  free(src);
  free(dst);
  free(keep);
  return NULL;
}

START_TEST(shared_budget) {
  test_cl t;
  test_cl_open(&t);
  S.platform = t.platform;
  CL_OK(clGetDeviceIDs(S.platform, CL_DEVICE_TYPE_ALL, 4, S.dev, &S.ndev));
  ck_assert_uint_ge(S.ndev, 1);
  S.rounds = test_env_count("BUDGET_ROUNDS", 10);
  test_stage_everything((size_t)1 << 20);
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, BUDGET));
  CL_OK(clpin_set_option(CLPIN_OPT_TRANSFER_THREADS, BUDGET - 1));
  clpin__copythreads_stats st;
  clpin__copythreads_stats_get(&st, true);
  worker_arg m[MOVERS] = {0}, c[CHURNERS] = {0};
  pthread_t mt[MOVERS], ct[CHURNERS];
  for (int i = 0; i < CHURNERS; i++) {
    c[i].id = 100 + i;
    ck_assert_int_eq(pthread_create(&ct[i], NULL, churner, &c[i]), 0);
  }
  for (int i = 0; i < MOVERS; i++) {
    m[i].id = i;
    ck_assert_int_eq(pthread_create(&mt[i], NULL, mover, &m[i]), 0);
  }
  for (int i = 0; i < MOVERS; i++)
    pthread_join(mt[i], NULL);
  atomic_store(&S.stop, true);
  for (int i = 0; i < CHURNERS; i++)
    pthread_join(ct[i], NULL);
  for (int i = 0; i < MOVERS; i++)
    ck_assert_msg(!m[i].failure[0], "%s", m[i].failure);
  for (int i = 0; i < CHURNERS; i++)
    ck_assert_msg(!c[i].failure[0], "%s", c[i].failure);
  ck_assert_int_eq(atomic_load(&S.moved), MOVERS * S.rounds);
  ck_assert_int_ge(atomic_load(&S.released), 1);
  clpin__copythreads_stats_get(&st, false);
  /* The budget held: never more copy threads, nor more of them copying
   * at once; callers only help with their own transfers' copies. */
  ck_assert_uint_eq(st.budget, BUDGET);
  ck_assert_uint_le(st.threads, BUDGET);
  ck_assert_uint_ge(st.max_busy, 1);
  ck_assert_uint_le(st.max_busy, BUDGET);
  ck_assert_uint_le(st.max_running, BUDGET + MOVERS + CHURNERS);
  /* No transfer had more than its share of the copy threads at once. */
  ck_assert_uint_ge(st.max_lane, 1);
  ck_assert_uint_le(st.max_lane, BUDGET - 1);
  ck_assert_uint_gt(st.parts, st.helped);
  test_shutdown_close(&t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("budget");
  /* First: the default is read before any test sets the option. */
  TCase *tc = test_tcase(s, "default", NULL, NULL, 0);
  tcase_add_test(tc, default_budget);
  tc = test_tcase(s, "turns", NULL, NULL, 0);
  tcase_add_test(tc, lanes_take_turns);
  tc = test_tcase(s, "caps", NULL, NULL, 0);
  tcase_add_test(tc, lane_caps);
  tc = test_tcase(s, "growth", NULL, NULL, 0);
  tcase_add_test(tc, threads_grow_with_lanes);
  tc = test_tcase(s, "shared", NULL, NULL, 600);
  tcase_add_test(tc, shared_budget);
  return test_run_suite(s);
}
