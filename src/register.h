/* SPDX-License-Identifier: Apache-2.0 */
/* Registrations (register.c): caller memory pinned in place
 * (clpin_host_register). What the transfers and the zero-copy features
 * need of them. Internal. */
#ifndef CLPIN_REGISTER_H
#define CLPIN_REGISTER_H

#include "pool.h"

typedef struct clpin__reg clpin__reg;

/* The live registration of pool (entered) holding [ptr, ptr + n), claimed:
 * its unregister waits until clpin__register_unclaim. NULL when none (at
 * once, without a lock, when the pool has no registration). */
clpin__reg *clpin__register_claim(clpin_pool *pool, const void *ptr, size_t n);
/* Whether a range of r is handed to the device (the host must not touch it). */
bool clpin__register_out(clpin__reg *r);
/* Keep ev (one reference, now r's) for unregister to wait on: the event of a
 * non-blocking transfer from or to r's memory. r is claimed. */
void clpin__register_record(clpin_pool *pool, clpin__reg *r, cl_event ev);

/* The live registration holding [ptr, ptr + n), claimed (its
 * unregister waits) until clpin__register_unclaim; false if none, or if it
 * is not mapped (a device that is not host-unified: no handoff there). */
bool clpin__register_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t);
void clpin__register_unclaim(void *reg);

#endif /* CLPIN_REGISTER_H */
