/* SPDX-License-Identifier: Apache-2.0 */
/* The registry (registry.c): one pool per cl_context, and the owner of
 * every pool's lifetime. It sits right above the pool; the layers above it
 * that keep state per pool (the engine's queued transfers, the
 * registrations) register hooks, so that the registry drives their part of
 * a release without calling up into them. */
#ifndef CLPIN_REGISTRY_H
#define CLPIN_REGISTRY_H

#include "pool.h"

/* Visit every live pool under the registry lock. The callback must not call
 * OpenCL. Returns the first non-NULL result of fn. */
void *clpin__registry_find(void *(*fn)(clpin_pool *pool, void *arg), void *arg);

/* What an upper layer does at a pool's release and at clpin_shutdown. Each
 * member may be NULL. For one pool, in slot order: `cancel` once the pool is
 * closed (new calls fail) and before the registry waits for its users;
 * `drop` after every user has left and before the pool frees its memory.
 * `shutdown` at clpin_shutdown, after every pool is released, before the
 * copy threads stop. No registry lock is held during a hook. */
typedef struct {
  void (*cancel)(clpin_pool *pool);
  void (*drop)(clpin_pool *pool);
  void (*shutdown)(void);
} clpin__registry_hooks;
/* The slots, in the order their hooks run. */
typedef enum { CLPIN__HOOK_ENGINE, CLPIN__HOOK_REGISTER, CLPIN__HOOK_COUNT } clpin__hook_slot;
/* Called from a load-time constructor (before any thread of clpin exists),
 * once per slot. */
void clpin__registry_hook(clpin__hook_slot slot, const clpin__registry_hooks *hooks);

#endif /* CLPIN_REGISTRY_H */
