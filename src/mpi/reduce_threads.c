/* SPDX-License-Identifier: Apache-2.0 */
/* The host reduction of allreduce's shm path on several threads: one host
 * thread reduces 10-15 GB/s of input, under the 55 GB/s a device moves, so
 * each rank splits its slice of every chunk among CLPIN_MPI_THREADS threads
 * (default: the host's cores shared among the host's ranks, at most 8). The
 * reduce threads are created on first use and then wait on a condition variable
 * for the next job for the life of the process. */
#include "mpi_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAXT = 32 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* One job at a time: allreduces on two communicators from two threads take
 * turns at the reduce threads. */
static pthread_mutex_t one_job = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static int started;        /* reduce threads running */
static uint64_t gen;       /* job generation */
static int parts, pending; /* the job's parts; parts not finished */
static const clpin__mpi_rjob *job;

/* Part k of T: elements [n*k/T, n*(k+1)/T), every source in order. */
static void run_part(const clpin__mpi_rjob *j, int k, int T) {
  size_t lo = j->n * (size_t)k / (size_t)T, hi = j->n * (size_t)(k + 1) / (size_t)T;
  if (hi == lo)
    return;
  size_t es = clpin__mpi_rtype_size(j->t);
  for (int s = 0; s < j->nsrc; s++)
    clpin__mpi_reduce(j->t, j->op, j->dst + lo * es, j->src[s] + lo * es, hi - lo);
}

static void *reduce_thread_main(void *arg) {
  int id = (int)(intptr_t)arg; /* 1 ... MAXT-1: part 0 is the caller's */
  uint64_t seen = 0;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (gen == seen)
      pthread_cond_wait(&go, &mu);
    seen = gen;
    if (id >= parts)
      continue;
    const clpin__mpi_rjob *j = job;
    int T = parts;
    pthread_mutex_unlock(&mu);
    run_part(j, id, T);
    pthread_mutex_lock(&mu);
    if (--pending == 0)
      pthread_cond_signal(&done);
  }
  return NULL;
}

int clpin__mpi_reduce_threads(int ranks_here) {
  const char *v = getenv("CLPIN_MPI_THREADS");
  long t = v && *v ? strtol(v, NULL, 10) : 0;
  if (t <= 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t = cores / (ranks_here > 0 ? ranks_here : 1);
    if (t > 8)
      t = 8;
  }
  return t < 1 ? 1 : t > MAXT ? MAXT : (int)t;
}

void clpin__mpi_reduce_many(const clpin__mpi_rjob *j, int T) {
  /* Small jobs are not worth waking anyone. */
  size_t bytes = j->n * clpin__mpi_rtype_size(j->t) * (size_t)j->nsrc;
  if (T > 1 && bytes < ((size_t)256 << 10))
    T = 1;
  if (T == 1) {
    run_part(j, 0, 1);
    return;
  }
  pthread_mutex_lock(&one_job);
  pthread_mutex_lock(&mu);
  while (started < T - 1) {
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&th, &a, reduce_thread_main, (void *)(intptr_t)(started + 1));
    pthread_attr_destroy(&a);
    if (e != 0)
      break; /* fewer threads: the parts below still cover everything */
    started++;
  }
  if (T - 1 > started)
    T = started + 1;
  if (T > 1) {
    job = j;
    parts = T;
    pending = T - 1;
    gen++;
    pthread_cond_broadcast(&go);
  }
  pthread_mutex_unlock(&mu);
  run_part(j, 0, T);
  if (T > 1) {
    pthread_mutex_lock(&mu);
    while (pending > 0)
      pthread_cond_wait(&done, &mu);
    pthread_mutex_unlock(&mu);
  }
  pthread_mutex_unlock(&one_job);
}
