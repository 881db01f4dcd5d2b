/* SPDX-License-Identifier: Apache-2.0 */
/* Staging (staging.c): a transfer through pinned pool blocks, one block or a
 * pipeline of chunks, and the plain transfer it falls back to. Internal. */
#ifndef CLPIN_STAGING_H
#define CLPIN_STAGING_H

#include "shape.h"

/* The staged transfer, driven by the calling thread: acquires the staging
 * blocks (on out-of-memory: a plain transfer, counted as a fallback), moves
 * the data through them with the host copies on the copy threads, and returns
 * with every DMA ended and the blocks back in the pool. x->event, if asked
 * for, gets the last DMA's (completed) event. Never a blocking OpenCL
 * transfer call: DMAs are enqueued non-blocking and waited for by event. */
cl_int clpin__staged(const clpin__xfer *x);

/* A plain transfer straight from or to the caller's memory, non-blocking
 * enqueue then a wait on its event unless CLPIN_NON_BLOCKING (the driver
 * serialises blocking calls across threads; waits on events it does not).
 * Counted under `counter`. */
cl_int clpin__plain(const clpin__xfer *x, clpin__counter counter, const char *why);

/* A file transfer's whole range between the file and host memory at mem
 * (a host-unified device's mapping of x->mem), the reads or writes spread
 * over the copy threads as a staged chunk's are. CLPIN_ERR_IO, with its detail,
 * when one fails. Counts the file bytes, nothing else. */
cl_int clpin__file_copy(const clpin__xfer *x, unsigned char *mem);

/* The path a transfer took. The OpenCL layer counts its routed transfers
 * by it (layer/route.c). */
typedef enum {
  CLPIN__PATH_NONE,      /* no transfer on this thread yet */
  CLPIN__PATH_DIRECT,    /* pinned memory (a pool block, a registration) straight to DMA */
  CLPIN__PATH_PLAIN,     /* the driver's call on the caller's memory: small, not pinned,
                            host-unified, or a fallback */
  CLPIN__PATH_STAGED,    /* through one pool block, on the calling thread */
  CLPIN__PATH_PIPELINED, /* through pool blocks in chunks, on the calling thread */
  CLPIN__PATH_ENGINE,    /* non-blocking: queued to the engine, staged there */
} clpin__path;
static inline bool clpin__path_staged(clpin__path p) {
  return p == CLPIN__PATH_STAGED || p == CLPIN__PATH_PIPELINED || p == CLPIN__PATH_ENGINE;
}
/* Record the path of the calling thread's transfer, and the words its
 * CLPIN_DEBUG line names it by ("pipelined", "plain (...)", ...). */
void clpin__path_set(clpin__path path, const char *why);
/* The path the calling thread's last transfer took (CLPIN__PATH_NONE before
 * any); *why, when why is not NULL, gets its words (NULL before any). */
clpin__path clpin__path_last(const char **why);

#endif /* CLPIN_STAGING_H */
