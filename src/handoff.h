/* SPDX-License-Identifier: Apache-2.0 */
/* Host mappings handed to the device and back (handoff.c): the primitive
 * that pool blocks and registrations embed, below both. */
#ifndef CLPIN_HANDOFF_H
#define CLPIN_HANDOFF_H

#include "internal.h"
#include "lock.h"

#include <stdint.h>

/* The host mapping of a pool block or a registration, handed to the device
 * range by range (clpin_host_lend / clpin_host_reclaim). OpenCL lets no
 * command use a buffer while a mapping of it for writing exists, so the first
 * range handed over unmaps the whole buffer and the last one given back maps
 * it again; the calls between only record their range (and their ordering
 * event). One call moves a handoff at a time: it takes the turn (`moving`,
 * set under `lock`), makes its OpenCL calls without any lock, then ends the
 * turn; only the turn's holder touches the fields below `moving`. */
typedef struct clpin__handoff {
  clpin__spinlock lock;
  atomic_bool moving;
  atomic_size_t nout; /* ranges with the device now; read without the lock by transfers */
  struct clpin__range {
    uintptr_t beg;
    size_t len;
  } * out; /* those ranges (duplicates allowed), capout slots */
  size_t capout;
  cl_event unmapped; /* the unmap's event, retained, while nout > 0 */
  cl_event *back;    /* markers of ranges given back while others stayed out */
  size_t nback, capback;
} clpin__handoff;
/* A handoff with nothing out (a new block or registration). */
void clpin__handoff_init(clpin__handoff *h);
/* Whether some range of it is with the device, or on its way there or back:
 * then clpin_write/clpin_read, clpin_release, clpin_host_free and
 * clpin_host_unregister refuse the memory (CLPIN_ERR_ON_DEVICE). */
bool clpin__handoff_out(clpin__handoff *h);
/* The end of a block or registration whose ranges may be out (a pool's
 * release): wait for the recorded events, release them, free the lists.
 * Returns whether the buffer is still mapped (nothing was out). */
bool clpin__handoff_end(clpin__handoff *h);
/* Whether no host range of any pool is handed to a device, nor on its way
 * there or back (a snapshot: a transfer racing a handoff of its own memory
 * is the caller's race, as it is for clpin_write). */
bool clpin__handoffs_idle(void);

/* The memory a handoff moves: a block's or a registration's whole buffer,
 * its host mapping (the pointer the caller holds) and whose it is. */
typedef struct {
  cl_mem buffer;
  void *host;
  size_t size;
  clpin__handoff *h;
  void *reg; /* a registration, claimed: clpin__register_unclaim gives it back */
} clpin__handoff_target;
/* The turn of one handoff (see above): take it before moving ranges, end it
 * after; while held, the process counts as not idle (clpin__handoffs_idle). */
void clpin__handoff_turn_take(clpin__handoff *h);
void clpin__handoff_turn_end(clpin__handoff *h);
/* Ranges moved out (delta > 0) or back (< 0), for clpin__handoffs_idle. */
void clpin__handoffs_busy_add(long delta);

#endif /* CLPIN_HANDOFF_H */
