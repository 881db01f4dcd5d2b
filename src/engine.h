/* SPDX-License-Identifier: Apache-2.0 */
/* The engine (engine.c): non-blocking staged transfers, queued and run on
 * the copy threads. Internal. Its part of a pool's release and of clpin_shutdown
 * runs through the registry's hooks (registry.h). */
#ifndef CLPIN_ENGINE_H
#define CLPIN_ENGINE_H

#include "staging.h"

/* Queue x (non-blocking, staged) and return at once. The DMAs run
 * on the pool's DMA queue for x->dir of x->device (x->q's device), the host
 * copies on the copy threads; the event returned in *x->event (a marker on x->q)
 * completes when the data is in place. The descriptors a file transfer's
 * x->file owns are the engine's from this call on, also when it fails. */
cl_int clpin__engine_submit(const clpin__xfer *x);

#endif /* CLPIN_ENGINE_H */
