/* SPDX-License-Identifier: Apache-2.0 */
/* Handoffs: a host mapping (of a pool block or a registration) handed to
 * the device range by range and back (handoff.h says the protocol). The
 * pool and the registrations embed one each; clpin_host_lend and
 * clpin_host_reclaim (unified.c) move them. */
#include "handoff.h"
#include "events.h"
#include "options.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- handing a mapping to the device and back ---------------------------- */

/* Process-wide: handoffs in a turn, plus ranges out with a device, over
 * every pool. 0 means no host range anywhere is handed to a device, so a
 * small blocking rect or image write may go to the driver without finding
 * its pool (clpin__handoffs_idle, rect.c). */
static atomic_long handoffs_busy;

bool clpin__handoffs_idle(void) {
  return atomic_load_explicit(&handoffs_busy, memory_order_acquire) == 0;
}

void clpin__handoff_init(clpin__handoff *h) {
  atomic_init(&h->lock.held, 0);
  atomic_init(&h->moving, false);
  atomic_init(&h->nout, 0);
  h->out = NULL;
  h->capout = 0;
  h->unmapped = NULL;
  h->back = NULL;
  h->nback = h->capback = 0;
}

bool clpin__handoff_out(clpin__handoff *h) {
  return atomic_load(&h->nout) > 0 || atomic_load(&h->moving);
}

bool clpin__handoff_end(clpin__handoff *h) {
  size_t nout = atomic_load(&h->nout);
  bool mapped = nout == 0;
  atomic_fetch_sub(&handoffs_busy, (long)nout);
  cl_event evs[1] = {h->unmapped};
  for (size_t i = 0; i < 1 + h->nback; i++) {
    cl_event e = i == 0 ? evs[0] : h->back[i - 1];
    if (!e)
      continue;
    clpin__event_settle(e);
    clReleaseEvent(e);
  }
  free(h->out);
  free(h->back);
  clpin__handoff_init(h);
  return mapped;
}

/* Take the handoff's turn: one map/unmap call at a time per buffer. The
 * holder may wait on the driver, so the others yield, then sleep. */
void clpin__handoff_turn_take(clpin__handoff *h) {
  for (unsigned spins = 0;; spins++) {
    clpin__lock(&h->lock);
    if (!atomic_load(&h->moving)) {
      atomic_store(&h->moving, true);
      atomic_fetch_add(&handoffs_busy, 1);
      clpin__unlock(&h->lock);
      return;
    }
    clpin__unlock(&h->lock);
    if (spins < 64)
      sched_yield();
    else
      usleep(50);
  }
}

void clpin__handoff_turn_end(clpin__handoff *h) {
  clpin__lock(&h->lock);
  atomic_store(&h->moving, false);
  atomic_fetch_sub(&handoffs_busy, 1);
  clpin__unlock(&h->lock);
}

void clpin__handoffs_busy_add(long delta) { atomic_fetch_add(&handoffs_busy, delta); }
