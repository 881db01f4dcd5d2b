/* SPDX-License-Identifier: Apache-2.0 */
/* Fork safety: children forked while other threads use clpin
 * (pool calls, blocking and non-blocking staged transfers, host
 * allocations) exit, and every clpin call they make returns at once
 * (CLPIN_ERR_FORKED, or nothing for the void ones); a child of a process
 * that never used clpin may use it normally.
 *
 * A hung child is found by its deadline: a child not reaped within 5 s of
 * its fork has its stacks taken (gdb) and 5 s more to end by itself (a
 * slow exit on a loaded machine: counted as late, printed); one still
 * there then hung: the test kills it and fails, unless its stacks show the
 * sanitizer runtime's own allocator hang (forkwatch.h). FORK_ROUNDS overrides
 * the number of forks (1000). Children never call OpenCL: POCL initialised
 * in the parent may hang in a child that does (docs/API.md, "Fork"). */
#include "forkwatch.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)

static test_cl cl;

static void setup(void) {
  test_cl_open(&cl);
  test_stage_everything(16 * KiB);
}

static void teardown(void) { test_shutdown_close(&cl); }

/* Hung children whose stacks show them blocked in the sanitizer runtime's
 * own allocator, with no frame of clpin's (sanitized builds only; see
 * forkwatch_is_runtime: tests/fork_control.c measures how often that
 * happens with no clpin at all). */
static int runtime_hangs;

/* Reap pid within `limit` seconds (forkwatch_reap: a late child gets as
 * long again to end by itself). Returns its wait status, or -1 after
 * killing it when it did not end (-2: a hang of the sanitizer runtime's).
 * Every hang's stacks go to stderr (gdb); without gdb every hang counts as
 * clpin's. */
static int reap_within(pid_t pid, double limit) {
  forkwatch_stacks hung;
  int status = forkwatch_reap(pid, limit, CLPIN_SRC_DIR, &hung);
  ck_assert_msg(status != -3, "waitpid: %s", strerror(errno));
  if (status != -1)
    return status;
  fprintf(stderr, "fork: child %d hung in %s\n", (int)pid, hung.frames);
  return forkwatch_is_runtime(&hung) ? -2 : -1;
}

/* ---- what a child of a busy parent may call ------------------------------------ */

/* In the child: each call answers at once, without a lock or OpenCL. Exit
 * status 0 when every answer is the documented one, else the number of the
 * first wrong one. Ends with exit(), so the library's destructors run. */
static void child_calls(clpin_pool *pool, clpin_block *blk, void *host, cl_mem buf) {
  forkwatch_in_child = 1;
  int bad = 0;
  clpin_stats s = {.struct_size = sizeof s};
  clpin_pool *p2 = NULL;
  clpin_block *b2 = NULL;
  char tmp[64];
  if (clpin_pool_stats(pool, &s) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 1;
  if (clpin_acquire(pool, 4096, &b2) != CLPIN_ERR_FORKED || b2)
    bad = bad ? bad : 2;
  if (clpin_release(blk, NULL) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 3;
  if (clpin_pool_get_for_context(cl.ctx, &p2) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 4;
  if (clpin_pool_get(cl.queue, &p2) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 5;
  if (clpin_host_alloc(pool, 64) != NULL)
    bad = bad ? bad : 6;
  if (clpin_host_free(host) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 7;
  if (clpin_write(cl.queue, buf, 0, tmp, sizeof tmp, 0, 0, NULL, NULL) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 8;
  if (clpin_read(cl.queue, buf, 0, tmp, sizeof tmp, CLPIN_NON_BLOCKING, 0, NULL, NULL) !=
      CLPIN_ERR_FORKED)
    bad = bad ? bad : 9;
  if (clpin_pool_trim(pool) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 10;
  if (clpin_host_register(pool, tmp, sizeof tmp) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 11;
  if (clpin_pool_release_context(cl.ctx) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 12;
  if (clpin_pool_find(pool, host, 1, NULL) != NULL)
    bad = bad ? bad : 13;
  /* Getters need no lock: they still read the child's copy. */
  if (clpin_block_size(blk) == 0)
    bad = bad ? bad : 14;
  const size_t o3[3] = {0, 0, 0}, r3[3] = {sizeof tmp, 1, 1};
  if (clpin_write_rect(cl.queue, buf, o3, o3, r3, 0, 0, 0, 0, tmp, 0, 0, NULL, NULL) !=
      CLPIN_ERR_FORKED)
    bad = bad ? bad : 16;
  if (clpin_read_rect(cl.queue, buf, o3, o3, r3, 0, 0, 0, 0, tmp, CLPIN_PIN_MEMORY, 0, NULL,
                      NULL) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 17;
  /* buf is no image: a forked child answers before looking. */
  if (clpin_write_image(cl.queue, buf, o3, r3, 0, 0, tmp, 0, 0, NULL, NULL) != CLPIN_ERR_FORKED)
    bad = bad ? bad : 18;
  cl_mem hb = NULL;
  size_t hoff = 0;
  if (clpin_host_buffer(pool, host, 1, &hb, &hoff) != CLPIN_ERR_FORKED || hb)
    bad = bad ? bad : 19;
  if (strcmp(clpin_strerror(CLPIN_ERR_FORKED), "CLPIN_ERR_FORKED") == 0 ||
      strstr(clpin_strerror(CLPIN_ERR_FORKED), "fork") == NULL)
    bad = bad ? bad : 15;
  clpin_shutdown();
  exit(bad);
}

START_TEST(child_calls_answer_forked) {
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  clpin_block *blk;
  CL_OK(clpin_acquire(pool, 64 * KiB, &blk));
  void *host = clpin_host_alloc(pool, 4096);
  ck_assert_ptr_nonnull(host);
  cl_mem buf = test_buffer(&cl, 4096);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    child_calls(pool, blk, host, buf);
  int status = reap_within(pid, 5.0);
  ck_assert_msg(status >= 0, "the child hung");
  ck_assert_msg(WIFEXITED(status), "the child ended by signal %d", WTERMSIG(status));
  ck_assert_msg(WEXITSTATUS(status) == 0, "the child's call #%d answered wrong",
                WEXITSTATUS(status));
  /* The parent is untouched. */
  CL_OK(clpin_release(blk, NULL));
  CL_OK(clpin_host_free(host));
  test_assert_pool_balanced(pool);
  clReleaseMemObject(buf);
}
END_TEST

/* ---- 1000 forks while four threads use clpin ------------------------------------- */

static void *busy_main(void *arg) {
  forkwatch_busy *b = arg;
  clpin_pool *pool;
  forkwatch_note(b, clpin_pool_get(cl.queue, &pool));
  size_t n = 256 * KiB;
  unsigned char *host = malloc(n);
  cl_mem buf = clCreateBuffer(cl.ctx, CL_MEM_READ_WRITE, n, NULL, NULL);
  cl_command_queue q = clCreateCommandQueue(cl.ctx, cl.device, 0, NULL);
  unsigned seed = (unsigned)b->kind * 7919u;
  while (!atomic_load(b->stop) && b->err == CL_SUCCESS) {
    seed = seed * 1103515245u + 12345u;
    size_t len = 4 * KiB + (seed >> 8) % (n - 4 * KiB);
    switch (b->kind) {
    case 0: { /* pool calls */
      clpin_block *blk;
      forkwatch_note(b, clpin_acquire(pool, len, &blk));
      if (b->err == CL_SUCCESS)
        forkwatch_note(b, clpin_release(blk, NULL));
      clpin_stats s = {.struct_size = sizeof s};
      forkwatch_note(b, clpin_pool_stats(pool, &s));
      if (b->ops % 64 == 0)
        forkwatch_note(b, clpin_pool_trim(pool));
      break;
    }
    case 1: /* blocking staged transfers */
      forkwatch_note(b, clpin_write(q, buf, 0, host, len, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      forkwatch_note(b, clpin_read(q, buf, 0, host, len, CLPIN_PIN_MEMORY, 0, NULL, NULL));
      break;
    case 2: { /* non-blocking staged transfers */
      cl_event ev = NULL;
      forkwatch_note(b, clpin_write(q, buf, 0, host, len, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0,
                                    NULL, &ev));
      if (ev) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
      }
      ev = NULL;
      forkwatch_note(
          b, clpin_read(q, buf, 0, host, len, CLPIN_PIN_MEMORY | CLPIN_NON_BLOCKING, 0, NULL, &ev));
      if (ev) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
      }
      break;
    }
    default: { /* host allocations */
      void *p = clpin_host_alloc(pool, len);
      if (!p)
        forkwatch_note(b, CL_OUT_OF_HOST_MEMORY);
      forkwatch_note(b, clpin_host_free(p));
      break;
    }
    }
    b->ops++;
  }
  clFinish(q);
  clReleaseCommandQueue(q);
  clReleaseMemObject(buf);
  free(host);
  return NULL;
}

START_TEST(forks_while_busy) {
  atomic_int stop = 0;
  forkwatch_busy b[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    b[i] = (forkwatch_busy){.kind = i, .stop = &stop};
    ck_assert_int_eq(pthread_create(&th[i], NULL, busy_main, &b[i]), 0);
  }
  clpin_pool *pool;
  CL_OK(clpin_pool_get(cl.queue, &pool));
  int n = (int)test_env_count("FORK_ROUNDS", 1000), hung = 0, bad = 0, calls = 0, late = 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double t0 = forkwatch_now();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      forkwatch_in_child = 1;
      /* Every tenth child also calls clpin (stats, shutdown) before its
       * exit; the others just exit. */
      if (i % 10 == 0) {
        clpin_stats s = {.struct_size = sizeof s};
        if (clpin_pool_stats(pool, &s) != CLPIN_ERR_FORKED)
          exit(2);
        clpin_shutdown();
      }
      exit(0);
    }
    calls += i % 10 == 0;
    int status = reap_within(pid, 5.0);
    double took = forkwatch_now() - t0;
    worst = took > worst ? took : worst;
    if (status == -1)
      hung++;
    else if (status == -2)
      runtime_hangs++;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      bad++;
    else
      late += took > 5.0;
  }
  atomic_store(&stop, 1);
  long ops = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ops += b[i].ops;
    ck_assert_msg(b[i].err == CL_SUCCESS, "thread %d: %d (%s)", i, b[i].err,
                  clpin_strerror(b[i].err));
    ck_assert_msg(b[i].ops > 0, "thread %d did nothing", i);
  }
  fprintf(stderr,
          "fork: %d forks (%d calling clpin) while 4 threads ran %ld ops: %d hung, %d failed, "
          "slowest reaped after %.3f s; %d hung in the sanitizer runtime's allocator; %d "
          "exited late (after 5 s, by themselves)\n",
          n, calls, ops, hung, bad, worst, runtime_hangs, late);
  ck_assert_int_eq(hung, 0);
  ck_assert_int_eq(bad, 0);
  test_assert_pool_balanced(pool);
}
END_TEST

/* ---- a child of a process that never used clpin -------------------------------- */

/* A child forked before its parent asked for any pool owns a clpin as good
 * as freshly loaded (Check's own runner forks every other suite's tests
 * like this). Its parent has not initialised OpenCL either: the child opens
 * its own context. First in the suite, so that also with CK_FORK=no this
 * process has not used clpin yet. */
START_TEST(child_of_unused_process_works) {
  CL_OK(clpin_set_option(CLPIN_OPT_CHUNK, 64 * KiB)); /* no pool, no lock */
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    forkwatch_in_child = 1;
    test_cl own;
    test_cl_open(&own);
    clpin_pool *pool;
    clpin_block *blk;
    if (clpin_pool_get(own.queue, &pool) != CL_SUCCESS || clpin_acquire(pool, 4096, &blk) ||
        clpin_release(blk, NULL) || clpin_pool_release_context(own.ctx))
      exit(1);
    clpin_shutdown();
    test_cl_close(&own);
    exit(0);
  }
  int status = reap_within(pid, 60.0);
  ck_assert_msg(status >= 0, "the child hung");
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child could not use clpin");
}
END_TEST

static Suite *fork_suite(void) {
  Suite *s = suite_create("fork");
  TCase *unused = test_tcase(s, "unused", NULL, NULL, 0);
  tcase_add_test(unused, child_of_unused_process_works);
  TCase *calls = test_tcase(s, "calls", setup, teardown, 0);
  tcase_add_test(calls, child_calls_answer_forked);
  TCase *busy = test_tcase(s, "busy", setup, teardown, 600);
  tcase_add_test(busy, forks_while_busy);
  return s;
}

int main(void) { return test_run_suite(fork_suite()); }
