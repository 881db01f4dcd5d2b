/* SPDX-License-Identifier: Apache-2.0 */
/* The threads case: acquire/release pairs of mixed sizes, all pool hits,
 * from --threads threads at once against the same loop on one thread. */
#include "harness.h"

#include <pthread.h>
#include <stdlib.h>

static const size_t mix_sizes[] = {4096, 16384, 65536, 262144, 1 << 20, 4 << 20};
#define MIX ((int)(sizeof mix_sizes / sizeof *mix_sizes))

typedef struct {
  clpin_pool *pool;
  unsigned ops, id;
  pthread_barrier_t *start;
  double *lat; /* ns of each acquire+release pair */
  uint64_t t_start, t_end;
  cl_int err;
} worker_arg;

static void *pool_worker(void *p) {
  worker_arg *a = p;
  uint64_t rng = 0x9E3779B97F4A7C15u * (a->id + 1);
  pthread_barrier_wait(a->start);
  a->t_start = bench_now_ns();
  for (unsigned i = 0; i < a->ops; i++) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; /* xorshift64 */
    size_t n = mix_sizes[rng % MIX];
    clpin_block *blk;
    uint64_t t0 = bench_now_ns();
    cl_int err = clpin_acquire(a->pool, n, &blk);
    if (err == CL_SUCCESS)
      err = clpin_release(blk, NULL);
    uint64_t t1 = bench_now_ns();
    if (err != CL_SUCCESS) {
      a->err = err;
      break;
    }
    a->lat[i] = (double)(t1 - t0);
  }
  a->t_end = bench_now_ns();
  return NULL;
}

/* The rate of all nthreads together (first start to last end) and the
 * latency of every pair: two records and one line. */
static void threads_report(const bench_opts *o, unsigned nthreads, const worker_arg *args,
                           double *lat) {
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (unsigned i = 0; i < nthreads; i++) {
    t0 = args[i].t_start < t0 ? args[i].t_start : t0;
    t1 = args[i].t_end > t1 ? args[i].t_end : t1;
  }
  size_t total = (size_t)nthreads * o->thread_ops;
  double rate = (double)total / ((double)(t1 - t0) / 1e9) / 1e6;
  record r = {"threads", "clpin-mixed", "", 0, 0, nthreads, "Mops/s", "", {0}};
  r.s.n = 1, r.s.median = r.s.min = r.s.max = r.s.mean = r.s.p10 = r.s.p90 = r.s.p99 = rate;
  bench_add_record(r);
  record l = {"threads", "clpin-mixed-latency",      "", 0, 0, nthreads, "ns",
              "",        bench_summarize(lat, total)};
  bench_add_record(l);
  printf("  %2u thread%s  %8.2f Mops/s  latency median %6.0f ns  p99 %7.0f ns  max %9.0f ns\n",
         nthreads, nthreads == 1 ? " " : "s", rate, l.s.median, l.s.p99, l.s.max);
}

/* nthreads threads doing ops pairs each; fills the rate and latency records. */
static bool pool_threads(const bench_opts *o, const bench_cl *b, unsigned nthreads) {
  pthread_t *tid = calloc(nthreads, sizeof *tid);
  worker_arg *args = calloc(nthreads, sizeof *args);
  double *lat = calloc((size_t)nthreads * o->thread_ops, sizeof *lat);
  pthread_barrier_t start;
  bool ok = tid && args && lat && pthread_barrier_init(&start, NULL, nthreads) == 0;
  unsigned started = 0;
  for (unsigned i = 0; ok && i < nthreads; i++) {
    args[i] = (worker_arg){b->pool, o->thread_ops, i, &start, lat + (size_t)i * o->thread_ops, 0,
                           0,       CL_SUCCESS};
    ok = pthread_create(&tid[i], NULL, pool_worker, &args[i]) == 0;
    started += ok;
  }
  if (started < nthreads && started > 0) {
    /* The barrier never fills: nothing can be measured; give up loudly. */
    fprintf(stderr, "clpin-bench: could not start %u threads\n", nthreads);
    exit(1);
  }
  for (unsigned i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
  bool ran = ok;
  for (unsigned i = 0; ran && i < nthreads; i++)
    if (args[i].err != CL_SUCCESS) {
      fprintf(stderr, "clpin-bench: acquire/release: %s\n", clpin_strerror(args[i].err));
      ok = false;
    }
  if (ok)
    threads_report(o, nthreads, args, lat);
  if (started)
    pthread_barrier_destroy(&start);
  free(tid);
  free(args);
  free(lat);
  return ok;
}

bool bench_run_threads(const bench_opts *o, const bench_cl *b) {
  /* Warm every bucket with as many blocks as threads can hold at once, so
   * the timed loops measure hits (a miss is a driver call, benched above). */
  unsigned hold = o->threads;
  clpin_block **held = calloc((size_t)hold * MIX, sizeof *held);
  if (!held)
    return false;
  bool ok = true;
  for (int s = 0; ok && s < MIX; s++)
    for (unsigned i = 0; ok && i < hold; i++)
      ok = clpin_acquire(b->pool, mix_sizes[s], &held[(size_t)s * hold + i]) == CL_SUCCESS;
  for (size_t i = 0; i < (size_t)hold * MIX; i++)
    if (held[i])
      clpin_release(held[i], NULL);
  free(held);
  if (!ok) {
    fprintf(stderr, "clpin-bench: cannot warm the pool for the threads case\n");
    return false;
  }
  clpin_stats before = bench_pool_stats(b);
  printf("\npool ops, mixed sizes 4 KiB ... 4 MiB, acquire+release pairs\n");
  ok = pool_threads(o, b, 1) && (o->threads == 1 || pool_threads(o, b, o->threads));
  clpin_stats after = bench_pool_stats(b);
  printf("  (%llu misses during the timed loops)\n",
         (unsigned long long)(after.misses - before.misses));
  fflush(stdout);
  return ok;
}
