/* SPDX-License-Identifier: Apache-2.0 */
#include "hostbound.h"

#include "benchstat.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int i, k, cpu;
  bench_share_fn *prep, *work;
  void *arg;
  pthread_barrier_t *sync;
} share_job;

static void *share_main(void *p) {
  share_job *j = p;
  if (j->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  if (j->prep)
    j->prep(j->arg, j->i, j->k);
  pthread_barrier_wait(j->sync);
  j->work(j->arg, j->i, j->k);
  pthread_barrier_wait(j->sync);
  return NULL;
}

double bench_parallel_s(int k, const int *cpus, bench_share_fn *prep, bench_share_fn *work,
                        void *arg) {
  share_job *jobs = calloc((size_t)(k > 0 ? k : 1), sizeof *jobs);
  pthread_t *th = calloc((size_t)(k > 0 ? k : 1), sizeof *th);
  pthread_barrier_t sync;
  if (k < 1 || k > BENCH_MAX_THREADS || !jobs || !th ||
      pthread_barrier_init(&sync, NULL, (unsigned)k + 1)) {
    fprintf(stderr, "bench: cannot run %d threads\n", k);
    exit(1);
  }
  for (int i = 0; i < k; i++) {
    jobs[i] = (share_job){i, k, cpus ? cpus[i] : -1, prep, work, arg, &sync};
    if (pthread_create(&th[i], NULL, share_main, &jobs[i])) {
      fprintf(stderr, "bench: cannot start thread %d of %d\n", i, k);
      exit(1);
    }
  }
  pthread_barrier_wait(&sync);
  double t0 = bench_now_s();
  pthread_barrier_wait(&sync);
  double s = bench_now_s() - t0;
  for (int i = 0; i < k; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&sync);
  free(jobs);
  free(th);
  return s;
}

typedef struct {
  unsigned char *dst;
  const unsigned char *src;
  size_t n;
  int own;
} copy_work;

static void share_of(const copy_work *c, int i, int k, size_t *off, size_t *len) {
  size_t part = (c->n / (size_t)k + 4095) & ~(size_t)4095;
  *off = (size_t)i * part < c->n ? (size_t)i * part : c->n;
  *len = c->n - *off < part ? c->n - *off : part;
}

static void copy_touch(void *arg, int i, int k) {
  copy_work *c = arg;
  size_t off, len;
  share_of(c, i, k, &off, &len);
  memset(c->dst + off, 1, len);
  memset((unsigned char *)c->src + off, 2, len);
}

static void copy_share(void *arg, int i, int k) {
  copy_work *c = arg;
  size_t off, len;
  share_of(c, i, k, &off, &len);
  memcpy(c->dst + off, c->src + off, len);
}

double bench_memcpy_gbps(void *dst, const void *src, size_t n, int k, const int *cpus) {
  copy_work c = {dst, src, n, !src};
  if (c.own) {
    c.dst = malloc(n);
    c.src = malloc(n);
    if (!c.dst || !c.src) {
      fprintf(stderr, "bench: no memory for a %zu-byte memcpy\n", n);
      exit(1);
    }
  }
  double s = bench_parallel_s(k, cpus, c.own ? copy_touch : NULL, copy_share, &c);
  if (c.own) {
    free(c.dst);
    free((void *)c.src);
  }
  return bench_gbps(n, s * 1e9);
}
