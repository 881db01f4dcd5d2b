/* SPDX-License-Identifier: Apache-2.0 */
/* The registry: one pool per cl_context, created on first use.
 *
 * Pools of released contexts are retired, not freed: a handle the user kept
 * (to a pool or to one of its blocks) stays safe to pass and answers
 * CLPIN_ERR_POOL_RELEASED. Retired structs are freed when the library is
 * unloaded. */
#include "registry.h"
#include "copythreads.h"

#include <pthread.h>
#include <stdlib.h>

/* ---- the registry ---------------------------------------------------------- */

/* Guards both lists. Held only for list walks: never across an OpenCL call. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static clpin_pool *live;
/* Released pools, oldest first, that still answer their final counters;
 * past RETIRED_KEEP the oldest one's slot is reused (clpin__pool_recycle),
 * so what released contexts leave behind is bounded by this constant, not
 * by how many contexts a program ever made (docs/API.md, "A pool's
 * lifecycle"). */
#define RETIRED_KEEP 64
static clpin_pool *retired, *retired_tail;
static size_t nretired;
#define NEXT(p) (*clpin__pool_link(p))

/* Set by load-time constructors of the layers above (registry.h). */
static clpin__registry_hooks hooks[CLPIN__HOOK_COUNT];

void clpin__registry_hook(clpin__hook_slot slot, const clpin__registry_hooks *h) {
  hooks[slot] = *h;
}

static clpin_pool *find_locked(cl_context ctx) {
  for (clpin_pool *p = live; p; p = NEXT(p))
    if (clpin__pool_context(p) == ctx)
      return p;
  return NULL;
}

cl_int clpin_pool_get_for_context(cl_context ctx, clpin_pool **pool) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!ctx, CL_INVALID_CONTEXT, "the context is NULL");
  CLPIN__CHECK_WHY(!pool, CLPIN_ERR_INVALID_ARGUMENT, "pool (the out-pointer) is NULL");
  clpin__note_used(); /* before the lock: see `used` */
  pthread_mutex_lock(&registry_lock);
  clpin_pool *found = find_locked(ctx);
  pthread_mutex_unlock(&registry_lock);
  if (found) {
    *pool = clpin__pool_handle(found); /* a live pool's generation is stable */
    return CL_SUCCESS;
  }
  /* Create outside the lock (OpenCL calls), then publish unless another
   * thread won the race; the loser's pool is destroyed unseen. */
  clpin_pool *made;
  cl_int err = clpin__pool_create(ctx, &made);
  CLPIN__CHECK_WHY(err == CLPIN_ERR_NO_DEVICE, err,
                   "the context has no device, or one that can allocate no buffer "
                   "(CL_DEVICE_MAX_MEM_ALLOC_SIZE 0)");
  CLPIN__CHECK_WHY(err != CL_SUCCESS, err,
                   "setting up the context's pool failed: the driver refused a query of its "
                   "devices or a queue, or host memory ran out");
  pthread_mutex_lock(&registry_lock);
  found = find_locked(ctx);
  if (!found) {
    NEXT(made) = live;
    live = made;
  }
  pthread_mutex_unlock(&registry_lock);
  if (found) {
    /* Nobody else ever saw it: no transfer, registration or user to wait
     * for, no handle to answer. */
    clpin__pool_close(made);
    clpin__pool_destroy(made);
    clpin__pool_recycle(made);
    made = found;
  }
  *pool = clpin__pool_handle(made);
  return CL_SUCCESS;
}

cl_int clpin_pool_get(cl_command_queue queue, clpin_pool **pool) {
  CLPIN__CHECK_FORK(); /* before any OpenCL call */
  CLPIN__CHECK_WHY(!queue, CL_INVALID_COMMAND_QUEUE, "the queue is NULL");
  CLPIN__CHECK_WHY(!pool, CLPIN_ERR_INVALID_ARGUMENT, "pool (the out-pointer) is NULL");
  cl_context ctx;
  cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
  CLPIN__CHECK_CL(err, "clGetCommandQueueInfo on the queue (CL_QUEUE_CONTEXT)");
  return clpin_pool_get_for_context(ctx, pool);
}

/* A context's release, driven from here, the layer that owns the pool's
 * lifetime (the layers below know nothing of the ones above):
 * 1. close the pool: every later call on it fails with
 *    CLPIN_ERR_POOL_RELEASED;
 * 2. the engine lets go of the pool's transfers still waiting for their wait
 *    list (they would hold the pool until the caller sets an event): its
 *    hook's `cancel`;
 * 3. wait for the users inside (calls in progress, transfers moving data);
 * 4. drop the registrations (nobody uses them now): register.c's hook's
 *    `drop`;
 * 5. the pool frees its buffers, queues and context. */
static void retire(clpin_pool *pool) {
  clpin__pool_close(pool);
  for (int i = 0; i < CLPIN__HOOK_COUNT; i++)
    if (hooks[i].cancel)
      hooks[i].cancel(pool);
  clpin__pool_drain(pool);
  for (int i = 0; i < CLPIN__HOOK_COUNT; i++)
    if (hooks[i].drop)
      hooks[i].drop(pool);
  clpin__pool_destroy(pool);
  clpin_pool *aged = NULL;
  pthread_mutex_lock(&registry_lock);
  NEXT(pool) = NULL;
  if (retired_tail)
    NEXT(retired_tail) = pool;
  else
    retired = pool;
  retired_tail = pool;
  if (++nretired > RETIRED_KEEP) {
    aged = retired;
    retired = NEXT(aged);
    nretired--;
  }
  pthread_mutex_unlock(&registry_lock);
  if (aged)
    clpin__pool_recycle(aged);
}

cl_int clpin_pool_release_context(cl_context ctx) {
  CLPIN__CHECK_FORK();
  CLPIN__CHECK_WHY(!ctx, CL_INVALID_CONTEXT, "the context is NULL");
  if (!clpin__used())
    return CL_SUCCESS; /* no pool was ever made */
  pthread_mutex_lock(&registry_lock);
  clpin_pool *found = NULL;
  for (clpin_pool **p = &live; *p; p = &NEXT(*p)) {
    if (clpin__pool_context(*p) == ctx) {
      found = *p;
      *p = NEXT(found);
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  if (found)
    retire(found);
  return CL_SUCCESS;
}

void clpin_shutdown(void) {
  if (clpin__forked() || !clpin__used())
    return; /* a child: the parent's pools, threads and driver are the
             * parent's; or no pool, thread or lock was ever made */
  pthread_mutex_lock(&registry_lock);
  clpin_pool *list = live;
  live = NULL;
  pthread_mutex_unlock(&registry_lock);
  while (list) {
    clpin_pool *next = NEXT(list);
    retire(list);
    list = next;
  }
  for (int i = 0; i < CLPIN__HOOK_COUNT; i++)
    if (hooks[i].shutdown)
      hooks[i].shutdown();
  clpin__copythreads_shutdown();
}

void *clpin__registry_find(void *(*fn)(clpin_pool *pool, void *arg), void *arg) {
  void *result = NULL;
  if (!clpin__used())
    return NULL; /* no pool: nothing to find, and no lock taken */
  pthread_mutex_lock(&registry_lock);
  for (clpin_pool *p = live; p && !result; p = NEXT(p))
    result = fn(p, arg);
  pthread_mutex_unlock(&registry_lock);
  return result;
}

/* ---- clpin_host_free ------------------------------------------------------ */

/* The one call about pool memory that names no pool: the registry finds the
 * pool whose clpin_host_alloc block starts at ptr. */
static void *find_host_alloc(clpin_pool *pool, void *ptr) {
  return clpin__host_alloc_at(pool, ptr);
}

cl_int clpin_host_free(void *ptr) {
  if (!ptr)
    return CL_SUCCESS;
  CLPIN__CHECK_FORK();
  clpin_block *blk = clpin__registry_find(find_host_alloc, ptr);
  CLPIN__CHECK_WHY(!blk && clpin__host_orphan_take(ptr), CLPIN_ERR_POOL_RELEASED,
                   "ptr came from clpin_host_alloc on a pool released since: its memory was "
                   "freed with the pool");
  CLPIN__CHECK_WHY(!blk, CLPIN_ERR_FOREIGN_POINTER,
                   "ptr is not the start of live clpin_host_alloc memory");
  cl_int err = clpin_release(blk, NULL);
  /* Lost a race with another free of the same pointer: it is freed now. */
  CLPIN__CHECK_WHY(err == CLPIN_ERR_DOUBLE_RELEASE, CLPIN_ERR_FOREIGN_POINTER,
                   "ptr was freed meanwhile, by another clpin_host_free of it");
  CLPIN__CHECK_WHY(err == CLPIN_ERR_POOL_RELEASED, err,
                   "ptr came from clpin_host_alloc on a pool released meanwhile: its memory "
                   "was freed with the pool");
  CLPIN__CHECK_WHY(err == CLPIN_ERR_ON_DEVICE, err,
                   "ptr's memory is handed to the device: clpin_host_reclaim first");
  return err;
}

/* At exit (or unload): with CLPIN_DEBUG=1, name each pool never released,
 * and what it still holds; then free the retired pools' heap parts. A pool
 * left live keeps its context and pinned memory until the process ends. */
__attribute__((destructor)) static void free_retired(void) {
  /* In a forked child the lock may be held by a thread that does not exist
   * there: leave everything to the process's end. */
  if (clpin__forked() || !clpin__used())
    return;
  pthread_mutex_lock(&registry_lock);
  if (clpin__debug())
    for (clpin_pool *p = live; p; p = NEXT(p))
      clpin__pool_report_unreleased(p);
  clpin_pool *list = retired;
  retired = retired_tail = NULL;
  nretired = 0;
  pthread_mutex_unlock(&registry_lock);
  while (list) {
    clpin_pool *next = NEXT(list);
    clpin__pool_free_retired(list);
    list = next;
  }
}
