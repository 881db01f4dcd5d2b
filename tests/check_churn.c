/* SPDX-License-Identifier: Apache-2.0 */
/* Context churn: a program that creates, uses and releases
 * contexts for ever must not grow. Released pools' slots and block structs
 * are reused; handles carry a generation, so stale ones still answer their
 * documented codes after their memory served other pools.
 *
 * CHURN_CYCLES sets the number of context cycles (CI: 20000; the full run,
 * 100000, is in docs/RELIABILITY.md with its figures). Memory is measured
 * after the first tenth of the cycles (at least 2000) and at the end:
 * malloc-in-use (mallinfo2) and RSS may grow by at most 64 KiB in between.
 * The sanitizer builds run the stale-handle case only (their allocator and
 * shadow memory are not the library's), with CHURN_CYCLES from churn.cmake. */
#include "testutil.h"

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)

static test_cl cl;

static void setup(void) {
  test_cl_open(&cl);
  test_stage_everything(0);
}

static void teardown(void) { test_shutdown_close(&cl); }

static long cycles(void) { return test_env_count("CHURN_CYCLES", 20000); }

static long rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}

static long malloc_in_use(void) { return (long)mallinfo2().uordblks; }

/* What one cycle leaves the caller: handles that go stale with its context. */
typedef struct {
  clpin_pool *pool;
  clpin_block *held;    /* acquired, never released: freed with the pool */
  clpin_block *freed;   /* released before the context went */
  clpin_tensor *tensor; /* has a host mirror from the pool */
} stale;

/* One context: a pool, blocks, a staged round trip, a tensor with a host
 * mirror; released again. With keep, the handles stay in *keep (the tensor
 * too: the caller releases it). */
static void cycle_once(stale *keep) {
  test_short_ctx c;
  test_short_ctx_open(&cl, 64 * KiB, &c);
  unsigned char buf[16 * 1024];
  memset(buf, 3, sizeof buf);
  clpin_pool *pool;
  CL_OK(clpin_pool_get(c.q, &pool));
  clpin_block *b[3];
  for (int i = 0; i < 3; i++)
    CL_OK(clpin_acquire(pool, (size_t)4096 << i, &b[i]));
  CL_OK(clpin_release(b[1], NULL));
  CL_OK(clpin_release(b[2], NULL));
  CL_OK(clpin_write(c.q, c.buf, 0, buf, sizeof buf, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  CL_OK(clpin_read(c.q, c.buf, 0, buf, sizeof buf, CLPIN_PIN_MEMORY, 0, NULL, NULL));
  clpin_tensor *t = NULL;
  if (keep) {
    size_t shape[1] = {1024};
    void *host;
    CL_OK(clpin_tensor_create(c.q, CLPIN_F32, 1, shape, &t));
    CL_OK(clpin_tensor_host_data(t, c.q, CLPIN_WRITE, &host));
    memset(host, 1, 4096);
  }
  CL_OK(clpin_pool_release_context(c.ctx));
  if (keep)
    *keep = (stale){pool, b[0], b[1], t};
  test_short_ctx_close(&c);
}

/* Every stale handle answers its documented code (docs/API.md, "A pool's
 * lifecycle"). `aged`: so many pools were released since that its slot was
 * reused, and its final counters are gone too. */
static void assert_stale(const stale *s, bool aged) {
  clpin_block *blk = NULL;
  ck_assert_int_eq(clpin_acquire(s->pool, 4096, &blk), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_null(blk);
  ck_assert_int_eq(clpin_pool_trim(s->pool), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_pool_set_limit(s->pool, 0), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_null(clpin_host_alloc(s->pool, 64));
  clpin_stats st = {.struct_size = sizeof st};
  if (aged) {
    ck_assert_int_eq(clpin_pool_stats(s->pool, &st), CLPIN_ERR_POOL_RELEASED);
  } else {
    CL_OK(clpin_pool_stats(s->pool, &st));
    ck_assert_uint_eq(st.driver_allocs, st.driver_frees);
    ck_assert_uint_eq(st.bytes_reserved, 0);
  }
  ck_assert_int_eq(clpin_release(s->held, NULL), CLPIN_ERR_POOL_RELEASED);
  ck_assert_int_eq(clpin_release(s->freed, NULL), CLPIN_ERR_POOL_RELEASED);
  ck_assert_ptr_null(clpin_block_host(s->held));
  ck_assert_ptr_null(clpin_block_buffer(s->freed));
  ck_assert_uint_eq(clpin_block_size(s->held), 0);
}

/* A tensor whose context's pool was released: its host mirror went with
 * the pool. clpin_tensor_to_host reads the mirror when it is newer (its
 * head is HOST after the write in cycle_once), so it must answer the code,
 * not read the memory, also once the pool's slot serves other pools. */
static void assert_stale_tensor(const stale *s) {
  unsigned char out[4096];
  ck_assert_int_eq(clpin_tensor_head(s->tensor), CLPIN_HEAD_HOST);
  ck_assert_int_eq(clpin_tensor_to_host(s->tensor, cl.queue, out, 0, NULL),
                   CLPIN_ERR_POOL_RELEASED);
}

START_TEST(stale_handles_answer_after_churn) {
  long n = cycles();
  stale first, recent;
  cycle_once(&first);
  for (long i = 1; i < n; i++)
    cycle_once(NULL);
  cycle_once(&recent);
  /* A pool of the current generation: the reused slots serve new pools
   * while every old handle keeps answering. */
  clpin_pool *live;
  CL_OK(clpin_pool_get(cl.queue, &live));
  clpin_block *blk;
  CL_OK(clpin_acquire(live, 4096, &blk));
  assert_stale(&first, true);
  assert_stale(&recent, false);
  assert_stale_tensor(&first);
  assert_stale_tensor(&recent);
  CL_OK(clpin_release(blk, NULL));
  test_assert_pool_balanced(live);
  clpin_tensor_release(first.tensor);
  clpin_tensor_release(recent.tensor);
}
END_TEST

START_TEST(churn_memory_plateaus) {
  long n = cycles(), warm = n / 10 > 2000 ? n / 10 : 2000;
  ck_assert_msg(n > warm, "CHURN_CYCLES=%ld: more than %ld needed", n, warm);
  double t0 = test_now();
  for (long i = 0; i < warm; i++)
    cycle_once(NULL);
  malloc_trim(0);
  long m0 = malloc_in_use(), r0 = rss_bytes();
  double t1 = test_now();
  for (long i = warm; i < n; i++)
    cycle_once(NULL);
  malloc_trim(0);
  long m1 = malloc_in_use(), r1 = rss_bytes();
  double t2 = test_now();
  fprintf(stderr,
          "churn: %ld context cycles (%.0f/s); after the first %ld: malloc-in-use %+ld B, RSS "
          "%+ld B (%.2f B per context)\n",
          n, (double)n / (t2 - t0), warm, m1 - m0, r1 - r0, (double)(m1 - m0) / (double)(n - warm));
  (void)t1;
  ck_assert_msg(m1 - m0 <= 64 * 1024, "malloc-in-use grew by %ld B after %ld cycles", m1 - m0,
                warm);
  ck_assert_msg(r1 - r0 <= 64 * 1024, "RSS grew by %ld B after %ld cycles", r1 - r0, warm);
}
END_TEST

static Suite *churn_suite(void) {
  Suite *s = suite_create("churn");
  TCase *stale_tc = test_tcase(s, "stale", setup, teardown, 1800);
  tcase_add_test(stale_tc, stale_handles_answer_after_churn);
  TCase *soak = test_tcase(s, "soak", setup, teardown, 1800);
  tcase_set_tags(soak, "soak");
  tcase_add_test(soak, churn_memory_plateaus);
  return s;
}

int main(void) { return test_run_suite(churn_suite()); }
