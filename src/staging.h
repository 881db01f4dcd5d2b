/* SPDX-License-Identifier: Apache-2.0 */
/* Staging (staging.c): a transfer through pinned pool blocks, one block or a
 * pipeline of chunks, and the plain transfer it falls back to. Internal. */
#ifndef CLPIN_STAGING_H
#define CLPIN_STAGING_H

#include "shape.h"

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

/* The path the calling thread's last transfer took, as its CLPIN_DEBUG line
 * names it ("staged", "pipelined", "staged (non-blocking)", "plain (...)",
 * "fallback: ...", "already pinned: ..."); NULL before any. The OpenCL
 * layer counts its routed transfers by it. */
extern _Thread_local const char *clpin__path_taken;

#endif /* CLPIN_STAGING_H */
