/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fault injection: every OpenCL call clpin makes, failed once (and failed for
 * good from then on), in every scenario, through the fault layer
 * (tests/faultlayer, loaded by ocl-icd from OPENCL_LAYERS).
 *
 * For each scenario the sweep first runs it without faults and counts the
 * calls of each wrapped entry point inside the scenario's operation. Then,
 * for every entry point E it saw called c times and every N in 1..c, it runs
 * the scenario afresh (own context, own pool) with the N-th call of E failing
 * (mode "once"), and again with every call of E from the N-th on failing
 * (mode "always"), and checks:
 *   - the operation returned CL_SUCCESS (a retry or the documented fallback
 *     worked, and then its result is right) or exactly the injected code, and
 *     a failed call changed nothing (pool gauges and output arguments);
 *   - the pool's stats invariant (cached + in_use + in_flight == reserved) and
 *     the driver's view (live buffers == the blocks the pool holds);
 *   - the next operations (acquire, release, staging) succeed;
 *   - after clpin_pool_release_context and closing the test's context, every
 *     OpenCL object the layer saw created is released again (buffers,
 *     events, queues, context references), and nothing was released twice.
 * Host memory leaks are LeakSanitizer's job: the asan stage runs this suite.
 * A table scenario x entry x N x mode -> outcome is printed to stdout.
 */
#include "faultlayer.h"
#include "testutil.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Seconds one faulted run may take (generous for TSan and valgrind). */
#define RUN_ALARM_S 120

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int entry(const char *name) {
  int e = faultlayer_entry_index(name);
  ck_assert_msg(e >= 0, "the layer does not wrap %s", name);
  return e;
}

static void live_all(long out[FAULTLAYER_KIND_COUNT]) {
  for (int k = 0; k < FAULTLAYER_KIND_COUNT; k++)
    out[k] = faultlayer_live((faultlayer_kind)k);
}

/* A short printable name for an error code: "CL_OUT_OF_RESOURCES". */
static const char *code_name(cl_int code, char *buf, size_t n) {
  const char *s = clpin_strerror(code);
  size_t len = strcspn(s, ":");
  if (len >= n)
    len = n - 1;
  memcpy(buf, s, len);
  buf[len] = 0;
  return buf;
}

/* Completes a user event from another thread after a delay, through the raw
 * entry, so a clpin call that waits for it synchronously returns. */
typedef struct {
  cl_event event;
  cl_int status;
  long delay_ms;
  pthread_t thread;
  int started;
} completer;

static void *completer_main(void *arg) {
  completer *c = arg;
  sleep_ms(c->delay_ms);
  faultlayer_raw_set_user_event_status(c->event, c->status);
  return NULL;
}

static void completer_start(completer *c, cl_event e, cl_int status, long delay_ms) {
  c->event = e;
  c->status = status;
  c->delay_ms = delay_ms;
  ck_assert_int_eq(pthread_create(&c->thread, NULL, completer_main, c), 0);
  c->started = 1;
}

static void completer_join(completer *c) {
  if (c->started)
    pthread_join(c->thread, NULL);
  c->started = 0;
}

/* ------------------------------------------------------------------------ */
/* The fixture of one run                                                   */
/* ------------------------------------------------------------------------ */

#define PROBLEM_MAX 1024

typedef struct {
  test_cl cl;
  clpin_pool *pool;
  int pool_gone;        /* released by the scenario (release_context, shutdown) */
  clpin_block *blk[4];  /* blocks the test owns (in use) */
  cl_event ev[2];       /* events the test owns */
  completer done[2];    /* threads completing ev[] */
  void *hostp;          /* from clpin_host_alloc, owned by the test */
  clpin_block *out_blk; /* output argument of the operation */
  void *out_ptr;
  cl_event out_ev;          /* event handed out by the operation */
  cl_mem dev;               /* device buffer of staging scenarios */
  long own_mem;             /* buffers the test holds (not pool blocks) */
  unsigned char *src, *dst; /* host sides of staging scenarios */
  size_t n;                 /* bytes they move */
  int hung;                 /* an event never completed: stop the sweep */
  int event_failed;         /* a non-blocking transfer's event failed */
  clpin_tensor *tensor;     /* the tensor of tensor scenarios, the test's */
  unsigned char *regmem;    /* page-aligned memory of register scenarios, the test's */
  clpin_stats before;       /* stats right before the operation */
  char problems[PROBLEM_MAX];
} fx;

static void problem(fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(fx *f, const char *fmt, ...) {
  size_t used = strlen(f->problems);
  if (used + 4 >= sizeof f->problems)
    return;
  if (used)
    strcat(f->problems, "; ");
  used = strlen(f->problems);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->problems + used, sizeof f->problems - used, fmt, ap);
  va_end(ap);
}

#define SENTINEL_EVENT ((cl_event)(uintptr_t)0x6b6b6b6b)
static const clpin_block *const SENTINEL_BLOCK = (const clpin_block *)(uintptr_t)0x5a5a5a5a;

static size_t blocks_held(const clpin_stats *s) {
  return s->blocks_cached + s->blocks_in_use + s->blocks_in_flight;
}

static void check_invariant(fx *f, const char *when) {
  clpin_stats s;
  if (f->pool_gone || !f->pool)
    return;
  if (test_stats_get(f->pool, &s) != CL_SUCCESS) {
    problem(f, "%s: clpin_pool_stats failed", when);
    return;
  }
  char why[256];
  if (test_stats_broken(&s, why, sizeof why))
    problem(f, "%s: invariant broken: %s", when, why);
}

/* The gauges a failed call must leave alone. */
static int same_gauges(const clpin_stats *a, const clpin_stats *b) {
  return a->blocks_cached == b->blocks_cached && a->bytes_cached == b->bytes_cached &&
         a->blocks_in_use == b->blocks_in_use && a->bytes_in_use == b->bytes_in_use &&
         a->blocks_in_flight == b->blocks_in_flight && a->bytes_in_flight == b->bytes_in_flight &&
         a->bytes_requested == b->bytes_requested && a->bytes_reserved == b->bytes_reserved;
}

/* Wait (bounded) until no block of the pool is in flight. */
static int drain(fx *f, double seconds) {
  clpin_stats s;
  double end = now_s() + seconds;
  do {
    if (f->pool_gone || !f->pool || test_stats_get(f->pool, &s) != CL_SUCCESS)
      return 1;
    if (s.blocks_in_flight == 0)
      return 1;
    sleep_ms(1);
  } while (now_s() < end);
  return 0;
}

static void open_pool(fx *f) { CL_OK(clpin_pool_get(f->cl.queue, &f->pool)); }

static clpin_block *acquire_ok(fx *f, size_t n) {
  clpin_block *b = NULL;
  CL_OK(clpin_acquire(f->pool, n, &b));
  ck_assert_ptr_nonnull(b);
  return b;
}

static cl_event user_event(fx *f) {
  cl_int err;
  cl_event e = clCreateUserEvent(f->cl.ctx, &err);
  CL_OK(err);
  return e;
}

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                */
/* ------------------------------------------------------------------------ */

/* setup: unfaulted preparation; op: the operation under test, the only code
 * that runs with a fault armed (it may only call clpin and the layer's raw
 * entries); check: what its result must look like, rc being op's return. */
typedef struct {
  const char *group; /* "pool", "staging", "tensor", "zerocopy": one CTest test each */
  const char *name;
  void (*setup)(fx *f);
  cl_int (*op)(fx *f);
  void (*check)(fx *f, cl_int rc);
} scenario;

/* -- pool_get: first use creates the pool -------------------------------- */

static void setup_nothing(fx *f) { (void)f; }

static cl_int op_pool_get(fx *f) {
  f->pool = NULL;
  return clpin_pool_get(f->cl.queue, &f->pool);
}

static void check_pool_get(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS && f->pool)
    problem(f, "failed clpin_pool_get set *pool");
  if (rc == CL_SUCCESS && !f->pool)
    problem(f, "clpin_pool_get succeeded without a pool");
  if (!f->pool) {
    cl_int again = clpin_pool_get(f->cl.queue, &f->pool);
    if (again != CL_SUCCESS)
      problem(f, "clpin_pool_get after the fault -> %d", again);
  }
}

/* -- acquire ------------------------------------------------------------- */

static void setup_pool(fx *f) { open_pool(f); }

static cl_int op_acquire(fx *f) {
  f->out_blk = (clpin_block *)SENTINEL_BLOCK;
  return clpin_acquire(f->pool, 65536, &f->out_blk);
}

static void check_acquire(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc != CL_SUCCESS) {
    if (f->out_blk != SENTINEL_BLOCK)
      problem(f, "failed clpin_acquire changed *block");
    if (!same_gauges(&f->before, &s))
      problem(f, "failed clpin_acquire changed the pool gauges");
    f->out_blk = NULL;
    return;
  }
  if (!f->out_blk || f->out_blk == SENTINEL_BLOCK) {
    problem(f, "clpin_acquire succeeded without a block");
    f->out_blk = NULL;
    return;
  }
  void *h = clpin_block_host(f->out_blk);
  if (!h || clpin_block_size(f->out_blk) < 65536 || !clpin_block_buffer(f->out_blk)) {
    problem(f, "acquired block has no host pointer, size or buffer");
  } else {
    test_fill(h, 65536, 7);
    if (test_check(h, 65536, 7) != (size_t)-1)
      problem(f, "acquired block does not hold what was written");
  }
  if (s.blocks_in_use != f->before.blocks_in_use + 1)
    problem(f, "blocks_in_use %zu after one acquire (was %zu)", s.blocks_in_use,
            f->before.blocks_in_use);
  f->blk[0] = f->out_blk;
  f->out_blk = NULL;
}

static void setup_cached(fx *f) {
  open_pool(f);
  clpin_block *b = acquire_ok(f, 65536);
  CL_OK(clpin_release(b, NULL));
}

/* -- release ------------------------------------------------------------- */

static void setup_in_use(fx *f) {
  open_pool(f);
  f->blk[0] = acquire_ok(f, 65536);
  test_fill(clpin_block_host(f->blk[0]), 65536, 3);
}

static cl_int op_release(fx *f) { return clpin_release(f->blk[0], NULL); }

/* After a release: the block is the pool's (or still the caller's if the
 * release failed, and then releasing it again must work). */
static void check_released(fx *f, cl_int rc, int expect_cached) {
  clpin_stats s;
  if (!drain(f, 3.0))
    problem(f, "a released block stayed in flight after its event completed");
  test_stats_get(f->pool, &s);
  if (rc != CL_SUCCESS) {
    /* Still the caller's; nothing changed but possibly an event retained and
     * dropped again. */
    if (s.blocks_in_use != f->before.blocks_in_use)
      problem(f, "failed clpin_release changed blocks_in_use");
    cl_int again = clpin_release(f->blk[0], NULL);
    if (again != CL_SUCCESS)
      problem(f, "releasing the block again after a failed release -> %d", again);
    f->blk[0] = NULL;
    return;
  }
  f->blk[0] = NULL;
  if (s.blocks_in_use != f->before.blocks_in_use - 1)
    problem(f, "blocks_in_use %zu after release (was %zu)", s.blocks_in_use,
            f->before.blocks_in_use);
  if (expect_cached && s.blocks_cached != f->before.blocks_cached + 1)
    problem(f, "released block not cached (cached %zu, was %zu)", s.blocks_cached,
            f->before.blocks_cached);
  /* The block must not be handed out twice: a double release is refused. */
}

static void check_release(fx *f, cl_int rc) { check_released(f, rc, 1); }

static void setup_pending_user(fx *f) {
  setup_in_use(f);
  f->ev[0] = user_event(f);
}

/* Pending user event, completed 5 ms later by another thread. */
static cl_int op_release_pending(fx *f) {
  completer_start(&f->done[0], f->ev[0], CL_COMPLETE, 5);
  cl_int rc = clpin_release(f->blk[0], f->ev[0]);
  completer_join(&f->done[0]);
  drain(f, 3.0);
  return rc;
}

/* Pending user event that completes with an error status: the block is
 * reused all the same. */
static cl_int op_release_pending_error(fx *f) {
  completer_start(&f->done[0], f->ev[0], CL_INVALID_OPERATION, 5);
  cl_int rc = clpin_release(f->blk[0], f->ev[0]);
  completer_join(&f->done[0]);
  drain(f, 3.0);
  return rc;
}

static void setup_pending_done(fx *f) {
  setup_pending_user(f);
  CL_OK(clSetUserEventStatus(f->ev[0], CL_COMPLETE));
}

/* Pending event already complete: POCL runs the callback inline. */
static cl_int op_release_pending_done(fx *f) {
  cl_int rc = clpin_release(f->blk[0], f->ev[0]);
  drain(f, 3.0);
  return rc;
}

/* Over the cap, a release frees the block. */
static void setup_over_cap(fx *f) {
  setup_in_use(f);
  CL_OK(clpin_pool_set_limit(f->pool, 0));
}

static void check_release_freed(fx *f, cl_int rc) {
  check_released(f, rc, 0);
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc == CL_SUCCESS && s.blocks_cached != 0)
    problem(f, "a release over a cap of 0 cached the block");
}

/* -- trim and set_limit -------------------------------------------------- */

static void setup_three_cached(fx *f) {
  open_pool(f);
  clpin_block *a = acquire_ok(f, 4096);
  clpin_block *b = acquire_ok(f, 65536);
  clpin_block *c = acquire_ok(f, 1 << 20);
  CL_OK(clpin_release(a, NULL));
  CL_OK(clpin_release(b, NULL));
  CL_OK(clpin_release(c, NULL));
  f->blk[1] = acquire_ok(f, 8192); /* one in use that trim must keep */
}

static cl_int op_trim(fx *f) { return clpin_pool_trim(f->pool); }

static void check_trim(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc == CL_SUCCESS && s.bytes_cached != 0 && s.blocks_cached == f->before.blocks_cached)
    problem(f, "clpin_pool_trim succeeded and freed nothing");
  if (s.blocks_in_use != 1)
    problem(f, "clpin_pool_trim touched the block in use");
}

static cl_int op_set_limit(fx *f) { return clpin_pool_set_limit(f->pool, 65536); }

static void check_set_limit(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc == CL_SUCCESS && s.bytes_cached > 65536)
    problem(f, "bytes_cached %zu over the new cap 65536", s.bytes_cached);
  if (s.blocks_in_use != 1)
    problem(f, "clpin_pool_set_limit touched the block in use");
}

/* -- host_alloc / host_free ---------------------------------------------- */

/* What op returns for a call that reports failure by returning NULL. */
#define RC_NULL 1

static cl_int op_host_alloc(fx *f) {
  f->out_ptr = clpin_host_alloc(f->pool, 10000);
  return f->out_ptr ? CL_SUCCESS : RC_NULL;
}

static void check_host_alloc(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc != CL_SUCCESS) {
    if (!same_gauges(&f->before, &s))
      problem(f, "failed clpin_host_alloc changed the pool gauges");
    return;
  }
  test_fill(f->out_ptr, 10000, 5);
  size_t off = 1;
  if (!clpin_pool_find(f->pool, f->out_ptr, 10000, &off) || off != 0)
    problem(f, "clpin_pool_find does not find host_alloc memory");
  f->hostp = f->out_ptr;
  f->out_ptr = NULL;
}

static void setup_host_alloced(fx *f) {
  open_pool(f);
  f->hostp = clpin_host_alloc(f->pool, 10000);
  ck_assert_ptr_nonnull(f->hostp);
}

static cl_int op_host_free(fx *f) { return clpin_host_free(f->hostp); }

static void check_host_free(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc != CL_SUCCESS) {
    cl_int again = clpin_host_free(f->hostp);
    if (again != CL_SUCCESS)
      problem(f, "clpin_host_free again after a failed free -> %d", again);
  } else if (s.blocks_in_use != f->before.blocks_in_use - 1) {
    problem(f, "clpin_host_free left blocks_in_use at %zu", s.blocks_in_use);
  }
  f->hostp = NULL;
}

/* -- release_context and shutdown ---------------------------------------- */

/* A pool holding a cached block, a block in use (blk[0]) and a block in
 * flight on a user event that another thread completes during the op. */
static void setup_full_pool(fx *f) {
  open_pool(f);
  clpin_block *c = acquire_ok(f, 4096);
  clpin_block *p = acquire_ok(f, 65536);
  f->blk[0] = acquire_ok(f, 1 << 20);
  CL_OK(clpin_release(c, NULL));
  f->ev[0] = user_event(f);
  CL_OK(clpin_release(p, f->ev[0]));
}

static cl_int op_release_context(fx *f) {
  completer_start(&f->done[0], f->ev[0], CL_COMPLETE, 5);
  cl_int rc = clpin_pool_release_context(f->cl.ctx);
  completer_join(&f->done[0]);
  return rc;
}

static void check_pool_released(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS) {
    /* Must be retryable: the second call frees what is left. */
    cl_int again = clpin_pool_release_context(f->cl.ctx);
    if (again != CL_SUCCESS)
      problem(f, "clpin_pool_release_context again after a failure -> %d", again);
  }
  cl_int st = clpin_pool_trim(f->pool);
  if (st != CLPIN_ERR_POOL_RELEASED)
    problem(f, "trim on a released pool -> %d, want CLPIN_ERR_POOL_RELEASED", st);
  cl_int rel = clpin_release(f->blk[0], NULL);
  if (rel != CLPIN_ERR_POOL_RELEASED)
    problem(f, "releasing a block of a released pool -> %d, want CLPIN_ERR_POOL_RELEASED", rel);
  f->blk[0] = NULL;
  f->pool_gone = 1;
}

static cl_int op_shutdown(fx *f) {
  completer_start(&f->done[0], f->ev[0], CL_COMPLETE, 5);
  clpin_shutdown();
  completer_join(&f->done[0]);
  return CL_SUCCESS;
}

static void check_shutdown(fx *f, cl_int rc) { check_pool_released(f, rc); }

/* -- staging ------------------------------------------------------------- */

/* Staging runs with a small chunk so that 48 KiB is staged through one block
 * and 512 KiB pipelined through 4 slots in 8 chunks (slots are reused, which
 * is where callbacks and gates matter); two copy threads. */
#define STAGE_CHUNK ((size_t)64 << 10)
#define SMALL ((size_t)48 << 10)
#define LARGE ((size_t)512 << 10)

static void staging_options(void) {
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, STAGE_CHUNK));
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, 1));    /* stage on POCL too */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN, 0)); /* stage every size: the paths under test */
  CL_OK(clpin_set_option(CLPIN_OPT_STAGE_MIN_H2D, 0));
  CL_OK(clpin_set_option(CLPIN_OPT_THREADS, 2));
}

static void setup_staging(fx *f, size_t n) {
  staging_options();
  open_pool(f);
  f->n = n;
  f->dev = test_buffer(&f->cl, LARGE);
  f->own_mem = 1;
  f->src = malloc(n);
  f->dst = malloc(n);
  ck_assert_ptr_nonnull(f->src);
  ck_assert_ptr_nonnull(f->dst);
  test_fill(f->src, n, 21);
  memset(f->dst, 0, n);
  /* The device holds pattern 22 for reads (and as the "old" data writes
   * must replace). */
  unsigned char *init = malloc(LARGE);
  ck_assert_ptr_nonnull(init);
  test_fill(init, LARGE, 22);
  CL_OK(clEnqueueWriteBuffer(f->cl.queue, f->dev, CL_TRUE, 0, LARGE, init, 0, NULL, NULL));
  free(init);
}

static void setup_small(fx *f) { setup_staging(f, SMALL); }
static void setup_large(fx *f) { setup_staging(f, LARGE); }

/* Wait (bounded) for the event the operation handed out; a fault must never
 * leave it pending forever. Raw calls: the test's own, not clpin's. */
static void wait_out_event(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS || !f->out_ev)
    return;
  double end = now_s() + 10.0;
  cl_int st;
  while ((st = faultlayer_raw_event_status(f->out_ev)) > CL_COMPLETE && now_s() < end)
    sleep_ms(1);
  if (st > CL_COMPLETE) {
    problem(f, "the transfer's event never completed (status %d)", st);
    f->hung = 1;
  } else if (st < 0) {
    /* A non-blocking transfer returns before its work is done: a fault
     * after the return can only reach the caller through the event, as a
     * driver's own non-blocking command does. The event must have failed
     * with an error code, and the data is not checked (a write may have
     * landed in part). */
    f->event_failed = 1;
  }
}

static cl_int op_write(fx *f, unsigned flags) {
  f->out_ev = (flags & CLPIN_NON_BLOCKING) ? SENTINEL_EVENT : NULL;
  cl_int rc = clpin_write(f->cl.queue, f->dev, 0, f->src, f->n, flags, 0, NULL,
                          (flags & CLPIN_NON_BLOCKING) ? &f->out_ev : NULL);
  if (rc != CL_SUCCESS && f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  wait_out_event(f, rc);
  drain(f, 3.0);
  return rc;
}

static cl_int op_read(fx *f, unsigned flags) {
  f->out_ev = (flags & CLPIN_NON_BLOCKING) ? SENTINEL_EVENT : NULL;
  cl_int rc = clpin_read(f->cl.queue, f->dev, 0, f->dst, f->n, flags, 0, NULL,
                         (flags & CLPIN_NON_BLOCKING) ? &f->out_ev : NULL);
  if (rc != CL_SUCCESS && f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  wait_out_event(f, rc);
  drain(f, 3.0);
  return rc;
}

static cl_int op_write_b(fx *f) { return op_write(f, CLPIN_PIN_MEMORY); }
static cl_int op_write_nb(fx *f) { return op_write(f, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING); }
static cl_int op_read_b(fx *f) { return op_read(f, CLPIN_PIN_MEMORY); }
static cl_int op_read_nb(fx *f) { return op_read(f, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING); }

/* Pinned-direct: the host side is clpin_host_alloc memory. */
static void setup_direct(fx *f) {
  setup_staging(f, SMALL);
  f->hostp = clpin_host_alloc(f->pool, SMALL);
  ck_assert_ptr_nonnull(f->hostp);
  test_fill(f->hostp, SMALL, 21);
  free(f->src);
  f->src = NULL;
}

static cl_int op_write_direct(fx *f) {
  f->out_ev = SENTINEL_EVENT;
  cl_int rc = clpin_write(f->cl.queue, f->dev, 0, f->hostp, f->n,
                          CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &f->out_ev);
  if (rc != CL_SUCCESS && f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  wait_out_event(f, rc);
  return rc;
}

static void check_out_event(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS && f->out_ev)
    problem(f, "a failed transfer handed out an event");
  if (f->out_ev == SENTINEL_EVENT) {
    problem(f, "a successful non-blocking transfer did not set *event");
    f->out_ev = NULL;
  }
}

/* A successful write put the data on the device; a failed one returned the
 * injected code (checked by the runner). */
static void check_write(fx *f, cl_int rc) {
  check_out_event(f, rc);
  if (rc != CL_SUCCESS || f->hung || f->event_failed)
    return;
  unsigned char *back = malloc(f->n);
  ck_assert_ptr_nonnull(back);
  CL_OK(clEnqueueReadBuffer(f->cl.queue, f->dev, CL_TRUE, 0, f->n, back, 0, NULL, NULL));
  size_t bad = test_check(back, f->n, 21);
  if (bad != (size_t)-1)
    problem(f, "write reported success but byte %zu on the device is wrong", bad);
  free(back);
}

static void check_read(fx *f, cl_int rc) {
  check_out_event(f, rc);
  if (rc != CL_SUCCESS || f->hung || f->event_failed)
    return;
  size_t bad = test_check(f->dst, f->n, 22);
  if (bad != (size_t)-1)
    problem(f, "read reported success but byte %zu in host memory is wrong", bad);
}

/* A blocking pipelined read whose DMAs wait for a user event that another
 * thread completes 100 ms later. If a fault makes the read give up early,
 * its DMAs are certainly still pending: the staging blocks it hands back must
 * not be handed out again before those DMAs are done (docs/DESIGN.md,
 * "Invariants": a transfer
 * still writing a block never sees it handed out again). */
static void setup_gated(fx *f) {
  setup_large(f);
  f->ev[0] = user_event(f);
}

static cl_int op_read_gated(fx *f) {
  completer_start(&f->done[0], f->ev[0], CL_COMPLETE, 100);
  return clpin_read(f->cl.queue, f->dev, 0, f->dst, f->n, CLPIN_PIN_MEMORY, 1, &f->ev[0], NULL);
}

static void check_read_gated(fx *f, cl_int rc) {
  clpin_block *b[4] = {0};
  for (int i = 0; i < 4; i++) {
    if (clpin_acquire(f->pool, STAGE_CHUNK, &b[i]) != CL_SUCCESS) {
      problem(f, "acquire after the read failed");
      continue;
    }
    test_fill(clpin_block_host(b[i]), STAGE_CHUNK, 40 + (unsigned)i);
  }
  completer_join(&f->done[0]);
  clFinish(f->cl.queue);
  for (int i = 0; i < 4; i++) {
    if (!b[i])
      continue;
    if (test_check(clpin_block_host(b[i]), STAGE_CHUNK, 40 + (unsigned)i) != (size_t)-1)
      problem(f, "a block was handed out while a DMA of the %s read still wrote into it",
              rc == CL_SUCCESS ? "finished" : "failed");
    clpin_release(b[i], NULL);
  }
  check_read(f, rc);
}

/* -- registered memory ---------------------------------------------------- */

/* The host side is the test's own page-aligned memory (pattern 21),
 * registered in the pool. The registration's USE_HOST_PTR buffer is the
 * test's in the driver view (own_mem). It stays registered past the check:
 * the pool's release at the end of the run must drop it, or the leak check
 * fails. */
static void setup_reg_mem(fx *f) {
  setup_staging(f, SMALL);
  f->regmem = aligned_alloc(4096, SMALL);
  ck_assert_ptr_nonnull(f->regmem);
  test_fill(f->regmem, SMALL, 21);
}

static void setup_registered(fx *f) {
  setup_reg_mem(f);
  CL_OK(clpin_host_register(f->pool, f->regmem, SMALL));
  f->own_mem++;
}

static cl_int op_register(fx *f) { return clpin_host_register(f->pool, f->regmem, SMALL); }

/* A write from the registration goes direct and lands. */
static void check_registered_write(fx *f) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  uint64_t direct = s.bytes_pinned_direct;
  cl_int w = clpin_write(f->cl.queue, f->dev, 0, f->regmem, SMALL, 0, 0, NULL, NULL);
  test_stats_get(f->pool, &s);
  if (w != CL_SUCCESS || s.bytes_pinned_direct != direct + SMALL)
    problem(f, "a write from the registration -> %d, %llu B direct", w,
            (unsigned long long)(s.bytes_pinned_direct - direct));
  else
    check_write(f, CL_SUCCESS);
}

static void check_register(fx *f, cl_int rc) {
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (rc != CL_SUCCESS) {
    if (s.bytes_registered != f->before.bytes_registered || !same_gauges(&f->before, &s))
      problem(f, "failed clpin_host_register changed the pool");
    if (clpin_host_unregister(f->regmem) != CLPIN_ERR_NOT_REGISTERED)
      problem(f, "a failed registration can be unregistered");
    cl_int again = clpin_host_register(f->pool, f->regmem, SMALL);
    if (again != CL_SUCCESS) {
      problem(f, "registering again after a failed register -> %d", again);
      return;
    }
  } else if (s.bytes_registered != SMALL) {
    problem(f, "bytes_registered %zu after registering %zu B", s.bytes_registered, SMALL);
  }
  f->own_mem++;
  check_registered_write(f);
}

static cl_int op_write_registered(fx *f) {
  f->out_ev = SENTINEL_EVENT;
  cl_int rc =
      clpin_write(f->cl.queue, f->dev, 0, f->regmem, f->n, CLPIN_NON_BLOCKING, 0, NULL, &f->out_ev);
  if (rc != CL_SUCCESS && f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  wait_out_event(f, rc);
  return rc;
}

/* One non-blocking write from the registration whose event the caller did
 * not ask for (clpin keeps one), then unregister. */
static void setup_registered_used(fx *f) {
  setup_registered(f);
  CL_OK(clpin_write(f->cl.queue, f->dev, 0, f->regmem, SMALL, CLPIN_NON_BLOCKING, 0, NULL, NULL));
}

static cl_int op_unregister(fx *f) { return clpin_host_unregister(f->regmem); }

static void check_unregister(fx *f, cl_int rc) {
  /* Unregister has no driver call whose failure it could report: it must
   * end the registration whatever fails underneath. */
  if (rc != CL_SUCCESS) {
    problem(f, "clpin_host_unregister -> %d", rc);
    return;
  }
  f->own_mem--;
  clpin_stats s;
  test_stats_get(f->pool, &s);
  if (s.bytes_registered != 0)
    problem(f, "bytes_registered %zu after unregister", s.bytes_registered);
  if (clpin_host_unregister(f->regmem) != CLPIN_ERR_NOT_REGISTERED)
    problem(f, "unregistered twice");
  check_write(f, rc); /* the write before it landed */
  /* And the memory registers again. */
  if (clpin_host_register(f->pool, f->regmem, SMALL) != CL_SUCCESS) {
    problem(f, "registering again after unregister failed");
    return;
  }
  f->own_mem++;
  check_registered_write(f);
}

/* -- tensors ------------------------------------------------------------- */

/* 256 x 128 float32 = 128 KiB: two staging chunks, so uploads and downloads
 * are pipelined. */
static const size_t TSHAPE[2] = {256, 128};
#define TBYTES ((size_t)256 * 128 * 4)
#define SENTINEL_TENSOR ((clpin_tensor *)(uintptr_t)0x7c7c7c7c)

static void setup_tensor_host(fx *f) {
  staging_options();
  open_pool(f);
  f->n = TBYTES;
  f->src = malloc(TBYTES);
  f->dst = calloc(1, TBYTES);
  ck_assert_ptr_nonnull(f->src);
  ck_assert_ptr_nonnull(f->dst);
  test_fill(f->src, TBYTES, 51);
}

/* Wait (bounded, raw) for a tensor's non-blocking upload. */
static void wait_event_bounded(fx *f, cl_event ev) {
  if (!ev)
    return;
  double end = now_s() + 10.0;
  cl_int st;
  while ((st = faultlayer_raw_event_status(ev)) > CL_COMPLETE && now_s() < end)
    sleep_ms(1);
  if (st > CL_COMPLETE) {
    problem(f, "the tensor's upload never completed (status %d)", st);
    f->hung = 1;
  } else if (st < 0) {
    f->event_failed = 1; /* a fault after the return: see wait_out_event */
  }
}

static cl_int from_host(fx *f, unsigned flags) {
  clpin_tensor *t = SENTINEL_TENSOR;
  cl_int rc = clpin_tensor_from_host(f->cl.queue, f->src, CLPIN_F32, 2, TSHAPE, flags, &t);
  if (rc == CL_SUCCESS) {
    f->tensor = t;
    wait_event_bounded(f, clpin_tensor_event(t));
    drain(f, 3.0);
  } else if (t != SENTINEL_TENSOR) {
    problem(f, "a failed clpin_tensor_from_host set *tensor");
  }
  return rc;
}

static cl_int op_from_host(fx *f) { return from_host(f, CLPIN_PIN_MEMORY); }
static cl_int op_from_host_nb(fx *f) { return from_host(f, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING); }

/* The tensor holds src: read its buffer back directly. */
static void check_tensor_holds(fx *f, unsigned seed, const char *what) {
  if (!f->tensor || f->hung || f->event_failed)
    return;
  unsigned char *back = malloc(TBYTES);
  ck_assert_ptr_nonnull(back);
  CL_OK(clEnqueueReadBuffer(f->cl.queue, clpin_tensor_buffer(f->tensor), CL_TRUE, 0, TBYTES, back,
                            0, NULL, NULL));
  size_t bad = test_check(back, TBYTES, seed);
  if (bad != (size_t)-1)
    problem(f, "%s reported success but device byte %zu is wrong", what, bad);
  free(back);
}

static void check_from_host(fx *f, cl_int rc) {
  if (rc == CL_SUCCESS) {
    if (clpin_tensor_nbytes(f->tensor) != TBYTES)
      problem(f, "tensor of %zu bytes, want %zu", clpin_tensor_nbytes(f->tensor), TBYTES);
    check_tensor_holds(f, 51, "clpin_tensor_from_host");
  }
}

static void setup_tensor(fx *f) {
  setup_tensor_host(f);
  CL_OK(clpin_tensor_from_host(f->cl.queue, f->src, CLPIN_F32, 2, TSHAPE, CLPIN_PIN_MEMORY,
                               &f->tensor));
}

static cl_int to_host(fx *f, unsigned flags) {
  f->out_ev = (flags & CLPIN_NON_BLOCKING) ? SENTINEL_EVENT : NULL;
  cl_int rc = clpin_tensor_to_host(f->tensor, f->cl.queue, f->dst, flags,
                                   (flags & CLPIN_NON_BLOCKING) ? &f->out_ev : NULL);
  if (rc != CL_SUCCESS && f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  wait_out_event(f, rc);
  drain(f, 3.0);
  return rc;
}

static cl_int op_to_host(fx *f) { return to_host(f, CLPIN_PIN_MEMORY); }
static cl_int op_to_host_nb(fx *f) { return to_host(f, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING); }

static void check_to_host(fx *f, cl_int rc) {
  check_out_event(f, rc);
  if (rc != CL_SUCCESS || f->hung || f->event_failed)
    return;
  size_t bad = test_check(f->dst, TBYTES, 51);
  if (bad != (size_t)-1)
    problem(f, "clpin_tensor_to_host reported success but host byte %zu is wrong", bad);
}

/* Mirror, device to host: a kernel "wrote" the device (device_data WRITE),
 * so host_data(READ) must copy it into the pinned mirror. */
static void setup_device_newer(fx *f) {
  setup_tensor(f);
  cl_mem m;
  CL_OK(clpin_tensor_device_data(f->tensor, f->cl.queue, CLPIN_WRITE, &m));
}

static cl_int op_mirror_down(fx *f) {
  f->out_ptr = SENTINEL_EVENT;
  cl_int rc = clpin_tensor_host_data(f->tensor, f->cl.queue, CLPIN_READ, &f->out_ptr);
  drain(f, 3.0);
  return rc;
}

static void check_mirror_down(fx *f, cl_int rc) {
  clpin_head h = clpin_tensor_head(f->tensor);
  if (rc != CL_SUCCESS) {
    if (h != CLPIN_HEAD_DEVICE)
      problem(f, "a failed host_data changed the head to %d", (int)h);
    if (f->out_ptr != (void *)SENTINEL_EVENT)
      problem(f, "a failed host_data set *ptr");
    f->out_ptr = NULL;
    return;
  }
  if (h != CLPIN_HEAD_SYNCED)
    problem(f, "head %d after host_data(READ) of a device-newer tensor, want SYNCED", (int)h);
  if (!f->out_ptr || test_check(f->out_ptr, TBYTES, 51) != (size_t)-1)
    problem(f, "the mirror does not hold the device data");
  f->out_ptr = NULL;
}

/* Mirror, host to device: the host mirror was written (head HOST), so
 * device_data(READ) must upload it. */
static void setup_host_newer(fx *f) {
  setup_tensor(f);
  void *p;
  CL_OK(clpin_tensor_host_data(f->tensor, f->cl.queue, CLPIN_WRITE, &p));
  test_fill(p, TBYTES, 52);
}

static cl_int op_mirror_up(fx *f) {
  cl_mem m = (cl_mem)SENTINEL_EVENT;
  cl_int rc = clpin_tensor_device_data(f->tensor, f->cl.queue, CLPIN_READ, &m);
  drain(f, 3.0);
  if (rc != CL_SUCCESS && m != (cl_mem)SENTINEL_EVENT)
    problem(f, "a failed device_data set *mem");
  return rc;
}

static void check_mirror_up(fx *f, cl_int rc) {
  clpin_head h = clpin_tensor_head(f->tensor);
  if (rc != CL_SUCCESS) {
    if (h != CLPIN_HEAD_HOST)
      problem(f, "a failed device_data changed the head to %d", (int)h);
    return;
  }
  if (h != CLPIN_HEAD_SYNCED)
    problem(f, "head %d after device_data(READ) of a host-newer tensor, want SYNCED", (int)h);
  check_tensor_holds(f, 52, "clpin_tensor_device_data");
}

static cl_int op_tensor_create(fx *f) {
  clpin_tensor *t = SENTINEL_TENSOR;
  cl_int rc = clpin_tensor_create(f->cl.queue, CLPIN_F32, 2, TSHAPE, &t);
  if (rc == CL_SUCCESS)
    f->tensor = t;
  else if (t != SENTINEL_TENSOR)
    problem(f, "a failed clpin_tensor_create set *tensor");
  return rc;
}

static void check_tensor_create(fx *f, cl_int rc) {
  if (rc == CL_SUCCESS &&
      (!clpin_tensor_buffer(f->tensor) || clpin_tensor_head(f->tensor) != CLPIN_HEAD_UNINITIALIZED))
    problem(f, "created tensor without a buffer or with a head");
}

/* Release of a tensor with a mirror and a pending non-blocking upload. */
static void setup_tensor_busy(fx *f) {
  setup_tensor_host(f);
  CL_OK(clpin_tensor_from_host(f->cl.queue, f->src, CLPIN_F32, 2, TSHAPE,
                               CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, &f->tensor));
  void *p;
  CL_OK(clpin_tensor_host_data(f->tensor, f->cl.queue, CLPIN_READ, &p));
}

static cl_int op_tensor_release(fx *f) {
  clpin_tensor_release(f->tensor);
  f->tensor = NULL;
  drain(f, 3.0);
  return CL_SUCCESS;
}

static void check_nothing(fx *f, cl_int rc) { (void)f, (void)rc; }

/* -- zero copy (host-unified devices: POCL) -------------------------------- */

/* The zc tensor paths: default options (CLPIN_PINNED_H2D=auto), the source
 * page-aligned so that CLPIN_ZERO_COPY may use it in place. */
static void setup_zc_host(fx *f) {
  CL_OK(clpin_set_option(CLPIN_OPT_PINNED, CLPIN_PINNED_AUTO));
  open_pool(f);
  f->n = TBYTES;
  f->src = aligned_alloc(4096, TBYTES);
  f->dst = calloc(1, TBYTES);
  ck_assert_ptr_nonnull(f->src);
  ck_assert_ptr_nonnull(f->dst);
  test_fill(f->src, TBYTES, 51);
}

static cl_int op_zc_from_host(fx *f) { return from_host(f, CLPIN_ZERO_COPY); }
static cl_int op_zc_from_host_copy(fx *f) { return from_host(f, 0); }

static void setup_zc_tensor(fx *f) {
  setup_zc_host(f);
  CL_OK(clpin_tensor_from_host(f->cl.queue, f->src, CLPIN_F32, 2, TSHAPE, 0, &f->tensor));
}

/* host_data(READ) of a device-newer zc tensor: a map. */
static void setup_zc_device_newer(fx *f) {
  setup_zc_tensor(f);
  cl_mem m;
  CL_OK(clpin_tensor_device_data(f->tensor, f->cl.queue, CLPIN_WRITE, &m));
}

/* device_data(READ) of a host-newer zc tensor: an unmap. */
static void setup_zc_host_newer(fx *f) {
  setup_zc_tensor(f);
  void *p;
  CL_OK(clpin_tensor_host_data(f->tensor, f->cl.queue, CLPIN_WRITE, &p));
  test_fill(p, TBYTES, 52);
}

/* Release of a zc tensor still mapped for the host. */
static void setup_zc_mapped(fx *f) {
  setup_zc_tensor(f);
  void *p;
  CL_OK(clpin_tensor_host_data(f->tensor, f->cl.queue, CLPIN_READ, &p));
}

/* -- the handoff protocol (clpin_host_lend / clpin_host_reclaim) ----- */

#define HBYTES ((size_t)64 << 10)
#define HALF (HBYTES / 2)

/* clpin_host_alloc memory (pattern 81), the test's. */
static void setup_handoff(fx *f) {
  open_pool(f);
  f->hostp = clpin_host_alloc(f->pool, HBYTES);
  ck_assert_ptr_nonnull(f->hostp);
  test_fill(f->hostp, HBYTES, 81);
}

/* Its first half handed to the device. */
static void setup_handoff_out(fx *f) {
  setup_handoff(f);
  CL_OK(clpin_host_lend(f->cl.queue, f->hostp, HALF, 0, NULL, NULL));
}

/* Both halves out: giving the first back only enqueues a marker. */
static void setup_handoff_two_out(fx *f) {
  setup_handoff_out(f);
  CL_OK(clpin_host_lend(f->cl.queue, (char *)f->hostp + HALF, HALF, 0, NULL, NULL));
}

/* Registered memory (pattern 21), mapped for the host on POCL. */
static void setup_handoff_registered(fx *f) { setup_registered(f); }

/* A device buffer the run owns (released with the run). */
static cl_mem test_buffer_keep(fx *f) {
  if (!f->dev) {
    f->dev = test_buffer(&f->cl, 4096);
    f->own_mem++;
  }
  return f->dev;
}

static cl_int op_to_device(fx *f) {
  f->out_ev = SENTINEL_EVENT;
  cl_int rc = clpin_host_lend(f->cl.queue, f->hostp, HALF, 0, NULL, &f->out_ev);
  if (rc != CL_SUCCESS && f->out_ev != SENTINEL_EVENT)
    problem(f, "failed clpin_host_lend set *event");
  if (f->out_ev == SENTINEL_EVENT)
    f->out_ev = NULL;
  return rc;
}

static cl_int op_to_device_registered(fx *f) {
  return clpin_host_lend(f->cl.queue, f->regmem, SMALL, 0, NULL, NULL);
}

static cl_int op_give_back(fx *f) {
  return clpin_host_reclaim(f->cl.queue, f->hostp, HALF, 0, 0, NULL, NULL);
}

/* Give back whatever [p, p + n) still has out (faults off), then the bytes
 * must be the host's pattern and the memory freeable. */
static void handoff_settle(fx *f, void *p, size_t n, size_t total, unsigned seed, bool want_out) {
  cl_int back = clpin_host_reclaim(f->cl.queue, p, n, 0, 0, NULL, NULL);
  if (want_out && back != CL_SUCCESS)
    problem(f, "the range was out, but giving it back -> %d", back);
  if (!want_out && back != CLPIN_ERR_NOT_ON_DEVICE)
    problem(f, "the range was not out, but giving it back -> %d", back);
  if (test_check(f->hostp ? f->hostp : f->regmem, total, seed) != (size_t)-1)
    problem(f, "the memory lost its bytes");
}

static void check_to_device(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS) {
    /* Nothing changed, except where the driver refused the undoing map as
     * well (clpin.h: the range then stays out): either way, after a
     * give-back the memory is the host's and transfers work. */
    cl_int back = clpin_host_reclaim(f->cl.queue, f->hostp, HALF, 0, 0, NULL, NULL);
    if (back != CLPIN_ERR_NOT_ON_DEVICE && back != CL_SUCCESS)
      problem(f, "after a failed hand-over, giving it back -> %d", back);
    if (clpin_write(f->cl.queue, test_buffer_keep(f), 0, f->hostp, 64, 0, 0, NULL, NULL) !=
        CL_SUCCESS)
      problem(f, "a write from the memory after a failed hand-over was refused");
    if (test_check(f->hostp, HBYTES, 81) != (size_t)-1)
      problem(f, "the memory lost its bytes");
    return;
  }
  if (clpin_host_free(f->hostp) != CLPIN_ERR_ON_DEVICE)
    problem(f, "clpin_host_free of memory on the device was not refused");
  handoff_settle(f, f->hostp, HALF, HBYTES, 81, true);
}

static void check_to_device_registered(fx *f, cl_int rc) {
  if (rc == CL_SUCCESS && clpin_host_unregister(f->regmem) != CLPIN_ERR_ON_DEVICE)
    problem(f, "unregister of memory on the device was not refused");
  handoff_settle(f, f->regmem, SMALL, SMALL, 21, rc == CL_SUCCESS);
}

static void check_give_back(fx *f, cl_int rc) {
  if (rc != CL_SUCCESS && clpin_host_free(f->hostp) != CLPIN_ERR_ON_DEVICE)
    problem(f, "after a failed give-back the memory is not the device's any more");
  handoff_settle(f, f->hostp, HALF, HBYTES, 81, rc != CL_SUCCESS);
}

static void check_to_host_marker(fx *f, cl_int rc) {
  char *second = (char *)f->hostp + HALF;
  cl_int first = clpin_host_reclaim(f->cl.queue, f->hostp, HALF, 0, 0, NULL, NULL);
  if (first != (rc == CL_SUCCESS ? CLPIN_ERR_NOT_ON_DEVICE : CL_SUCCESS))
    problem(f, "the first half after the op: give-back -> %d", first);
  if (clpin_host_free(f->hostp) != CLPIN_ERR_ON_DEVICE)
    problem(f, "the second half is out, yet clpin_host_free was not refused");
  handoff_settle(f, second, HALF, HBYTES, 81, true);
}

static const scenario scenarios[] = {
    {"pool", "pool_get", setup_nothing, op_pool_get, check_pool_get},
    {"pool", "acquire_miss", setup_pool, op_acquire, check_acquire},
    {"pool", "acquire_hit", setup_cached, op_acquire, check_acquire},
    {"pool", "release", setup_in_use, op_release, check_release},
    {"pool", "release_pending", setup_pending_user, op_release_pending, check_release},
    {"pool", "release_pending_err", setup_pending_user, op_release_pending_error, check_release},
    {"pool", "release_pending_done", setup_pending_done, op_release_pending_done, check_release},
    {"pool", "release_over_cap", setup_over_cap, op_release, check_release_freed},
    {"pool", "trim", setup_three_cached, op_trim, check_trim},
    {"pool", "set_limit", setup_three_cached, op_set_limit, check_set_limit},
    {"pool", "host_alloc", setup_pool, op_host_alloc, check_host_alloc},
    {"pool", "host_free", setup_host_alloced, op_host_free, check_host_free},
    {"pool", "release_context", setup_full_pool, op_release_context, check_pool_released},
    {"pool", "shutdown", setup_full_pool, op_shutdown, check_shutdown},
    {"staging", "write_staged", setup_small, op_write_b, check_write},
    {"staging", "write_pipelined", setup_large, op_write_b, check_write},
    {"staging", "write_staged_nb", setup_small, op_write_nb, check_write},
    {"staging", "write_pipelined_nb", setup_large, op_write_nb, check_write},
    {"staging", "write_direct_nb", setup_direct, op_write_direct, check_write},
    {"staging", "read_staged", setup_small, op_read_b, check_read},
    {"staging", "read_pipelined", setup_large, op_read_b, check_read},
    {"staging", "read_staged_nb", setup_small, op_read_nb, check_read},
    {"staging", "read_pipelined_nb", setup_large, op_read_nb, check_read},
    {"staging", "read_pipelined_gated", setup_gated, op_read_gated, check_read_gated},
    {"staging", "register", setup_reg_mem, op_register, check_register},
    {"staging", "write_registered_nb", setup_registered, op_write_registered, check_write},
    {"staging", "unregister", setup_registered_used, op_unregister, check_unregister},
    {"tensor", "tensor_from_host", setup_tensor_host, op_from_host, check_from_host},
    {"tensor", "tensor_from_host_nb", setup_tensor_host, op_from_host_nb, check_from_host},
    {"tensor", "tensor_create", setup_pool, op_tensor_create, check_tensor_create},
    {"tensor", "tensor_to_host", setup_tensor, op_to_host, check_to_host},
    {"tensor", "tensor_to_host_nb", setup_tensor, op_to_host_nb, check_to_host},
    {"tensor", "tensor_mirror_down", setup_device_newer, op_mirror_down, check_mirror_down},
    {"tensor", "tensor_mirror_up", setup_host_newer, op_mirror_up, check_mirror_up},
    {"tensor", "tensor_release", setup_tensor_busy, op_tensor_release, check_nothing},
    {"zerocopy", "zc_from_host", setup_zc_host, op_zc_from_host, check_from_host},
    {"zerocopy", "zc_from_host_copy", setup_zc_host, op_zc_from_host_copy, check_from_host},
    {"zerocopy", "zc_create", setup_zc_host, op_tensor_create, check_tensor_create},
    {"zerocopy", "zc_host_data_map", setup_zc_device_newer, op_mirror_down, check_mirror_down},
    {"zerocopy", "zc_device_data_unmap", setup_zc_host_newer, op_mirror_up, check_mirror_up},
    {"zerocopy", "zc_release_mapped", setup_zc_mapped, op_tensor_release, check_nothing},
    {"zerocopy", "handoff_to_device", setup_handoff, op_to_device, check_to_device},
    {"zerocopy", "handoff_to_device_registered", setup_handoff_registered, op_to_device_registered,
     check_to_device_registered},
    {"zerocopy", "handoff_to_host", setup_handoff_out, op_give_back, check_give_back},
    {"zerocopy", "handoff_to_host_marker", setup_handoff_two_out, op_give_back,
     check_to_host_marker},
};
#define N_SCENARIOS ((int)(sizeof scenarios / sizeof scenarios[0]))

/* The scenarios of the groups this process runs (CLPIN_FAULTS_GROUP). */
static int selected[N_SCENARIOS];
static int n_selected;

/* ------------------------------------------------------------------------ */
/* One run                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
  int entry; /* -1: no fault (the counting run) */
  unsigned long nth;
  int always; /* fail every call from the nth on */
  cl_int code;
} fault;

typedef struct {
  unsigned long calls[128]; /* calls per entry inside op */
  unsigned long fired;
  cl_int rc;
  int retried, fell_back;
  int hung;
  long refused;
  char problems[PROBLEM_MAX];
} run_result;

/* After the op, with faults off: the next operations on the pool work. */
static void next_ops_succeed(fx *f) {
  if (f->pool_gone) {
    cl_int rc = clpin_pool_get(f->cl.queue, &f->pool);
    if (rc != CL_SUCCESS) {
      problem(f, "clpin_pool_get after the pool was released -> %d", rc);
      return;
    }
    f->pool_gone = 0;
  }
  if (!f->pool && clpin_pool_get(f->cl.queue, &f->pool) != CL_SUCCESS) {
    problem(f, "no pool after the fault");
    return;
  }
  clpin_block *a = NULL, *b = NULL;
  cl_int ra = clpin_acquire(f->pool, 65536, &a);
  cl_int rb = clpin_acquire(f->pool, 300000, &b);
  if (ra != CL_SUCCESS || rb != CL_SUCCESS) {
    problem(f, "acquire after the fault -> %d, %d", ra, rb);
  } else {
    test_fill(clpin_block_host(a), 65536, 11);
    test_fill(clpin_block_host(b), 300000, 12);
    if (test_check(clpin_block_host(a), 65536, 11) != (size_t)-1 ||
        test_check(clpin_block_host(b), 300000, 12) != (size_t)-1)
      problem(f, "blocks acquired after the fault lost their data");
    if (a == b || clpin_block_host(a) == clpin_block_host(b))
      problem(f, "two acquires returned the same block");
  }
  if (a && clpin_release(a, NULL) != CL_SUCCESS)
    problem(f, "release after the fault failed");
  if (b && clpin_release(b, NULL) != CL_SUCCESS)
    problem(f, "release after the fault failed");
  if (a && clpin_release(a, NULL) != CLPIN_ERR_DOUBLE_RELEASE)
    problem(f, "a double release after the fault was not refused");

  /* A pipelined round trip, blocking write and non-blocking read. */
  staging_options();
  unsigned char *out = malloc(LARGE), *in = calloc(1, LARGE);
  ck_assert_ptr_nonnull(out);
  ck_assert_ptr_nonnull(in);
  test_fill(out, LARGE, 31);
  cl_mem tmp = test_buffer(&f->cl, LARGE);
  cl_event ev = NULL;
  cl_int rw = clpin_write(f->cl.queue, tmp, 0, out, LARGE, CLPIN_PIN_MEMORY, 0, NULL, NULL);
  cl_int rr = rw == CL_SUCCESS ? clpin_read(f->cl.queue, tmp, 0, in, LARGE,
                                            CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev)
                               : rw;
  if (rw != CL_SUCCESS || rr != CL_SUCCESS)
    problem(f, "staging round trip after the fault -> write %d, read %d", rw, rr);
  else if (clWaitForEvents(1, &ev) != CL_SUCCESS || test_check(in, LARGE, 31) != (size_t)-1)
    problem(f, "staging round trip after the fault lost data");
  if (ev)
    clReleaseEvent(ev);
  clReleaseMemObject(tmp);
  free(out);
  free(in);
}

/* Buffers alive in the driver against the blocks the pool holds. Callbacks
 * may still be moving blocks, so compare a few times. */
static void check_driver_view(fx *f, const long base[FAULTLAYER_KIND_COUNT]) {
  if (f->pool_gone || !f->pool)
    return;
  long live = 0, held = 0;
  for (int i = 0; i < 200; i++) {
    clpin_stats s;
    if (test_stats_get(f->pool, &s) != CL_SUCCESS)
      return;
    long own = f->own_mem;
    own += f->tensor && clpin_tensor_buffer(f->tensor) ? 1 : 0;
    live = faultlayer_live(FAULTLAYER_MEM) - base[FAULTLAYER_MEM] -
           faultlayer_owed(FAULTLAYER_MEM) - own;
    held = (long)blocks_held(&s);
    if (live == held)
      return;
    sleep_ms(5);
  }
  problem(f, "driver holds %ld buffers, the pool accounts for %ld blocks", live, held);
}

static void release_owned(fx *f) {
  for (int i = 0; i < 2; i++) {
    completer_join(&f->done[i]);
    if (f->ev[i]) {
      /* A user event nobody completed must complete before it goes. */
      cl_int st = CL_COMPLETE;
      clGetEventInfo(f->ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
      if (st > CL_COMPLETE)
        clSetUserEventStatus(f->ev[i], CL_COMPLETE);
      clReleaseEvent(f->ev[i]);
      f->ev[i] = NULL;
    }
  }
  /* Tensors go before their pool: its release frees the mirrors. */
  clpin_tensor_release(f->tensor);
  f->tensor = NULL;
  if (f->out_ev && f->out_ev != SENTINEL_EVENT)
    clReleaseEvent(f->out_ev);
  f->out_ev = NULL;
  if (f->dev)
    clReleaseMemObject(f->dev);
  f->dev = NULL;
  f->own_mem = 0;
  free(f->src);
  free(f->dst);
  f->src = f->dst = NULL;
  drain(f, 3.0);
  for (int i = 0; i < 4; i++)
    if (f->blk[i] && !f->pool_gone)
      if (clpin_release(f->blk[i], NULL) != CL_SUCCESS)
        problem(f, "test could not release its block %d", i);
  if (f->hostp && !f->pool_gone && clpin_host_free(f->hostp) != CL_SUCCESS)
    problem(f, "test could not free its host_alloc memory");
}

static void run_scenario(const scenario *sc, const fault *ft, run_result *res) {
  fx *f = calloc(1, sizeof *f);
  ck_assert_ptr_nonnull(f);
  /* A run that hangs (a lost callback, a gate never opened) dies here
   * rather than at the test case's timeout, and the last row printed tells
   * which fault it was. */
  alarm(RUN_ALARM_S);
  long base[FAULTLAYER_KIND_COUNT], after[FAULTLAYER_KIND_COUNT];
  faultlayer_disarm();
  live_all(base);
  unsigned long bad0 = faultlayer_bad_releases();
  unsigned long refused0 = faultlayer_refused_releases();

  test_cl_open(&f->cl);
  sc->setup(f);
  if (f->pool)
    test_stats_get(f->pool, &f->before);

  faultlayer_reset_calls();
  if (ft->entry >= 0)
    faultlayer_arm(ft->entry, ft->nth, ft->always ? 0 : 1, ft->code);
  cl_int rc = sc->op(f);
  faultlayer_disarm();
  res->fired = faultlayer_fired();
  for (int e = 0; e < faultlayer_entry_count() && e < 128; e++)
    res->calls[e] = faultlayer_calls(e);
  res->rc = rc;

  if (rc != CL_SUCCESS && rc != RC_NULL && (ft->entry < 0 || rc != ft->code))
    problem(f, "returned %d (%s), not CL_SUCCESS or the injected code", rc, clpin_strerror(rc));
  if (f->pool && !f->pool_gone) {
    clpin_stats s;
    test_stats_get(f->pool, &s);
    res->retried = s.oom_retries > f->before.oom_retries;
    res->fell_back = s.fallbacks > f->before.fallbacks;
  }
  check_invariant(f, "after the op");
  sc->check(f, rc);
  if (f->hung) {
    /* A DMA waits for a gate nobody will open: the queue is stuck, and any
     * clean-up would hang. Report and give up on this scenario. */
    res->hung = 1;
    memcpy(res->problems, f->problems, sizeof res->problems);
    return;
  }
  check_invariant(f, "after the check");
  check_driver_view(f, base);
  /* Objects whose release the fault refused are no longer clpin's: release
   * them now, while their context still lives. */
  res->refused = (long)(faultlayer_refused_releases() - refused0);
  faultlayer_settle();
  next_ops_succeed(f);
  check_invariant(f, "after the next ops");
  check_driver_view(f, base);
  release_owned(f);

  cl_int rel = clpin_pool_release_context(f->cl.ctx);
  if (rel != CL_SUCCESS)
    problem(f, "final clpin_pool_release_context -> %d", rel);
  test_cl_close(&f->cl);
  free(f->regmem); /* registered memory is freed only after its pool went */
  res->refused = (long)(faultlayer_refused_releases() - refused0);
  /* A non-blocking transfer's last internal references (gates, DMA events)
   * are dropped by a worker right after its event completes: give them a
   * moment before calling anything a leak. */
  for (double end = now_s() + 3.0;;) {
    faultlayer_settle();
    live_all(after);
    if (!memcmp(after, base, sizeof after) || now_s() > end)
      break;
    sleep_ms(2);
  }
  for (int k = 0; k < FAULTLAYER_KIND_COUNT; k++)
    if (after[k] != base[k])
      problem(f, "leaked %ld %s reference(s)", after[k] - base[k],
              faultlayer_kind_name((faultlayer_kind)k));
  if (faultlayer_bad_releases() != bad0)
    problem(f, "%lu release(s) of objects not alive (over-release)",
            faultlayer_bad_releases() - bad0);
  memcpy(res->problems, f->problems, sizeof res->problems);
  free(f);
  alarm(0);
}

/* ------------------------------------------------------------------------ */
/* The sweep                                                                */
/* ------------------------------------------------------------------------ */

/* The code each entry point fails with: allocation failure where the driver
 * allocates (clpin must retry once after trimming, then give up or fall
 * back), CL_OUT_OF_RESOURCES elsewhere (every entry point may return it). */
static cl_int code_for(const char *name) {
  if (!strcmp(name, "clCreateBuffer") || !strcmp(name, "clEnqueueMapBuffer"))
    return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  if (!strcmp(name, "clCreateContext") || !strcmp(name, "clCreateUserEvent"))
    return CL_OUT_OF_HOST_MEMORY;
  return CL_OUT_OF_RESOURCES;
}

/* Entry points failed only once per run, never "always": a user event whose
 * status can never be set blocks every command waiting on it, and no design
 * that gates DMAs on user events can survive that; a transient failure it
 * must survive (retry). */
static int transient_only(const char *name) { return !strcmp(name, "clSetUserEventStatus"); }

static void print_row(const char *sc, const char *ent, unsigned long n, const char *mode,
                      const run_result *r) {
  (void)sc, (void)ent, (void)n, (void)mode;
  char out[160], cn[64];
  if (r->fired == 0)
    snprintf(out, sizeof out, "not reached");
  else if (r->rc == RC_NULL)
    snprintf(out, sizeof out, "NULL");
  else if (r->rc == CL_SUCCESS)
    snprintf(out, sizeof out, "ok%s%s", r->retried ? " (oom retry)" : "",
             r->fell_back ? " (fallback)" : "");
  else
    snprintf(out, sizeof out, "error %s", code_name(r->rc, cn, sizeof cn));
  if (r->refused)
    strncat(out, " [release refused: object leaked by the driver]", sizeof out - strlen(out) - 1);
  printf("%s%s%s\n", out, r->problems[0] ? "  FAIL: " : "", r->problems);
  fflush(stdout);
}

START_TEST(sweep) {
  const scenario *sc = &scenarios[selected[_i]];
  ck_assert_msg(
      faultlayer_active() || (clGetPlatformIDs(0, NULL, NULL), faultlayer_active()),
      "the fault layer is not loaded: run with OPENCL_LAYERS=/abs/libclpin_faultlayer.so");
  run_result *clean = calloc(1, sizeof *clean), *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(clean);
  ck_assert_ptr_nonnull(r);
  fault none = {-1, 0, 0, 0};
  run_scenario(sc, &none, clean);
  ck_assert_msg(clean->problems[0] == 0, "%s without faults: %s", sc->name, clean->problems);
  ck_assert_msg(clean->rc == CL_SUCCESS, "%s without faults -> %d", sc->name, clean->rc);
  ck_assert_uint_eq(clean->fired, 0);

  /* CLPIN_FAULTS_EVERY (the TSan stage sets it): of each entry's calls,
   * fault the first two, the last and every EVERY-th; default every call. */
  unsigned long every = (unsigned long)test_env_count("CLPIN_FAULTS_EVERY", 1);
  int failures = 0, sites = 0;
  char first[PROBLEM_MAX + 128] = "";
  printf("== %s: calls inside the operation:", sc->name);
  for (int e = 0; e < faultlayer_entry_count(); e++)
    if (clean->calls[e])
      printf(" %s=%lu", faultlayer_entry_name(e), clean->calls[e]);
  printf("\n");
  for (int e = 0; e < faultlayer_entry_count(); e++) {
    const char *name = faultlayer_entry_name(e);
    for (unsigned long n = 1; n <= clean->calls[e]; n++) {
      if (n > 2 && n < clean->calls[e] && n % every != 0)
        continue;
      for (int always = 0; always <= !transient_only(name); always++) {
        fault ft = {e, n, always, code_for(name)};
        memset(r, 0, sizeof *r);
        /* The row's head goes out first: if the run crashes, the log shows
         * which fault did it. */
        printf("%-22s %-28s %3lu %-6s ", sc->name, name, n, always ? "always" : "once");
        fflush(stdout);
        run_scenario(sc, &ft, r);
        print_row(sc->name, name, n, always ? "always" : "once", r);
        sites++;
        ck_assert_msg(!r->hung, "%s %s #%lu %s: %s", sc->name, name, n, always ? "always" : "once",
                      r->problems);
        if (r->problems[0]) {
          if (!failures++)
            snprintf(first, sizeof first, "%s %s #%lu %s: %s", sc->name, name, n,
                     always ? "always" : "once", r->problems);
        }
      }
    }
  }
  if (sites == 0)
    printf("%-22s %-28s %3s %-6s %s\n", sc->name, "(no OpenCL call)", "-", "-", "ok");
  free(clean);
  free(r);
  ck_assert_msg(failures == 0, "%d of %d faulted runs failed; first: %s", failures, sites, first);
}
END_TEST

/* A pool hit costs no driver call at all. */
START_TEST(hit_makes_no_call) {
  test_cl cl;
  test_cl_open(&cl);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 100000, &b));
  CL_OK(clpin_release(b, NULL));
  faultlayer_reset_calls();
  CL_OK(clpin_acquire(pool, 100000, &b));
  CL_OK(clpin_release(b, NULL));
  for (int e = 0; e < faultlayer_entry_count(); e++)
    ck_assert_msg(faultlayer_calls(e) == 0, "a pool hit called %s", faultlayer_entry_name(e));
  test_cl_close(&cl);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The layer itself, on plain OpenCL                                        */
/* ------------------------------------------------------------------------ */

START_TEST(layer_loaded) {
  cl_uint np = 0;
  CL_OK(clGetPlatformIDs(0, NULL, &np));
  ck_assert_msg(faultlayer_active(), "OPENCL_LAYERS did not load the fault layer");
}
END_TEST

START_TEST(layer_counts_and_fails) {
  test_cl cl;
  test_cl_open(&cl);
  long base[FAULTLAYER_KIND_COUNT];
  live_all(base);
  int create = entry("clCreateBuffer");
  faultlayer_reset_calls();
  faultlayer_arm(create, 2, 1, CL_MEM_OBJECT_ALLOCATION_FAILURE);
  cl_int err = 0;
  cl_mem a = clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
  CL_OK(err);
  cl_mem b = clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
  ck_assert_ptr_null(b);
  ck_assert_int_eq(err, CL_MEM_OBJECT_ALLOCATION_FAILURE);
  cl_mem c = clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
  CL_OK(err);
  ck_assert_uint_eq(faultlayer_calls(create), 3);
  ck_assert_uint_eq(faultlayer_fired(), 1);
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_MEM), base[FAULTLAYER_MEM] + 2);

  /* "always": every call from the nth on. */
  faultlayer_arm(create, 1, 0, CL_OUT_OF_RESOURCES);
  for (int i = 0; i < 3; i++) {
    ck_assert_ptr_null(clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, 4096, NULL, &err));
    ck_assert_int_eq(err, CL_OUT_OF_RESOURCES);
  }
  faultlayer_disarm();

  /* Events from enqueues are tracked, retains and releases counted. */
  cl_event ev;
  char buf[64] = {0};
  CL_OK(clEnqueueWriteBuffer(cl.queue, a, CL_TRUE, 0, sizeof buf, buf, 0, NULL, &ev));
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_EVENT), base[FAULTLAYER_EVENT] + 1);
  CL_OK(clRetainEvent(ev));
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_EVENT), base[FAULTLAYER_EVENT] + 2);
  CL_OK(clReleaseEvent(ev));

  /* A refused release leaves the object alive until settled. */
  faultlayer_arm(entry("clReleaseEvent"), 1, 1, CL_OUT_OF_RESOURCES);
  ck_assert_int_eq(clReleaseEvent(ev), CL_OUT_OF_RESOURCES);
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_EVENT), base[FAULTLAYER_EVENT] + 1);
  ck_assert_int_eq(faultlayer_owed(FAULTLAYER_EVENT), 1);
  ck_assert_int_eq(faultlayer_settle(), 1);
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_EVENT), base[FAULTLAYER_EVENT]);

  CL_OK(clReleaseMemObject(a));
  CL_OK(clReleaseMemObject(c));
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_MEM), base[FAULTLAYER_MEM]);
  test_cl_close(&cl);
  for (int k = 0; k < FAULTLAYER_KIND_COUNT; k++)
    ck_assert_int_eq(faultlayer_live((faultlayer_kind)k), 0);
}
END_TEST

/* The layer's leak accounting catches a leak: a buffer never released. */
START_TEST(layer_sees_leak) {
  test_cl cl;
  test_cl_open(&cl);
  long mem0 = faultlayer_live(FAULTLAYER_MEM);
  cl_mem leak = test_buffer(&cl, 4096);
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_MEM), mem0 + 1);
  CL_OK(clRetainMemObject(leak));
  CL_OK(clReleaseMemObject(leak));
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_MEM), mem0 + 1);
  CL_OK(clReleaseMemObject(leak));
  ck_assert_int_eq(faultlayer_live(FAULTLAYER_MEM), mem0);
  test_cl_close(&cl);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Poisoned idle blocks (Debug + AddressSanitizer builds)                   */
/* ------------------------------------------------------------------------ */

#if defined(CLPIN_TEST_POISON) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sys/wait.h>
#include <unistd.h>

/* The idle block's memory is poisoned from release to the next acquire, and
 * only then: the block in use and the block handed out again are not. */
START_TEST(idle_block_is_poisoned) {
  test_cl cl;
  test_cl_open(&cl);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 65536, &b));
  unsigned char *h = clpin_block_host(b);
  size_t n = clpin_block_size(b);
  ck_assert_ptr_null(__asan_region_is_poisoned(h, n));
  CL_OK(clpin_release(b, NULL));
  ck_assert_msg(__asan_address_is_poisoned(h), "first byte of an idle block not poisoned");
  ck_assert_msg(__asan_address_is_poisoned(h + n - 1), "last byte of an idle block not poisoned");
  clpin_block *again;
  CL_OK(clpin_acquire(pool, 65536, &again));
  ck_assert_ptr_eq(clpin_block_host(again), h); /* a hit: the same block */
  ck_assert_ptr_null(__asan_region_is_poisoned(h, n));
  test_fill(h, n, 9);
  CL_OK(clpin_release(again, NULL));
  test_cl_close(&cl);
}
END_TEST

/* Write to h[100] in a child; return the child's exit status and what it
 * wrote on stderr. The child calls no clpin function (in a child of a
 * process that used clpin they answer CLPIN_ERR_FORKED, docs/API.md,
 * "Fork"): the parent releases the block, and the child inherits ASan's
 * shadow memory with the rest. */
static int in_child(volatile unsigned char *h, char *err, size_t errn) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    h[100] = 1; /* after the parent's release: ASan must stop here */
    _exit(0);
  }
  close(fds[1]);
  size_t got = 0;
  ssize_t r;
  while ((r = read(fds[0], err + got, errn - 1 - got)) > 0 && got < errn - 1)
    got += (size_t)r;
  err[got] = 0;
  close(fds[0]);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return status;
}

START_TEST(use_after_release_is_caught) {
  test_cl cl;
  test_cl_open(&cl);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  clpin_block *b;
  CL_OK(clpin_acquire(pool, 65536, &b));
  static char err[65536];
  volatile unsigned char *h = clpin_block_host(b);
  /* Control: a write before the release is fine. */
  int st = in_child(h, err, sizeof err);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "control child failed: %s", err);
  /* The same write after the release is caught. */
  CL_OK(clpin_release(b, NULL));
  st = in_child(h, err, sizeof err);
  ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0),
                "a write after clpin_release went unnoticed");
  ck_assert_msg(strstr(err, "AddressSanitizer: use-after-poison") != NULL,
                "the child died, but not of ASan's use-after-poison: %s", err);
  test_cl_close(&cl);
}
END_TEST
#endif

/* A driver that maps a pool block back at another address (the layer moves
 * the map): clpin_host_reclaim answers CLPIN_ERR_MAP_MOVED, the range stays
 * the device's, nothing is lost, and the next give-back works. */
START_TEST(handoff_map_moved) {
  test_cl cl;
  test_cl_open(&cl);
  ck_assert_msg(faultlayer_active(), "OPENCL_LAYERS did not load the fault layer");
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  const size_t n = 100000;
  unsigned char *h = clpin_host_alloc(pool, n);
  ck_assert_ptr_nonnull(h);
  test_fill(h, n, 91);
  CL_OK(clpin_host_lend(cl.queue, h, n, 0, NULL, NULL));
  faultlayer_move_next_map();
  ck_assert_int_eq(clpin_host_reclaim(cl.queue, h, n, 0, 0, NULL, NULL), CLPIN_ERR_MAP_MOVED);
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_ON_DEVICE);
  cl_mem dev = test_buffer(&cl, 64);
  ck_assert_int_eq(clpin_write(cl.queue, dev, 0, h, 64, 0, 0, NULL, NULL), CLPIN_ERR_ON_DEVICE);
  CL_OK(clpin_host_reclaim(cl.queue, h, n, 0, 0, NULL, NULL));
  ck_assert_uint_eq(test_check(h, n, 91), (size_t)-1);
  CL_OK(clpin_write(cl.queue, dev, 0, h, 64, 0, 0, NULL, NULL));
  CL_OK(clpin_host_free(h));
  clReleaseMemObject(dev);
  CL_OK(clpin_pool_release_context(cl.ctx));
  test_cl_close(&cl);
}
END_TEST

static Suite *faults_suite(const char *groups) {
  Suite *s = suite_create("faults");
  /* CLPIN_FAULTS_SCENARIOS (comma-separated names) narrows a group down to
   * the scenarios being worked on. */
  const char *only = getenv("CLPIN_FAULTS_SCENARIOS");
  for (int i = 0; i < N_SCENARIOS; i++) {
    char name[64];
    snprintf(name, sizeof name, ",%s,", scenarios[i].name);
    char list[512];
    snprintf(list, sizeof list, ",%s,", only ? only : "");
    if (strstr(groups, scenarios[i].group) && (!only || !*only || strstr(list, name)))
      selected[n_selected++] = i;
  }
  TCase *pool = tcase_create("sweep");
  tcase_set_timeout(pool, 900);
  tcase_add_loop_test(pool, sweep, 0, n_selected);
  suite_add_tcase(s, pool);
  if (strstr(groups, "zerocopy")) {
    TCase *moved = tcase_create("moved");
    tcase_add_test(moved, handoff_map_moved);
    suite_add_tcase(s, moved);
  }
  if (!strstr(groups, "pool"))
    return s;
  TCase *layer = tcase_create("layer");
  tcase_add_test(layer, layer_loaded);
  tcase_add_test(layer, layer_counts_and_fails);
  tcase_add_test(layer, layer_sees_leak);
  tcase_add_test(layer, hit_makes_no_call);
  suite_add_tcase(s, layer);
#if defined(CLPIN_TEST_POISON) && defined(__SANITIZE_ADDRESS__)
  TCase *poison = tcase_create("poison");
  tcase_add_test(poison, idle_block_is_poisoned);
  tcase_add_test(poison, use_after_release_is_caught);
  suite_add_tcase(s, poison);
#endif
  return s;
}

/* CLPIN_FAULTS_GROUP: which scenario groups to sweep ("pool", "staging",
 * "tensor", "zerocopy", or several, comma-separated); default all. The layer's own
 * tests and the poison tests run with the pool group. */
int main(void) {
  const char *groups = getenv("CLPIN_FAULTS_GROUP");
  if (!groups || !*groups)
    groups = "pool,staging,tensor,zerocopy";
  printf("%-22s %-28s %3s %-6s %s\n", "scenario", "failing call", "n", "mode", "outcome");
  fflush(stdout);
  return test_run_suite(faults_suite(groups));
}
