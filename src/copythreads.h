/* SPDX-License-Identifier: Apache-2.0 */
/* The host copy threads used by staging (copythreads.c). Internal.
 *
 * A task is split into nparts parts, run by any mix of copy threads and,
 * for synchronous runs, the calling thread. The copy threads are the process's
 * one copy-thread budget: CLPIN_THREADS threads (default three quarters of
 * the cores) shared by every pool, device and direction; one transfer
 * occupies at most CLPIN_TRANSFER_THREADS of them at once (its lane's cap),
 * so the threads a process copies with grow with the transfers it runs.
 * They are created lazily (grown when the option grows) and stay alive until
 * clpin__copythreads_shutdown(); a task never creates a thread. */
#ifndef CLPIN_COPYTHREADS_H
#define CLPIN_COPYTHREADS_H

#include "internal.h"

typedef struct clpin__task clpin__task;

/* The copies of one transfer. Copy threads serve the lanes with queued tasks in
 * turn, one part at a time, and each lane's tasks in the order queued: a
 * transfer's chunks are copied in pipeline order, while transfers of every
 * pool and direction share the process's copy threads fairly (one with
 * many parts queued cannot hold them all while another waits). Zero it
 * before the first use; it must outlive every task queued in it. */
typedef struct clpin__lane clpin__lane;
struct clpin__lane {
  /* The most of this lane's parts copy threads run at once (0: no limit), set
   * before the first task is queued. A transfer's copies are capped at
   * clpin__copythreads_share(): more threads on one transfer made it slower on
   * the 64-core 4x H100 host (docs/BENCHMARKS.md, "Several GPUs"), while
   * several transfers each want that many. Calling threads that help with
   * a synchronous task are not counted: they are the transfer's own. */
  size_t cap;
  /* Private to copythreads.c. */
  clpin__task *head, *tail; /* queued tasks, in order */
  clpin__lane *next;        /* in the ring of lanes with queued tasks */
  size_t running;           /* its parts running on copy threads now */
  bool ringed;
  bool active; /* counted in the copy threads' demand (copythreads.c) */
};

struct clpin__task {
  /* Filled by the submitter. run() does part `part` of nparts; parts of one
   * task may run at the same time on different threads. */
  void (*run)(void *arg, size_t part);
  /* Async tasks only: called once, after the last part finished, on the
   * thread that finished it, with no clpin lock held. It may free the task. */
  void (*done)(void *arg);
  void *arg;
  size_t nparts;
  /* The CPUs (a cpu_set_t) copy threads run this task's parts on, or
   * NULL: any. A device's copies run on its NUMA node's CPUs. */
  const void *cpus;
  /* The transfer's lane, or NULL: a lane of the task's own. */
  clpin__lane *lane;
  /* Private to copythreads.c. */
  size_t next;
  atomic_size_t finished;
  clpin__task *link;
  clpin__lane *in; /* the lane it is queued in */
  clpin__lane own;
  bool queued;
};

/* The most copy threads one transfer uses at once, and the most parts one
 * copy is split into (staging.c): CLPIN_TRANSFER_THREADS, never more than
 * the budget (CLPIN_THREADS). */
size_t clpin__copythreads_share(void);

/* What the copy threads did since the last reset (tests): the budget
 * (CLPIN_THREADS), the copy threads started, the most parts running at once on
 * copy threads and on copy threads and helping callers together, the most parts of
 * one capped lane running on copy threads at once, the copy threads parked now
 * (past the active limit: copythreads.c), parts run. */
typedef struct {
  size_t budget, threads, max_busy, max_running, max_lane, parked;
  uint64_t parts, helped;
} clpin__copythreads_stats;
void clpin__copythreads_stats_get(clpin__copythreads_stats *s, bool reset);

/* Run every part of t and return when all are finished. The calling thread
 * takes parts itself, so this completes even when no copy thread can be started
 * and never waits on a copy thread that waits on something else. t->done is
 * ignored. */
void clpin__copythreads_run(clpin__task *t);

/* Queue t and return at once; t->done runs when every part is finished. t
 * must stay valid until then. Never fails: when no copy thread thread exists or
 * can be created, the parts run right here on the calling thread. Safe to
 * call from OpenCL event callbacks. With done NULL, wait for t with
 * clpin__copythreads_wait(). */
void clpin__copythreads_submit(clpin__task *t);

/* Wait until every part of a submitted task (done NULL) finished, running
 * parts not yet taken on the calling thread meanwhile. */
void clpin__copythreads_wait(clpin__task *t);

/* Start copy threads up to CLPIN_THREADS now; returns how many exist. Otherwise
 * they start as transfers need them: up to the caps of the lanes with work
 * (one transfer: its share), never past the budget. */
size_t clpin__copythreads_start(void);

/* Stop the copy threads: clpin_shutdown calls it after releasing every pool. It
 * runs every task still queued, then joins all copy threads. Copy threads start again
 * on the next use. */
void clpin__copythreads_shutdown(void);

#endif /* CLPIN_COPYTHREADS_H */
