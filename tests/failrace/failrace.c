/* SPDX-License-Identifier: Apache-2.0 */
/* Preloaded into check_engine's "failed_mid_propagation" case (the test
 * check_engine_failrace, tests/engine.cmake) on POCL: it holds open the
 * windows in which the engine used to race the application's thread over a
 * failed user event, so the race happens on every run instead of in one CI
 * run of several.
 *
 * POCL 3.1 fails the commands behind a failed event from the thread that
 * failed it: for the engine's W (the marker of the caller's wait list) and
 * M (the caller's event, behind W and fin), W's status reads failed, then
 * pocl_broadcast(W) reaches M, and pocl_update_event_failed(M) unlocks M
 * before it finishes it. The engine, seeing W failed, used to fail fin if M
 * did not read failed yet; fin's broadcast then finished M a second time,
 * on another thread: a segfault in POCL. Three delays make that happen:
 *   A. pocl_broadcast of a failed event waits 2 ms first (W failed, M not
 *      yet: the engine sees W and looks at M);
 *   B. on the process's main thread, pocl_update_event_failed waits 50 ms
 *      after its first unlock (M unlocked, not finished yet);
 *   C. a failure set on a user event by any other thread (the engine's fin)
 *      waits 10 ms, so that it lands inside B.
 * Symbols: POCL calls both of its functions through its PLT, so the
 * preloaded definitions take those calls; the real ones are looked up in
 * the already loaded libpocl (the ICD loader opened it without
 * RTLD_GLOBAL, so RTLD_NEXT does not see it). */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One of the delays A, B, C; FAILRACE_VERBOSE=1 names each on stderr. */
static void delay(const char *which, cl_event ev, long ms) {
  if (getenv("FAILRACE_VERBOSE"))
    fprintf(stderr, "failrace: delay %s (event %p)\n", which, (void *)ev);
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* fn: where to store the function (dlsym's object pointer is copied into
 * a function pointer as POSIX allows). */
static void pocl_sym(const char *name, void *fn) {
  void *h = dlopen("libpocl.so.2", RTLD_NOW | RTLD_NOLOAD);
  void *f = h ? dlsym(h, name) : NULL;
  if (!f) {
    fprintf(stderr, "failrace: %s not found in a loaded libpocl.so.2\n", name);
    abort();
  }
  memcpy(fn, &f, sizeof f);
}

static void next_sym(const char *name, void *fn) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "failrace: no next %s\n", name);
    abort();
  }
  memcpy(fn, &f, sizeof f);
}

/* Taken over (exported: the project builds with hidden visibility). */
#define TAKEN __attribute__((visibility("default")))
TAKEN void pocl_update_event_failed(cl_event ev);
TAKEN void pocl_broadcast(cl_event ev);
TAKEN int pthread_mutex_unlock(pthread_mutex_t *m);
TAKEN CL_API_ENTRY cl_int CL_API_CALL clSetUserEventStatus(cl_event ev, cl_int status);

static bool main_thread(void) { return gettid() == getpid(); }

static _Thread_local int in_failed; /* 1: inside pocl_update_event_failed, before its unlock */

int pthread_mutex_unlock(pthread_mutex_t *m) {
  static int (*next)(pthread_mutex_t *);
  if (!next)
    next_sym("pthread_mutex_unlock", &next);
  int r = next(m);
  if (in_failed == 1) {
    in_failed = 2;
    delay("B", NULL, 50);
  }
  return r;
}

void pocl_update_event_failed(cl_event ev) {
  static void (*real)(cl_event);
  if (!real)
    pocl_sym("pocl_update_event_failed", &real);
  if (getenv("FAILRACE_VERBOSE"))
    fprintf(stderr, "failrace: failed(%p) main=%d\n", (void *)ev, main_thread());
  int was = in_failed;
  in_failed = main_thread() ? 1 : 0;
  real(ev);
  in_failed = was;
}

void pocl_broadcast(cl_event ev) {
  static void (*real)(cl_event);
  if (!real)
    pocl_sym("pocl_broadcast", &real);
  /* Called with ev unlocked: its status may be read. */
  cl_int st = CL_QUEUED;
  if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) == CL_SUCCESS &&
      st < 0)
    delay("A", ev, 2);
  real(ev);
}

CL_API_ENTRY cl_int CL_API_CALL clSetUserEventStatus(cl_event ev, cl_int status) {
  static cl_int (*next)(cl_event, cl_int);
  if (!next)
    next_sym("clSetUserEventStatus", &next);
  if (status < 0 && !main_thread())
    delay("C", ev, 10);
  return next(ev, status);
}
