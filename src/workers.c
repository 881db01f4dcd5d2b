/* A small persistent pool of host copy threads for staging.
 *
 * One FIFO of tasks behind one mutex. A worker takes the next part of the
 * task at the head; a task leaves the queue once its last part is claimed.
 * Parts are large (hundreds of KiB of memcpy), so one lock round trip per
 * part is noise; what matters is wake-up latency, so an idle worker spins
 * briefly on an atomic before it sleeps on the condition variable: in a
 * pipeline the next chunk's copy arrives within tens of microseconds. */
#include "workers.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#define MAX_WORKERS 256
/* How long an idle worker (or a synchronous caller waiting for the last
 * parts) polls before sleeping. */
#define SPIN_NS 50000

static struct {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* queue became non-empty, or stop */
  pthread_cond_t done_cv; /* some synchronous task finished */
  clpin__task *head, *tail;
  atomic_size_t queued; /* tasks in the queue, read without the lock */
  size_t sleepers;
  bool stop;
  atomic_size_t nthreads;
  pthread_t threads[MAX_WORKERS];
} W = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

/* A worker's CPUs: a task naming CPUs (a device's NUMA node's, see
 * workers.h) moves the worker there before it runs a part; a task naming
 * none moves it back to the CPUs it started with. Only a change costs a
 * system call; parts are hundreds of KiB of memcpy. The calling thread of a
 * synchronous run keeps its own CPUs. */
static _Thread_local struct {
  bool worker, moved;
  cpu_set_t home, now;
} me;

static void run_on(const void *cpus) {
  if (!me.worker)
    return;
  if (!cpus) {
    if (me.moved && pthread_setaffinity_np(pthread_self(), sizeof me.home, &me.home) == 0)
      me.moved = false;
    return;
  }
  const cpu_set_t *want = cpus;
  if (me.moved && CPU_EQUAL(&me.now, want))
    return;
  if (pthread_setaffinity_np(pthread_self(), sizeof *want, want) == 0) {
    me.now = *want;
    me.moved = true;
  } else {
    clpin__log("workers: cannot move a copy thread to its node's CPUs");
  }
}

/* Call with W.mu held. */
static void unlink_task(clpin__task *t) {
  clpin__task **pp = &W.head, *prev = NULL;
  while (*pp && *pp != t) {
    prev = *pp;
    pp = &(*pp)->link;
  }
  if (!*pp)
    return;
  *pp = t->link;
  if (W.tail == t)
    W.tail = prev;
  t->link = NULL;
  t->queued = false;
  atomic_fetch_sub_explicit(&W.queued, 1, memory_order_relaxed);
}

/* Claim, run and retire one part of t. Call with W.mu held and t->next <
 * t->nparts; returns with W.mu held. Finishing the last part of an async
 * task runs its done() without the lock. */
static void run_one_part(clpin__task *t) {
  size_t part = t->next++;
  if (t->next == t->nparts && t->queued)
    unlink_task(t);
  pthread_mutex_unlock(&W.mu);
  run_on(t->cpus);
  t->run(t->arg, part);
  /* Read everything needed before the increment: a synchronous caller may
   * see the last increment (it polls without the lock) and return. */
  void (*done)(void *) = t->done;
  void *arg = t->arg;
  size_t nparts = t->nparts;
  pthread_mutex_lock(&W.mu);
  size_t fin = atomic_fetch_add_explicit(&t->finished, 1, memory_order_acq_rel) + 1;
  if (fin != nparts)
    return;
  if (done) {
    pthread_mutex_unlock(&W.mu);
    done(arg); /* may free t */
    pthread_mutex_lock(&W.mu);
  } else {
    pthread_cond_broadcast(&W.done_cv);
  }
}

static void *worker_main(void *unused) {
  (void)unused;
  me.worker = pthread_getaffinity_np(pthread_self(), sizeof me.home, &me.home) == 0;
  pthread_mutex_lock(&W.mu);
  for (;;) {
    if (W.head) {
      run_one_part(W.head);
      continue;
    }
    if (W.stop)
      break;
    pthread_mutex_unlock(&W.mu);
    uint64_t until = now_ns() + SPIN_NS;
    while (!atomic_load_explicit(&W.queued, memory_order_relaxed) && now_ns() < until)
      cpu_relax();
    pthread_mutex_lock(&W.mu);
    if (W.head || W.stop)
      continue;
    W.sleepers++;
    pthread_cond_wait(&W.work_cv, &W.mu);
    W.sleepers--;
  }
  pthread_mutex_unlock(&W.mu);
  return NULL;
}

/* Call with W.mu held. */
static size_t start_locked(void) {
  size_t want = clpin__opt(CLPIN_OPT_THREADS);
  if (want > MAX_WORKERS)
    want = MAX_WORKERS;
  size_t have = atomic_load(&W.nthreads);
  while (!W.stop && have < want) {
    if (pthread_create(&W.threads[have], NULL, worker_main, NULL) != 0) {
      clpin__log("workers: could not start thread %zu of %zu", have + 1, want);
      break;
    }
    have++;
    atomic_store(&W.nthreads, have);
  }
  return have;
}

size_t clpin__workers_start(void) {
  pthread_mutex_lock(&W.mu);
  size_t n = start_locked();
  pthread_mutex_unlock(&W.mu);
  return n;
}

/* Call with W.mu held. */
static void enqueue_locked(clpin__task *t) {
  t->link = NULL;
  t->queued = true;
  if (W.tail)
    W.tail->link = t;
  else
    W.head = t;
  W.tail = t;
  atomic_fetch_add_explicit(&W.queued, 1, memory_order_relaxed);
  if (W.sleepers) {
    if (t->nparts > 1)
      pthread_cond_broadcast(&W.work_cv);
    else
      pthread_cond_signal(&W.work_cv);
  }
}

static void init_task(clpin__task *t) {
  t->next = 0;
  atomic_store(&t->finished, 0);
  t->link = NULL;
  t->queued = false;
}

void clpin__workers_wait(clpin__task *t) {
  if (atomic_load_explicit(&t->finished, memory_order_acquire) == t->nparts)
    return;
  pthread_mutex_lock(&W.mu);
  while (t->next < t->nparts)
    run_one_part(t);
  if (atomic_load(&t->finished) != t->nparts) {
    /* The last parts are running on workers and will be done shortly. */
    pthread_mutex_unlock(&W.mu);
    uint64_t until = now_ns() + SPIN_NS;
    while (atomic_load_explicit(&t->finished, memory_order_acquire) != t->nparts &&
           now_ns() < until)
      cpu_relax();
    pthread_mutex_lock(&W.mu);
    while (atomic_load(&t->finished) != t->nparts)
      pthread_cond_wait(&W.done_cv, &W.mu);
  }
  pthread_mutex_unlock(&W.mu);
}

void clpin__workers_run(clpin__task *t) {
  init_task(t);
  t->done = NULL;
  if (t->nparts == 0)
    return;
  if (t->nparts > 1) {
    pthread_mutex_lock(&W.mu);
    if (start_locked() > 0)
      enqueue_locked(t);
    pthread_mutex_unlock(&W.mu);
  }
  clpin__workers_wait(t);
}

void clpin__workers_submit(clpin__task *t) {
  init_task(t);
  if (t->nparts == 0) {
    if (t->done)
      t->done(t->arg);
    return;
  }
  pthread_mutex_lock(&W.mu);
  /* While stopping, the shutdown drains whatever is queued. */
  if (W.stop || start_locked() > 0) {
    enqueue_locked(t);
    pthread_mutex_unlock(&W.mu);
    return;
  }
  while (t->next < t->nparts)
    run_one_part(t); /* the last part runs done(), which may free t */
  pthread_mutex_unlock(&W.mu);
}

void clpin__workers_shutdown(void) {
  pthread_mutex_lock(&W.mu);
  if (W.stop) { /* another thread is shutting down */
    pthread_mutex_unlock(&W.mu);
    return;
  }
  W.stop = true;
  pthread_cond_broadcast(&W.work_cv);
  size_t n = atomic_load(&W.nthreads);
  pthread_mutex_unlock(&W.mu);
  for (size_t i = 0; i < n; i++)
    pthread_join(W.threads[i], NULL);
  pthread_mutex_lock(&W.mu);
  /* Tasks submitted after the last worker left (from event callbacks). */
  while (W.head)
    run_one_part(W.head);
  atomic_store(&W.nthreads, 0);
  W.stop = false;
  pthread_mutex_unlock(&W.mu);
  clpin__log("workers: stopped %zu threads", n);
}
