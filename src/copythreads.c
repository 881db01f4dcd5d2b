/* SPDX-License-Identifier: Apache-2.0 */
/* The process's persistent pool of host copy threads for staging: one
 * budget (CLPIN_THREADS) for every pool, device and direction.
 *
 * Tasks queue in lanes (one per transfer, copythreads.h) behind one mutex; the
 * lanes with queued tasks form a ring. A copy thread takes the next part of the
 * head task of the lane at the ring's head and moves that lane to the
 * ring's tail, so transfers take parts in turn while each transfer's own
 * tasks go in order; a task leaves its lane once its last part is claimed.
 * A lane at its cap (copythreads.h) is passed over until one of its parts
 * ends: the copy thread that ran it then goes on with the lane's next part.
 * Copy threads start as the lanes with work need them (the sum of their caps),
 * never past the budget: one transfer at a time gets its share of threads
 * and no idle crowd beside them; four transfers at once grow the pool.
 * With one transfer this is the plain FIFO it replaced.
 * Parts are large (hundreds of KiB of memcpy), so one lock round trip per
 * part is noise; what matters is wake-up latency, so an idle copy thread spins
 * briefly on an atomic before it sleeps on the condition variable: in a
 * pipeline the next chunk's copy arrives within tens of microseconds. */
#include "copythreads.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#define MAX_THREADS 256
/* How long an idle copy thread (or a synchronous caller waiting for the last
 * parts) polls before sleeping. */
#define SPIN_NS 50000
/* How many idle copy threads poll at once (one copy's parts at most). */
#define SPIN_MAX 16

static struct {
  pthread_mutex_t mu;
  pthread_cond_t done_cv;        /* some synchronous task finished */
  clpin__lane *ring, *ring_tail; /* lanes with queued tasks */
  atomic_size_t queued;          /* tasks queued, read without the lock */
  atomic_size_t spinners;        /* idle copy threads polling now */
  /* What clpin__copythreads_stats_get reports. */
  size_t busy, running, max_busy, max_running, max_lane;
  /* Threads the active lanes (with tasks queued or parts running) can
   * use: a capped lane's cap, 1 for an uncapped one. Copy threads are started
   * up to this (never past the budget), so a process moving one transfer
   * at a time has that transfer's share of threads, not the budget. */
  size_t demand;
  /* An idle copy thread sleeps on a condition of its own, and new work wakes
   * the idle copy threads of lowest index first, only those below the active
   * limit (max(demand, one transfer's share)): threads grown for four
   * transfers at once stay asleep beside one transfer later (woken and
   * polling beside it they cost it a third of its rate on the 64-core
   * host, docs/BENCHMARKS.md, "Several GPUs"). A copy thread past the limit
   * that finds no work sleeps without polling. */
  pthread_cond_t wake_cv[MAX_THREADS];
  bool cv_ready[MAX_THREADS], idle[MAX_THREADS];
  uint64_t parts, helped;
  bool stop;
  atomic_size_t nthreads;
  pthread_t threads[MAX_THREADS];
} W = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  sched_yield();
#endif
}

/* A copy thread's CPUs: a task naming CPUs (a device's NUMA node's, see
 * copythreads.h) moves the copy thread there before it runs a part; a task naming
 * none moves it back to the CPUs it started with. Only a change costs a
 * system call; parts are hundreds of KiB of memcpy. The calling thread of a
 * synchronous run keeps its own CPUs. */
static _Thread_local struct {
  bool is_copy_thread;  /* one of the copy threads (its parts count as busy) */
  size_t index;         /* its place among the copy threads, from 0 */
  unsigned depth;       /* parts this thread is inside (an engine job's copies nest) */
  bool has_home, moved; /* home: the CPUs it started with, known; moved: now elsewhere */
  cpu_set_t home, now;
} me;

static void run_on(const void *cpus) {
  if (!me.has_home)
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
    clpin__log("copy threads: cannot move a copy thread to its node's CPUs");
  }
}

/* How many copy threads take work now: as many as the active lanes can use,
 * and never fewer than one transfer's share, so a process moving one
 * transfer after another keeps the same threads polling between them.
 * Call with W.mu held. */
static size_t active_limit(void) {
  size_t share = clpin__copythreads_share();
  return W.demand > share ? W.demand : share;
}

/* Wake up to n idle copy threads below the active limit, lowest index first.
 * Call with W.mu held. */
static void wake_idle(size_t n) {
  size_t limit = active_limit(), have = atomic_load(&W.nthreads);
  for (size_t i = 0; n && i < limit && i < have; i++)
    if (W.idle[i]) {
      W.idle[i] = false;
      pthread_cond_signal(&W.wake_cv[i]);
      n--;
    }
}

/* Count l in W.demand while it is active (queued tasks or parts running).
 * Call with W.mu held after l->ringed or l->running changed. */
static void lane_update(clpin__lane *l) {
  bool active = l->ringed || l->running;
  if (active == l->active)
    return;
  l->active = active;
  size_t weight = l->cap ? l->cap : 1;
  W.demand = active ? W.demand + weight : W.demand - weight;
}

/* Call with W.mu held. */
static void ring_remove(clpin__lane *l) {
  clpin__lane **pp = &W.ring, *prev = NULL;
  while (*pp && *pp != l) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (!*pp)
    return;
  *pp = l->next;
  if (W.ring_tail == l)
    W.ring_tail = prev;
  l->next = NULL;
  l->ringed = false;
  lane_update(l);
}

/* Call with W.mu held. */
static void ring_append(clpin__lane *l) {
  l->next = NULL;
  l->ringed = true;
  if (W.ring_tail)
    W.ring_tail->next = l;
  else
    W.ring = l;
  W.ring_tail = l;
  lane_update(l);
}

/* Call with W.mu held. */
static void unlink_task(clpin__task *t) {
  clpin__lane *l = t->in;
  clpin__task **pp = &l->head, *prev = NULL;
  while (*pp && *pp != t) {
    prev = *pp;
    pp = &(*pp)->link;
  }
  if (!*pp)
    return;
  *pp = t->link;
  if (l->tail == t)
    l->tail = prev;
  t->link = NULL;
  t->queued = false;
  if (!l->head && l->ringed)
    ring_remove(l);
  atomic_fetch_sub_explicit(&W.queued, 1, memory_order_relaxed);
}

/* The first lane in the ring that may take one more part on a copy thread (a
 * lane below its cap), or NULL; with capped false, the ring's head. *prevp
 * gets the lane before it. Call with W.mu held. */
static clpin__lane *find_lane(bool capped, clpin__lane **prevp) {
  clpin__lane *prev = NULL;
  for (clpin__lane *l = W.ring; l; prev = l, l = l->next)
    if (!capped || !l->cap || l->running < l->cap) {
      *prevp = prev;
      return l;
    }
  return NULL;
}

/* The task a copy thread serves next: the head task of the first lane in the
 * ring below its cap, whose lane then goes to the ring's tail; NULL when
 * every lane with queued tasks has its cap of parts running. Call with
 * W.mu held. */
static clpin__task *next_task(bool capped) {
  clpin__lane *prev, *l = find_lane(capped, &prev);
  if (!l)
    return NULL;
  if (l->next) { /* another lane waits: this one's turn is over */
    if (prev)
      prev->next = l->next;
    else
      W.ring = l->next;
    W.ring_tail->next = l;
    W.ring_tail = l;
    l->next = NULL;
  }
  return l->head;
}

/* Claim, run and retire one part of t. Call with W.mu held and t->next <
 * t->nparts; returns with W.mu held. Finishing the last part of an async
 * task runs its done() without the lock. A part a copy thread took from the
 * ring (counted) counts against its lane's cap while it runs. */
static void run_one_part(clpin__task *t, bool counted) {
  clpin__lane *lane = t->in;
  size_t part = t->next++;
  if (t->next == t->nparts && t->queued)
    unlink_task(t);
  /* Threads copying at once, not parts: a part that waits for its own
   * copies (an engine job) runs them on the same thread. */
  bool mine = me.is_copy_thread, first = me.depth++ == 0;
  if (counted) {
    lane->running++;
    lane_update(lane);
    if (lane->cap && lane->running > W.max_lane)
      W.max_lane = lane->running;
  }
  W.busy += mine && first;
  W.running += first;
  W.parts++;
  W.helped += !mine;
  if (W.busy > W.max_busy)
    W.max_busy = W.busy;
  if (W.running > W.max_running)
    W.max_running = W.running;
  pthread_mutex_unlock(&W.mu);
  run_on(t->cpus);
  t->run(t->arg, part);
  /* Read everything needed before the increment: a synchronous caller may
   * see the last increment (it polls without the lock) and return, and the
   * lane may go with it. */
  void (*done)(void *) = t->done;
  void *arg = t->arg;
  size_t nparts = t->nparts;
  pthread_mutex_lock(&W.mu);
  if (counted) {
    lane->running--;
    lane_update(lane);
  }
  bool last = --me.depth == 0;
  W.busy -= mine && last;
  W.running -= last;
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

static void *copy_thread_main(void *index) {
  pthread_setname_np(pthread_self(), "clpin-copy"); /* top -H, gdb, /proc */
  me.has_home = pthread_getaffinity_np(pthread_self(), sizeof me.home, &me.home) == 0;
  me.is_copy_thread = true;
  me.index = (size_t)(uintptr_t)index;
  pthread_mutex_lock(&W.mu);
  for (;;) {
    clpin__task *t = next_task(true);
    if (t) {
      run_one_part(t, true);
      continue;
    }
    if (W.stop && !W.ring)
      break;
    if (W.stop) { /* draining: the copy threads of capped lanes finish them */
      pthread_mutex_unlock(&W.mu);
      sched_yield();
      pthread_mutex_lock(&W.mu);
      continue;
    }
    /* At most SPIN_MAX idle copy threads poll, and none past the active limit
     * (enqueue_locked counts the pollers as takers of new parts); the rest
     * sleep at once, so a large budget does not turn into cores spinning
     * beside the copies. */
    if (me.index < active_limit()) {
      pthread_mutex_unlock(&W.mu);
      if (atomic_fetch_add_explicit(&W.spinners, 1, memory_order_relaxed) < SPIN_MAX) {
        uint64_t until = clpin__now_ns() + SPIN_NS;
        while (!atomic_load_explicit(&W.queued, memory_order_relaxed) && clpin__now_ns() < until)
          cpu_relax();
      }
      atomic_fetch_sub_explicit(&W.spinners, 1, memory_order_relaxed);
      pthread_mutex_lock(&W.mu);
      clpin__lane *prev;
      if (find_lane(true, &prev) || W.stop)
        continue;
    }
    W.idle[me.index] = true;
    while (W.idle[me.index] && !W.stop)
      pthread_cond_wait(&W.wake_cv[me.index], &W.mu);
    W.idle[me.index] = false;
  }
  pthread_mutex_unlock(&W.mu);
  return NULL;
}

/* Start copy threads up to want (at most the budget); returns how many exist.
 * Call with W.mu held. */
static size_t start_locked(size_t want) {
  size_t budget = clpin__opt(CLPIN_OPT_THREADS);
  if (want > budget)
    want = budget;
  if (want > MAX_THREADS)
    want = MAX_THREADS;
  size_t have = atomic_load(&W.nthreads);
  while (!W.stop && have < want) {
    if (!W.cv_ready[have]) {
      if (pthread_cond_init(&W.wake_cv[have], NULL) != 0)
        break;
      W.cv_ready[have] = true;
    }
    if (pthread_create(&W.threads[have], NULL, copy_thread_main, (void *)(uintptr_t)have) != 0) {
      clpin__log("copy threads: could not start thread %zu of %zu", have + 1, want);
      break;
    }
    have++;
    atomic_store(&W.nthreads, have);
  }
  return have;
}

size_t clpin__copythreads_start(void) {
  pthread_mutex_lock(&W.mu);
  size_t n = start_locked(SIZE_MAX);
  pthread_mutex_unlock(&W.mu);
  return n;
}

/* Call with W.mu held. */
static void enqueue_locked(clpin__task *t) {
  clpin__lane *l = t->lane ? t->lane : &t->own;
  t->in = l;
  t->link = NULL;
  t->queued = true;
  if (l->tail)
    l->tail->link = t;
  else
    l->head = t;
  l->tail = t;
  if (!l->ringed)
    ring_append(l);
  atomic_fetch_add_explicit(&W.queued, 1, memory_order_relaxed);
  /* Wake as many sleepers as the task has parts, not all of them: with a
   * budget of 48 a broadcast per chunk woke every copy thread to find nothing
   * and spin (one GPU's staged H2D fell to 0.44 of the bound on the 64-core
   * host, docs/BENCHMARKS.md, "Several GPUs"). Nor more than the lane may
   * still take (the copy threads running its parts go on with this task's as
   * they finish theirs), less the idle copy threads polling now, which look
   * for work before they sleep: a sleeper woken for a part a poller took
   * finds nothing, and on a VM each such wake-up costs a virtual CPU's
   * wake. */
  size_t n = t->nparts;
  if (l->cap)
    n = l->running >= l->cap ? 0 : n < l->cap - l->running ? n : l->cap - l->running;
  size_t polling = atomic_load_explicit(&W.spinners, memory_order_relaxed);
  wake_idle(n > polling ? n - polling : 0);
}

static void init_task(clpin__task *t) {
  t->next = 0;
  atomic_store(&t->finished, 0);
  t->link = NULL;
  t->in = NULL;
  t->own = (clpin__lane){0};
  t->queued = false;
}

void clpin__copythreads_wait(clpin__task *t) {
  if (atomic_load_explicit(&t->finished, memory_order_acquire) == t->nparts)
    return;
  pthread_mutex_lock(&W.mu);
  while (t->next < t->nparts)
    run_one_part(t, false);
  if (atomic_load(&t->finished) != t->nparts) {
    /* The last parts are running on copy threads and will be done shortly. */
    pthread_mutex_unlock(&W.mu);
    uint64_t until = clpin__now_ns() + SPIN_NS;
    while (atomic_load_explicit(&t->finished, memory_order_acquire) != t->nparts &&
           clpin__now_ns() < until)
      cpu_relax();
    pthread_mutex_lock(&W.mu);
    while (atomic_load(&t->finished) != t->nparts)
      pthread_cond_wait(&W.done_cv, &W.mu);
  }
  pthread_mutex_unlock(&W.mu);
}

void clpin__copythreads_run(clpin__task *t) {
  init_task(t);
  t->done = NULL;
  if (t->nparts == 0)
    return;
  if (t->nparts > 1) {
    pthread_mutex_lock(&W.mu);
    enqueue_locked(t);
    start_locked(W.demand); /* none: the wait below runs every part */
    pthread_mutex_unlock(&W.mu);
  }
  clpin__copythreads_wait(t);
}

void clpin__copythreads_submit(clpin__task *t) {
  init_task(t);
  if (t->nparts == 0) {
    if (t->done)
      t->done(t->arg);
    return;
  }
  pthread_mutex_lock(&W.mu);
  enqueue_locked(t);
  /* While stopping, the shutdown drains whatever is queued. */
  if (W.stop || start_locked(W.demand) > 0) {
    pthread_mutex_unlock(&W.mu);
    return;
  }
  while (t->next < t->nparts)
    run_one_part(t, false); /* the last part runs done(), which may free t */
  pthread_mutex_unlock(&W.mu);
}

void clpin__copythreads_shutdown(void) {
  pthread_mutex_lock(&W.mu);
  if (W.stop) { /* another thread is shutting down */
    pthread_mutex_unlock(&W.mu);
    return;
  }
  W.stop = true;
  size_t n = atomic_load(&W.nthreads);
  for (size_t i = 0; i < n; i++)
    if (W.idle[i])
      pthread_cond_signal(&W.wake_cv[i]);
  pthread_mutex_unlock(&W.mu);
  for (size_t i = 0; i < n; i++)
    pthread_join(W.threads[i], NULL);
  pthread_mutex_lock(&W.mu);
  /* Tasks submitted after the last copy thread left (from event callbacks). */
  while (W.ring)
    run_one_part(next_task(false), false);
  atomic_store(&W.nthreads, 0);
  W.stop = false;
  pthread_mutex_unlock(&W.mu);
  clpin__log("copy threads: stopped %zu threads", n);
}

size_t clpin__copythreads_share(void) {
  size_t budget = clpin__opt(CLPIN_OPT_THREADS), share = clpin__opt(CLPIN_OPT_TRANSFER_THREADS);
  return budget < share ? budget : share;
}

/* Idle copy threads past the active limit. Call with W.mu held. */
static size_t parked_locked(void) {
  size_t n = 0, limit = active_limit(), have = atomic_load(&W.nthreads);
  for (size_t i = limit; i < have; i++)
    n += W.idle[i];
  return n;
}

void clpin__copythreads_stats_get(clpin__copythreads_stats *s, bool reset) {
  pthread_mutex_lock(&W.mu);
  *s = (clpin__copythreads_stats){.budget = clpin__opt(CLPIN_OPT_THREADS),
                                  .threads = atomic_load(&W.nthreads),
                                  .max_busy = W.max_busy,
                                  .max_running = W.max_running,
                                  .max_lane = W.max_lane,
                                  .parked = parked_locked(),
                                  .parts = W.parts,
                                  .helped = W.helped};
  if (reset) {
    W.max_busy = W.busy;
    W.max_running = W.running;
    W.max_lane = 0;
    W.parts = W.helped = 0;
  }
  pthread_mutex_unlock(&W.mu);
}
