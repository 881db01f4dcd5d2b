/* SPDX-License-Identifier: Apache-2.0 */
/* The registry: one pool per context, races, isolation, release, shutdown. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static test_cl cl;

static void setup(void) { test_cl_open(&cl); }
static void teardown(void) { test_cl_close(&cl); }

static cl_uint ctx_refs(cl_context ctx) {
  cl_uint n = 0;
  CL_OK(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL));
  return n;
}

/* POCL drops the references its finished commands hold asynchronously: give
 * the count up to two seconds to settle at the expected value. */
static cl_uint refs_settled(cl_context ctx, cl_uint want) {
  cl_uint n = ctx_refs(ctx);
  for (int i = 0; i < 2000 && n != want; i++) {
    usleep(1000);
    n = ctx_refs(ctx);
  }
  return n;
}

START_TEST(one_pool_per_context) {
  cl_uint refs = ctx_refs(cl.ctx);
  clpin_pool *a, *b;
  CL_OK(clpin_pool_get(cl.queue, &a));
  CL_OK(clpin_pool_get_for_context(cl.ctx, &b));
  ck_assert_ptr_eq(a, b);
  /* The pool holds the context (directly and through its queue). */
  ck_assert_uint_gt(ctx_refs(cl.ctx), refs);
  CL_OK(clpin_pool_release_context(cl.ctx));
  ck_assert_uint_eq(refs_settled(cl.ctx, refs), refs);
  /* A new pool after a release; releasing a context without pool is fine. */
  CL_OK(clpin_pool_get(cl.queue, &b));
  ck_assert_ptr_ne(a, b);
  CL_OK(clpin_pool_release_context(cl.ctx));
  CL_OK(clpin_pool_release_context(cl.ctx));
}
END_TEST

START_TEST(bad_arguments) {
  clpin_pool *p = (clpin_pool *)0x1;
  ck_assert_int_eq(clpin_pool_get(NULL, &p), CL_INVALID_COMMAND_QUEUE);
  ck_assert_int_eq(clpin_pool_get(cl.queue, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_pool_get_for_context(NULL, &p), CL_INVALID_CONTEXT);
  ck_assert_int_eq(clpin_pool_get_for_context(cl.ctx, NULL), CLPIN_ERR_INVALID_ARGUMENT);
  ck_assert_int_eq(clpin_pool_release_context(NULL), CL_INVALID_CONTEXT);
  ck_assert_ptr_eq(p, (clpin_pool *)0x1);
}
END_TEST

typedef struct {
  cl_context ctx;
  atomic_int *go;
  clpin_pool *got;
  cl_int err;
} racer;

static void *race(void *p) {
  racer *r = p;
  while (!atomic_load(r->go))
    ;
  r->err = clpin_pool_get_for_context(r->ctx, &r->got);
  return NULL;
}

START_TEST(racing_creators_get_one_pool) {
  enum { N = 8 };
  for (int round = 0; round < 5; round++) {
    cl_uint refs = ctx_refs(cl.ctx);
    atomic_int go = 0;
    pthread_t t[N];
    racer r[N];
    for (int i = 0; i < N; i++) {
      r[i] = (racer){cl.ctx, &go, NULL, -1};
      ck_assert_int_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    atomic_store(&go, 1);
    for (int i = 0; i < N; i++) {
      pthread_join(t[i], NULL);
      CL_OK(r[i].err);
      ck_assert_ptr_eq(r[i].got, r[0].got);
    }
    /* The losers' pools gave their context references back. */
    CL_OK(clpin_pool_release_context(cl.ctx));
    ck_assert_uint_eq(refs_settled(cl.ctx, refs), refs);
  }
}
END_TEST

START_TEST(contexts_stay_isolated) {
  cl_int err;
  cl_context c2 = clCreateContext(NULL, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  clpin_pool *a, *b;
  CL_OK(clpin_pool_get_for_context(cl.ctx, &a));
  CL_OK(clpin_pool_get_for_context(c2, &b));
  ck_assert_ptr_ne(a, b);
  clpin_block *x, *y;
  CL_OK(clpin_acquire(a, 4096, &x));
  cl_mem xbuf = clpin_block_buffer(x); /* the handle dies at its release */
  CL_OK(clpin_release(x, NULL));
  /* b never sees a's cached block: its first acquire misses. */
  CL_OK(clpin_acquire(b, 4096, &y));
  ck_assert_ptr_ne(x, y);
  cl_context owner;
  CL_OK(clGetMemObjectInfo(clpin_block_buffer(y), CL_MEM_CONTEXT, sizeof owner, &owner, NULL));
  ck_assert_ptr_eq(owner, c2);
  CL_OK(clGetMemObjectInfo(xbuf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL));
  ck_assert_ptr_eq(owner, cl.ctx);
  clpin_stats sa = test_stats(a), sb = test_stats(b);
  ck_assert_uint_eq(sa.misses, 1);
  ck_assert_uint_eq(sa.blocks_cached, 1);
  ck_assert_uint_eq(sb.misses, 1);
  ck_assert_uint_eq(sb.blocks_in_use, 1);
  /* A pointer of b's block is not live in a. */
  ck_assert_ptr_null(clpin_pool_find(a, clpin_block_host(y), 1, NULL));
  ck_assert_ptr_eq(clpin_pool_find(b, clpin_block_host(y), 1, NULL), y);
  /* Releasing one context leaves the other's pool working. */
  CL_OK(clpin_pool_release_context(c2));
  CL_OK(clpin_acquire(a, 4096, &x));
  CL_OK(clpin_release(x, NULL));
  ck_assert_uint_eq(test_stats(a).hits, 1);
  clReleaseContext(c2);
}
END_TEST

typedef struct {
  cl_event gate;
  atomic_int set;
} gate_arg;

static void *open_gate_later(void *p) {
  gate_arg *g = p;
  usleep(200 * 1000);
  atomic_store(&g->set, 1);
  clSetUserEventStatus(g->gate, CL_COMPLETE);
  return NULL;
}

START_TEST(release_context_waits_for_in_flight) {
  cl_int err;
  gate_arg g = {clCreateUserEvent(cl.ctx, &err), 0};
  CL_OK(err);
  cl_uint refs = ctx_refs(cl.ctx);
  clpin_pool *p;
  CL_OK(clpin_pool_get(cl.queue, &p));
  clpin_block *a, *b, *c;
  CL_OK(clpin_acquire(p, 4096, &a));
  CL_OK(clpin_acquire(p, 1 << 20, &b));
  CL_OK(clpin_acquire(p, 100, &c)); /* still in use at release */
  CL_OK(clpin_release(a, g.gate));
  CL_OK(clpin_release(b, NULL));
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, open_gate_later, &g), 0);
  CL_OK(clpin_pool_release_context(cl.ctx));
  /* It returned only after the event completed. */
  ck_assert_int_eq(atomic_load(&g.set), 1);
  pthread_join(t, NULL);
  ck_assert_uint_eq(refs_settled(cl.ctx, refs), refs);
  clpin_stats s = test_stats(p);
  ck_assert_uint_eq(s.driver_allocs, 3);
  ck_assert_uint_eq(s.driver_frees, 3);
  ck_assert_uint_eq(s.bytes_reserved, 0);
  ck_assert_uint_eq(s.blocks_in_flight + s.blocks_in_use + s.blocks_cached, 0);
  ck_assert_int_eq(clpin_release(c, NULL), CLPIN_ERR_POOL_RELEASED);
  CL_OK(clReleaseEvent(g.gate));
}
END_TEST

START_TEST(shutdown_releases_every_pool) {
  cl_int err;
  cl_context c2 = clCreateContext(NULL, 1, &cl.device, NULL, NULL, &err);
  CL_OK(err);
  cl_uint r1 = ctx_refs(cl.ctx), r2 = ctx_refs(c2);
  clpin_pool *a, *b;
  CL_OK(clpin_pool_get_for_context(cl.ctx, &a));
  CL_OK(clpin_pool_get_for_context(c2, &b));
  void *h = clpin_host_alloc(b, 5000);
  ck_assert_ptr_nonnull(h);
  clpin_block *x;
  CL_OK(clpin_acquire(a, 4096, &x));
  CL_OK(clpin_release(x, NULL));
  clpin_shutdown();
  ck_assert_uint_eq(refs_settled(cl.ctx, r1), r1);
  ck_assert_uint_eq(refs_settled(c2, r2), r2);
  ck_assert_uint_eq(test_stats(a).driver_frees, 1);
  ck_assert_uint_eq(test_stats(b).driver_frees, 1);
  ck_assert_int_eq(clpin_acquire(a, 1, &x), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_host_free(h), CLPIN_ERR_POOL_RELEASED);
  /* Usable again afterwards, with fresh pools. */
  clpin_pool *a2;
  CL_OK(clpin_pool_get_for_context(cl.ctx, &a2));
  ck_assert_ptr_ne(a2, a);
  CL_OK(clpin_acquire(a2, 4096, &x));
  CL_OK(clpin_release(x, NULL));
  clpin_shutdown();
  clpin_shutdown(); /* twice is harmless */
  clReleaseContext(c2);
}
END_TEST

/* A thread keeps the last pool it found (registry.c): a release made by
 * another thread meanwhile is seen, and the thread's next lookup gets the
 * context's new pool, live, not the released one. */
static struct {
  cl_context ctx;
  pthread_barrier_t step;
  clpin_pool *first, *second;
  cl_int err1, err2;
} keeper;

static void *keep_and_look_again(void *unused) {
  (void)unused;
  keeper.err1 = clpin_pool_get_for_context(keeper.ctx, &keeper.first);
  pthread_barrier_wait(&keeper.step); /* the main thread releases the pool */
  pthread_barrier_wait(&keeper.step);
  keeper.err2 = clpin_pool_get_for_context(keeper.ctx, &keeper.second);
  return NULL;
}

START_TEST(a_thread_sees_another_threads_release) {
  keeper.ctx = cl.ctx;
  ck_assert_int_eq(pthread_barrier_init(&keeper.step, NULL, 2), 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, keep_and_look_again, NULL), 0);
  pthread_barrier_wait(&keeper.step);
  CL_OK(keeper.err1);
  CL_OK(clpin_pool_release_context(cl.ctx));
  pthread_barrier_wait(&keeper.step);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&keeper.step);
  CL_OK(keeper.err2);
  ck_assert_ptr_ne(keeper.second, keeper.first);
  clpin_block *b;
  ck_assert_int_eq(clpin_acquire(keeper.first, 64, &b), CLPIN_ERR_POOL_RELEASED);
  CL_OK(clpin_acquire(keeper.second, 64, &b));
  CL_OK(clpin_release(b, NULL));
  /* And this thread finds the same new pool. */
  clpin_pool *mine;
  CL_OK(clpin_pool_get(cl.queue, &mine));
  ck_assert_ptr_eq(mine, keeper.second);
  CL_OK(clpin_pool_release_context(cl.ctx));
}
END_TEST

static Suite *registry_suite(void) {
  Suite *s = suite_create("registry");
  TCase *tc = tcase_create("registry");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, one_pool_per_context);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, racing_creators_get_one_pool);
  tcase_add_test(tc, contexts_stay_isolated);
  tcase_add_test(tc, release_context_waits_for_in_flight);
  tcase_add_test(tc, shutdown_releases_every_pool);
  tcase_add_test(tc, a_thread_sees_another_threads_release);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return test_run_suite(registry_suite()); }
