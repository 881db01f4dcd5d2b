/* SPDX-License-Identifier: Apache-2.0 */
/* The engine: non-blocking staged transfers, queued and run on clpin's
 * threads so the caller gets its event back at once.
 *
 *   caller's q:  ... W = turn(wait list) | flush | M = marker(fin, W) -> caller's event
 *   waiter:      polls W; once it has ended, hands the job to a copy thread
 *   copy thread: the staged pipeline (staging.c) on the pool's DMA queue for
 *                the job's device (its caller's queue's) and direction, then
 *                fin := complete (or the error)
 *
 * W stands for everything the transfer must wait for: the caller's wait list
 * and, on an in-order q, every command enqueued before it
 * (clpin__enqueue_turn: never a marker with an empty wait list). M makes the
 * caller's event, clFinish(q) and later commands on an in-order q wait for
 * the data to be in place. The DMAs go to the pool's own queues (one per
 * direction, so a write and a read overlap): on q they would sit behind M,
 * which waits for them.
 *
 * W is polled, not called back: on NVIDIA a completion callback costs about
 * a millisecond, and POCL (3.1) never calls back an event that fails.
 *
 * Lifecycle: a job enters its pool when queued and leaves when its last DMA
 * has ended (internal.h). A pool's release takes the jobs still waiting for
 * W off the pool (engine_cancel, the registry's cancel hook): they leave
 * it at once, so the release never waits for an event only the caller can
 * set. Once W has
 * ended such a job still moves its data, unstaged (the transfer was
 * accepted; the caller's event completes when the data is in place), and
 * fails only if W failed: failing fin while M waits for it made POCL 3.1
 * abort inside its event code now and then. */
#include "engine.h"
#include "events.h"
#include "registry.h"
#include "copythreads.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job job;
struct job {
  clpin__xfer x; /* the transfer, retargeted to the pool's DMA queue */
  /* start = W; marker = M, held until fin is set: POCL frees a failed
   * marker the caller released although fin still lists it as dependent,
   * and setting fin then touches freed memory. */
  cl_event start, fin, marker;
  cl_command_queue caller_q; /* the caller's queue (x.q is the DMA queue) */
  cl_device_id device;       /* its device, for a cancelled job */
  cl_int status;             /* W's failure, set before the job runs; then the job's result */
  struct timespec due;       /* in the graveyard: when its events may go */
  bool mem_held;             /* x.mem retained: the caller may release it once queued */
  bool buried;               /* ended with fin unset, its events kept for a grace period */
  bool w_failed;             /* W failed: M fails through it, fin must not fail it too */
  bool driver_fails_m;       /* the driver fails M through a failed W while fin is unset */
  job *next;                 /* in the waiting list */
  clpin__task driver;
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job *waiting; /* W not yet seen ended */
  /* Cancelled by a release: the pool already left; once W has ended the
   * waiter runs them unstaged (run_cancelled) and sets fin. */
  job *zombies;
  /* Ended jobs whose W failed: POCL 3.1 may still be failing M from the
   * thread that failed W, touching M and fin, when the job sees M failed;
   * their events are released a grace period later. */
  job *graveyard;
  bool running; /* a waiter thread exists (after a shutdown, maybe detached) */
  bool stop;
  pthread_t thread;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void job_free(job *j) {
  /* A buried job's fin was never set: POCL keeps a user event's links until
   * it ends, so end it now that M has long failed. */
  if (j->buried)
    clSetUserEventStatus(j->fin, CL_COMPLETE);
  if (j->mem_held)
    clReleaseMemObject(j->x.mem);
  if (j->marker)
    clReleaseEvent(j->marker);
  if (j->start)
    clReleaseEvent(j->start);
  if (j->fin)
    clReleaseEvent(j->fin);
  clpin__file_close(&j->x.file);
  free(j);
}

#define GRACE_NS 200000000L

static bool due_now(const struct timespec *due) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t); /* the clock of pthread_cond_timedwait */
  return t.tv_sec > due->tv_sec || (t.tv_sec == due->tv_sec && t.tv_nsec >= due->tv_nsec);
}

static bool start_waiter_locked(void);

/* Keep j's events for GRACE_NS, then free it (the waiter does). */
static void bury(job *j) {
  j->buried = true;
  clock_gettime(CLOCK_REALTIME, &j->due);
  j->due.tv_nsec += GRACE_NS;
  if (j->due.tv_nsec >= 1000000000L) {
    j->due.tv_sec++;
    j->due.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&E.mu);
  j->next = E.graveyard;
  E.graveyard = j;
  bool waiter = start_waiter_locked();
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
  if (waiter)
    return;
  /* No thread for the grace period: take the job back, wait it out here and
   * free it (left in the list, it would wait for a waiter that may never
   * come). */
  pthread_mutex_lock(&E.mu);
  for (job **pp = &E.graveyard; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      break;
    }
  pthread_mutex_unlock(&E.mu);
  while (!due_now(&j->due)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  job_free(j);
}

/* Whether M fails by itself within about a second: M lists W, so the
 * thread that fails W fails M too, a moment later, on a driver that fails
 * a command as soon as one event it waits for fails (POCL). Others (NVIDIA)
 * fail M only once fin is set too: there M is looked at once, as a wait
 * here would only delay the failure the application sees. */
static bool marker_fails(job *j) {
  if (!j->driver_fails_m)
    return clpin__event_status(j->marker) < 0;
  for (int i = 0; i < 10000; i++) {
    cl_int st = clpin__event_status(j->marker);
    if (st < 0)
      return true;
    if (st == CL_COMPLETE || st == CLPIN__STATUS_UNKNOWN)
      return false;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return false;
}

/* Set fin, so that M (the caller's event) ends with status. False when M
 * fails through W: fin is left alone (failing M a second time through it
 * makes POCL 3.1 crash) and the job's events must linger.
 *
 * When W failed, M is not looked at once but waited for: POCL 3.1 fails the
 * commands behind a failed event from the thread that failed it (the
 * application's clSetUserEventStatus), and W's status reads failed before
 * that thread has reached M. Failing fin in that gap made two threads
 * finish M at once: a crash in POCL (tests/failrace/failrace.c). */
static bool end_fin(job *j, cl_int status) {
  if (status != CL_COMPLETE && (j->w_failed ? marker_fails(j) : clpin__event_status(j->marker) < 0))
    return false;
  clpin__set_user_status(j->fin, status);
  /* POCL 3.1 ends M from its own threads, still touching fin: releasing
   * fin and M right away let it lock a destroyed mutex. Once W has ended,
   * M follows promptly. */
  clpin__event_settle(j->marker);
  return true;
}

/* End a job: fin gets status (CL_COMPLETE or a negative code), the pool is
 * left, the job freed. */
static void job_end(job *j, cl_int status) {
  bool settled = end_fin(j, status);
  clpin__pool_leave(j->x.pool);
  if (settled)
    job_free(j);
  else
    bury(j);
}

static void driver_run(void *arg, size_t part) {
  (void)part;
  job *j = arg;
  if (j->status == CLPIN__STATUS_UNKNOWN) {
    /* W's status could not be read: wait for it here instead. */
    j->status = clWaitForEvents(1, &j->start) == CL_SUCCESS
                    ? CL_SUCCESS
                    : CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
  }
  cl_int err = j->status;
  j->w_failed = err != CL_SUCCESS;
  if (j->w_failed) {
    /* W's own status: POCL gives a command behind a failed event its
     * CL_FAILED, -1, whatever code the application failed the event with
     * (-1 is also CL_DEVICE_NOT_FOUND's value: not that error). */
    clpin__log("engine: %s of %zu bytes not run: an event it waits for failed (status %d)",
               j->x.dir == CLPIN__H2D ? "write" : "read", j->x.nbytes, (int)err);
  } else {
    err = clpin__staged(&j->x);
    /* clpin__staged returns with every DMA ended and the blocks back: a
     * caller that sees its event complete also sees the pool idle. */
    if (err != CL_SUCCESS)
      clpin__log("engine: %s of %zu bytes failed: %s", j->x.dir == CLPIN__H2D ? "write" : "read",
                 j->x.nbytes, clpin_strerror(err));
  }
  j->status = err == CL_SUCCESS ? CL_COMPLETE : err < 0 ? err : CL_OUT_OF_RESOURCES;
}

/* The job ends in the task's done(), not in run(): the copy threads still touch
 * the task (embedded in the job) after run() returns, and only done() may
 * free it (copythreads.h). */
static void driver_done(void *arg) {
  job *j = arg;
  job_end(j, j->status);
}

/* The job's status once W has ended with st: a failed W's own code is
 * passed on, as drivers pass a failed dependency's on to the commands behind
 * it (NVIDIA: the failed event's code; POCL:
 * CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST), so the caller's event
 * fails as a plain transfer's would. */
static cl_int status_after_w(cl_int st) {
  return st == CLPIN__STATUS_UNKNOWN ? st : st < 0 ? st : CL_SUCCESS;
}

static void run_job(job *j, cl_int w_status) {
  j->status = status_after_w(w_status);
  clpin__copythreads_submit(&j->driver);
}

/* A job its pool's release cancelled, once W has ended (status: W's): the
 * transfer still happens, as a plain blocking one on a queue of its own,
 * since the pool's queues are gone and the caller's holds M behind it. It
 * runs on the waiter thread (a rare path: a release while transfers wait).
 * Returns fin's status. */
static cl_int run_cancelled(job *j) {
  cl_int st = j->status;
  if (st == CLPIN__STATUS_UNKNOWN)
    st = clWaitForEvents(1, &j->start) == CL_SUCCESS ? CL_COMPLETE : -1;
  if (st < 0) {
    j->w_failed = true;
    return st; /* W's own code, as status_after_w() */
  }
  /* A file transfer has no host memory to move unstaged. */
  if (!j->device || !j->mem_held || j->x.file.on)
    return CLPIN_ERR_POOL_RELEASED;
  cl_context ctx;
  cl_int err = clGetMemObjectInfo(j->x.mem, CL_MEM_CONTEXT, sizeof ctx, &ctx, NULL);
  cl_command_queue q = NULL;
  if (err == CL_SUCCESS)
    q = clCreateCommandQueue(ctx, j->device, 0, &err);
  if (err == CL_SUCCESS) {
    const clpin__xfer *x = &j->x;
    err =
        x->shape.kind ? clpin__shape_plain(x, q, CL_TRUE, 0, NULL, NULL)
        : x->dir == CLPIN__H2D
            ? clEnqueueWriteBuffer(q, x->mem, CL_TRUE, x->offset, x->nbytes, x->host, 0, NULL, NULL)
            : clEnqueueReadBuffer(q, x->mem, CL_TRUE, x->offset, x->nbytes, x->host, 0, NULL, NULL);
    clReleaseCommandQueue(q);
  }
  clpin__log("engine: a %s of %zu bytes cancelled by its pool's release ran unstaged: %s",
             j->x.dir == CLPIN__H2D ? "write" : "read", j->x.nbytes, clpin_strerror(err));
  return err == CL_SUCCESS ? CL_COMPLETE : err < 0 ? err : CL_OUT_OF_RESOURCES;
}

static void pause_briefly(unsigned round) {
  if (round < 64) {
    sched_yield();
  } else {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* The waiter: polls every waiting job's W and starts those that ended.
 * clGetEventInfo runs no callback, so it is safe under E.mu. */
static void *waiter_main(void *unused) {
  (void)unused;
  pthread_setname_np(pthread_self(), "clpin-events"); /* top -H, gdb, /proc */
  unsigned round = 0;
  pthread_mutex_lock(&E.mu);
  for (;;) {
    job *gone = NULL;
    for (job **pp = &E.graveyard; *pp;) {
      job *j = *pp;
      if (due_now(&j->due)) {
        *pp = j->next;
        j->next = gone;
        gone = j;
      } else {
        pp = &j->next;
      }
    }
    if (gone) {
      pthread_mutex_unlock(&E.mu);
      while (gone) {
        job *j = gone;
        gone = j->next;
        job_free(j);
      }
      pthread_mutex_lock(&E.mu);
      continue;
    }
    if (!E.waiting && !E.zombies) {
      if (E.stop && !E.graveyard)
        break;
      round = 0;
      if (E.graveyard) {
        struct timespec until = E.graveyard->due;
        pthread_cond_timedwait(&E.cv, &E.mu, &until);
      } else {
        pthread_cond_wait(&E.cv, &E.mu);
      }
      continue;
    }
    job *ready = NULL, *dead = NULL;
    for (job **pp = &E.zombies; *pp;) {
      job *j = *pp;
      cl_int st = clpin__event_status(j->start);
      if (st <= CL_COMPLETE || st == CLPIN__STATUS_UNKNOWN) {
        *pp = j->next;
        j->status = st;
        j->next = dead;
        dead = j;
      } else {
        pp = &j->next;
      }
    }
    for (job **pp = &E.waiting; *pp;) {
      job *j = *pp;
      cl_int st = clpin__event_status(j->start);
      if (st <= CL_COMPLETE || st == CLPIN__STATUS_UNKNOWN) {
        *pp = j->next;
        j->status = status_after_w(st);
        j->next = ready;
        ready = j;
      } else {
        pp = &j->next;
      }
    }
    pthread_mutex_unlock(&E.mu);
    while (dead) {
      job *j = dead;
      dead = j->next;
      if (end_fin(j, run_cancelled(j)))
        job_free(j);
      else
        bury(j);
    }

    if (ready) {
      round = 0;
      while (ready) {
        job *j = ready;
        ready = j->next;
        clpin__copythreads_submit(&j->driver);
      }
    } else {
      pause_briefly(round++);
    }
    pthread_mutex_lock(&E.mu);
  }
  E.running = false;
  pthread_mutex_unlock(&E.mu);
  return NULL;
}

/* Start the waiter thread unless one runs. Call with E.mu held. */
static bool start_waiter_locked(void) {
  if (E.running)
    return true;
  E.stop = false;
  if (pthread_create(&E.thread, NULL, waiter_main, NULL) != 0)
    return false;
  E.running = true;
  return true;
}

/* Queue j for the waiter, starting it if needed. False if no thread could
 * be started (the job is not queued then). */
static bool wait_for_start(job *j) {
  pthread_mutex_lock(&E.mu);
  if (!start_waiter_locked()) {
    pthread_mutex_unlock(&E.mu);
    return false;
  }
  j->next = E.waiting;
  E.waiting = j;
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
  return true;
}

/* dev's platform name contains name (false when it cannot be asked). */
static bool platform_is(cl_device_id dev, const char *name) {
  cl_platform_id p;
  char got[128];
  return dev && clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof p, &p, NULL) == CL_SUCCESS &&
         clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof got, got, NULL) == CL_SUCCESS &&
         (got[sizeof got - 1] = '\0', strstr(got, name) != NULL);
}

/* Whether the caller's wait list holds a user event not yet set, on
 * Oclgrind: it runs the queue to completion inside clFlush and would wait
 * there for an event the caller can only set after we return (waiting on
 * the returned event flushes the queue anyway). Everywhere else the queue
 * is flushed: an implementation that submits lazily (rusticl) would never
 * run W, which the waiter polls. */
static bool gated_by_user_event(const clpin__xfer *x) {
  if (!platform_is(x->device, "Oclgrind"))
    return false;
  for (cl_uint i = 0; i < x->num_wait; i++) {
    cl_command_type type = 0;
    if (clGetEventInfo(x->wait_list[i], CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL) ==
            CL_SUCCESS &&
        type == CL_COMMAND_USER && clpin__event_status(x->wait_list[i]) > CL_COMPLETE)
      return true;
  }
  return false;
}

/* Whether dev's driver fails a command as soon as an event in its wait list
 * fails, before the others end (POCL does, from the failing thread; NVIDIA
 * waits for all of them). Only POCL is known to: false elsewhere or when
 * the platform cannot be asked. */
static bool driver_fails_early(cl_device_id dev) {
  return platform_is(dev, "Portable Computing Language");
}

cl_int clpin__engine_submit(const clpin__xfer *x) {
  job *j = calloc(1, sizeof *j);
  if (!j) {
    clpin__file x_file = x->file;
    clpin__file_close(&x_file);
    return CL_OUT_OF_HOST_MEMORY;
  }
  j->x.file = x->file;        /* the job's from here: job_free closes it */
  clpin_pool *pool = x->pool; /* entered already by the transfer: the struct */
  cl_int err = clpin__pool_enter_for("clpin_write/clpin_read", "the queue's pool", &pool);
  if (err != CL_SUCCESS) {
    job_free(j);
    return err;
  }
  j->x = *x;
  j->caller_q = x->q;
  j->driver_fails_m = driver_fails_early(x->device);
  /* The DMAs go to x's device's own queue for the direction: a transfer
   * never runs through another device's queue. */
  j->x.q = clpin__pool_dma_queue(x->pool, x->device, x->dir);
  if (!j->x.q) {
    clpin__pool_leave(x->pool);
    job_free(j);
    CLPIN__CHECK_IN("clpin_write/clpin_read", true, CL_INVALID_DEVICE,
                    "the queue's device is not one of its context's");
  }
  j->x.num_wait = 0;
  j->x.wait_list = NULL;
  j->x.event = NULL;
  j->x.flags = x->flags & ~CLPIN_NON_BLOCKING;
  j->driver = (clpin__task){.run = driver_run,
                            .done = driver_done,
                            .arg = j,
                            .nparts = 1,
                            .cpus = clpin__pool_device_cpus(x->pool, x->device)};
  /* As an enqueued command does, the job keeps its buffer alive: the caller
   * may release it right after this call. */
  err = clRetainMemObject(x->mem);
  j->mem_held = err == CL_SUCCESS;
  if (err == CL_SUCCESS)
    j->fin = clCreateUserEvent(clpin__pool_context(x->pool), &err);
  bool gated = gated_by_user_event(x);
  if (err == CL_SUCCESS)
    err = clpin__enqueue_turn(x->q, x->num_wait, x->wait_list, &j->start);
  /* W goes to the device alone: rusticl reports a command complete only
   * once everything flushed with it has run, and M, flushed with W, would
   * wait for fin, which is set only once W is seen complete. */
  if (err == CL_SUCCESS && !gated)
    clFlush(x->q);
  /* M lists W too, so that a failed W fails M on every kind of queue (on
   * an in-order one it would anyway): fin then never has to. */
  if (err == CL_SUCCESS)
    err = clEnqueueMarkerWithWaitList(x->q, 2, (cl_event[]){j->fin, j->start}, &j->marker);
  /* The caller's reference to M, and ours until fin is set. Failing here
   * means failing M, which POCL handles badly while it still runs the
   * marker (see above): try again first. */
  if (err == CL_SUCCESS && x->event) {
    err = clRetainEvent(j->marker);
    for (int tries = 1; err != CL_SUCCESS && tries < 100; tries++)
      err = clRetainEvent(j->marker);
  }
  if (err != CL_SUCCESS)
    goto fail;
  if (x->event)
    *x->event = j->marker;
  if (!gated)
    clFlush(x->q); /* M: a caller may poll it */
  clpin__log("%s %zu bytes: queued in the engine%s", x->dir == CLPIN__H2D ? "write" : "read",
             x->nbytes, gated ? " (behind a user event)" : "");
  /* The common case, nothing ahead of it: start now, no waiter round trip. */
  cl_int st = gated ? CL_QUEUED : clpin__event_status(j->start);
  if (st <= CL_COMPLETE || st == CLPIN__STATUS_UNKNOWN) {
    run_job(j, st);
    return CL_SUCCESS;
  }
  if (!wait_for_start(j)) {
    /* No thread for the waiter: wait here, as a blocking call would. */
    run_job(j, CLPIN__STATUS_UNKNOWN);
  }
  return CL_SUCCESS;
fail:
  /* End fin so a marker already waiting for it ends; nothing else ran and
   * nobody else sees M. Complete, not failed: POCL mishandles a failed
   * marker released at once. */
  if (j->fin)
    clpin__set_user_status(j->fin, CL_COMPLETE);
  clpin__pool_leave(x->pool);
  job_free(j);
  return err;
}

static void engine_cancel(clpin_pool *pool) {
  job *mine = NULL;
  pthread_mutex_lock(&E.mu);
  for (job **pp = &E.waiting; *pp;) {
    job *j = *pp;
    if (j->x.pool == pool) {
      *pp = j->next;
      j->next = mine;
      mine = j;
    } else {
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&E.mu);
  job *last = NULL;
  for (job *j = mine; j; j = j->next) {
    /* The caller's queue is alive: W and M are still pending on it. */
    if (clGetCommandQueueInfo(j->caller_q, CL_QUEUE_DEVICE, sizeof j->device, &j->device, NULL) !=
        CL_SUCCESS)
      j->device = NULL;
    clpin__log("engine: the pool was released: a %s of %zu bytes waiting to start will run "
               "unstaged",
               j->x.dir == CLPIN__H2D ? "write" : "read", j->x.nbytes);
    clpin__pool_leave(j->x.pool);
    last = j;
  }
  if (!last)
    return;
  pthread_mutex_lock(&E.mu);
  last->next = E.zombies;
  E.zombies = mine;
  pthread_cond_signal(&E.cv);
  pthread_mutex_unlock(&E.mu);
}

static void engine_shutdown(void) {
  pthread_mutex_lock(&E.mu);
  if (!E.running) {
    pthread_mutex_unlock(&E.mu);
    return;
  }
  E.stop = true;
  pthread_cond_broadcast(&E.cv);
  /* Cancelled transfers still behind their caller's events: the waiter
   * stays until those end (only the caller can end them, maybe after this
   * returns), then exits by itself. Otherwise it exits now. */
  bool linger = E.zombies != NULL || E.graveyard != NULL;
  pthread_t t = E.thread;
  pthread_mutex_unlock(&E.mu);
  if (linger)
    pthread_detach(t);
  else
    pthread_join(t, NULL);
}

/* The registry cancels a released pool's waiting transfers (after closing
 * it, before waiting for its users) and stops the waiter at
 * clpin_shutdown (registry.h). */
__attribute__((constructor)) static void hook_registry(void) {
  clpin__registry_hooks h = {.cancel = engine_cancel, .shutdown = engine_shutdown};
  clpin__registry_hook(CLPIN__HOOK_ENGINE, &h);
}
