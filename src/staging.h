/* One transfer as staging and the engine see it (staging.c, engine.c).
 * Internal. */
#ifndef CLPIN_STAGING_H
#define CLPIN_STAGING_H

#include "internal.h"

typedef enum { CLPIN__H2D = 0, CLPIN__D2H = 1 } clpin__dir;

typedef struct {
  cl_command_queue q; /* where the DMAs go */
  cl_mem mem;
  size_t offset;
  unsigned char *host; /* source of a write, destination of a read */
  size_t nbytes;
  unsigned flags;
  cl_uint num_wait;
  const cl_event *wait_list;
  cl_event *event;
  clpin__dir dir;
  clpin_pool *pool;
} clpin__xfer;

/* The staged transfer, driven by the calling thread: acquires the staging
 * blocks (on out-of-memory: a plain transfer, counted as a fallback), moves
 * the data through them with the host copies on the workers, and returns
 * with every DMA ended and the blocks back in the pool. x->event, if asked
 * for, gets the last DMA's (completed) event. Never a blocking OpenCL
 * transfer call: DMAs are enqueued non-blocking and waited for by event. */
cl_int clpin__staged(const clpin__xfer *x);

/* A plain transfer straight from or to the caller's memory, non-blocking
 * enqueue then a wait on its event unless CLPIN_NON_BLOCKING (the driver
 * serialises blocking calls across threads; waits on events it does not).
 * Counted under `counter`. */
cl_int clpin__plain(const clpin__xfer *x, clpin__counter counter, const char *why);

/* register.c: if x's host range lies wholly inside a live registration of
 * x->pool, run x as a plain transfer straight from/to it (counted as
 * bytes_pinned_direct), keep its event in the registration so that
 * clpin_host_unregister waits for it, set *err and return true. False
 * (nothing done) for memory that is not registered. */
bool clpin__register_transfer(const clpin__xfer *x, cl_int *err);

/* engine.c: queue x (non-blocking, staged) and return at once. The DMAs run
 * on the pool's DMA queue for x->dir, the host copies on the workers; the
 * event returned in *x->event (a marker on x->q) completes when the data is
 * in place. x->q must be on the pool's first device. */
cl_int clpin__engine_submit(const clpin__xfer *x);

/* engine.c: fail every transfer of pool that is still waiting to start, so
 * that a release never waits for an event only the caller will set. The
 * registry calls it in a pool's release, after clpin__pool_close. */
void clpin__engine_cancel(clpin_pool *pool);

/* register.c: wait for the transfers that used each of the pool's
 * registrations and drop them all. The registry calls it in a pool's
 * release, once every user has left (after clpin__pool_drain) and before
 * clpin__pool_destroy frees the pool's buffers. */
void clpin__register_release_all(clpin_pool *pool);

/* Stop the engine's waiter thread (clpin_shutdown, after every pool went). */
void clpin__engine_shutdown(void);

#endif /* CLPIN_STAGING_H */
