/* SPDX-License-Identifier: Apache-2.0 */
/* The pool (pool.c, pool_blocks.c, pool_hostmem.c, pool_handle.c): what
 * the layers above it may use. struct clpin_pool and struct clpin_block are
 * opaque here (pool_impl.h is the pool's own). The pool calls nothing above it: what
 * it must tell an upper layer goes through a hook that layer registers. */
#ifndef CLPIN_POOL_H
#define CLPIN_POOL_H

#include "handoff.h"
#include "internal.h"
#include "lock.h"

/* The lifecycle of a pool: every user of a pool enters it first and leaves
 * it when done; clpin_pool_release_context marks the pool released, cancels
 * the engine's transfers that have not started, waits until every user has
 * left, and only then frees anything. Users are calls in progress on any
 * thread and the engine's queued transfers (entered when queued, left when
 * their last DMA has ended). Entering a released pool fails, so a stale
 * handle answers CLPIN_ERR_POOL_RELEASED and nothing touches freed memory.
 * Entering nests; enter and leave may happen on different threads. */
/* *pool is a caller's handle (tagged with the pool's generation, pool.h) or
 * an internal pointer; on success it is replaced by the pool's struct. */
cl_int
clpin__pool_enter(clpin_pool **pool); /* CL_SUCCESS, _INVALID_ARGUMENT, _POOL_RELEASED, _FORKED */
/* The same for a call whose failure is the caller's: a refusal records why,
 * in words, naming `func` (the public call) and `arg` (how the call got the
 * pool: "pool", "the queue's pool"). clpin__pool_enter records nothing, for
 * callers to whom a released pool is no error. */
cl_int clpin__pool_enter_for(const char *func, const char *arg, clpin_pool **pool);
void clpin__pool_leave(clpin_pool *pool); /* a handle or the struct */
/* clpin_acquire and clpin_release for a user already inside the pool (the
 * staging pipeline, run by a call or an engine job that entered it): they
 * do not enter again, so a release of the pool that began meanwhile (and
 * waits for this user) does not fail a transfer already moving data. */
cl_int clpin__acquire(clpin_pool *pool, size_t nbytes, clpin_block **block);
cl_int clpin__release(clpin_block *block, cl_event pending);
/* clpin__acquire for the transfers of one device of the pool: a block on
 * its NUMA node's free lists (never one of another node's). A device not in
 * the pool gets the first device's. */
cl_int clpin__acquire_for(clpin_pool *pool, cl_device_id device, size_t nbytes,
                          clpin_block **block);

/* Transfer counters staging bumps (atomics; no lock). */
typedef enum {
  CLPIN__FALLBACKS,
  CLPIN__BYTES_PINNED_DIRECT,
  CLPIN__BYTES_STAGED,
  CLPIN__BYTES_PIPELINED,
  CLPIN__BYTES_UNPINNED,
  CLPIN__BYTES_ZERO_COPY, /* host-unified devices: bytes used in place (unified.c, tensor.c) */
  CLPIN__BYTES_FILE_READ, /* file transfers (files.c), counted besides their path's */
  CLPIN__BYTES_FILE_WRITTEN,
  CLPIN__COUNTER_COUNT
} clpin__counter;
void clpin__count(clpin_pool *pool, clpin__counter c, uint64_t amount);

/* The pool's context and its internal queue (used for maps; owned by the
 * pool). */
cl_context clpin__pool_context(const clpin_pool *pool);
cl_command_queue clpin__pool_queue(const clpin_pool *pool);
/* The engine's DMA queue for one direction (0 host to device, 1 device to
 * host) of one device of the pool (owned by the pool); NULL for a device
 * not in the pool's context. */
cl_command_queue clpin__pool_dma_queue(const clpin_pool *pool, cl_device_id device, int dir);
/* The NUMA node the pool places device's blocks on, -1 for none (CLPIN_NUMA
 * off, one node, or the node unknown). */
int clpin__pool_device_node(const clpin_pool *pool, cl_device_id device);
/* The CPUs that run device's copy work (its node's), or NULL: any CPU.
 * Owned by the pool; a cpu_set_t. */
const void *clpin__pool_device_cpus(const clpin_pool *pool, cl_device_id device);
/* Staged bytes by the device of the queue their DMAs ran on (q's), and
 * direction: what shows that a transfer ran for its own device. */
void clpin__pool_count_device(clpin_pool *pool, cl_command_queue q, int dir, uint64_t nbytes);
uint64_t clpin__pool_device_bytes(clpin_pool *pool, cl_device_id device, int dir);
/* The NUMA node of a block's free lists (-1: not placed). */
int clpin__block_node(const clpin_block *block);
/* Whether device (of the pool's context) reports CL_DEVICE_HOST_UNIFIED_MEMORY;
 * cached at pool creation, no OpenCL call. Unknown device: false. */
bool clpin__pool_device_unified(const clpin_pool *pool, cl_device_id device);
/* Smallest CL_DEVICE_MAX_MEM_ALLOC_SIZE over the context's devices. */
size_t clpin__pool_max_alloc(const clpin_pool *pool);

/* pool_hostmem.c: the live block holding [ptr, ptr + n) as a target; false if none. */
bool clpin__block_target(clpin_pool *pool, const void *ptr, size_t n, clpin__handoff_target *t);
/* Whether a block handle's memory is handed to the device. */
bool clpin__block_out(const clpin_block *block);
/* pool_hostmem.c: the live block of pool (entered: its struct) whose range contains
 * [ptr, ptr+n), untagged, or NULL. */
clpin_block *clpin__pool_lookup(clpin_pool *pool, const void *ptr, size_t n);

/* The pool's table of caller memory pinned in place (clpin_host_register):
 * the pool holds it so that it lives as long as the pool; its contents are
 * register.c's. Registrations are sorted by address and guarded by `lock`;
 * `n` is also read without the lock, so a transfer skips the lookup while
 * there are none. */
typedef struct {
  clpin__spinlock lock;
  struct clpin__reg **regs;
  _Atomic size_t n;
  size_t cap;
  _Atomic size_t bytes; /* pinned by them: clpin_stats.bytes_registered */
} clpin__reg_table;
/* pool: entered, or being released by the registry (every user gone). */
clpin__reg_table *clpin__pool_regs(clpin_pool *pool);

/* ---- the pool's life, driven by the registry (registry.c) --------------- */

cl_int clpin__pool_create(cl_context ctx, clpin_pool **out);
/* A pool's release, in the three steps the registry orchestrates (registry.c
 * says the order and why; pool.c calls nothing above it):
 * close: mark the pool released, so that entering it fails from now on;
 * drain: wait until every user that entered before has left;
 * destroy: (every user gone, the registrations dropped) wait for in-flight
 * blocks and free every buffer, in use or not; release the queues and the
 * context. The struct stays (retired) for stale handles. */
void clpin__pool_close(clpin_pool *pool);
void clpin__pool_drain(clpin_pool *pool);
void clpin__pool_destroy(clpin_pool *pool);
/* CLPIN_DEBUG at exit: log that a live pool was never released, and what it
 * holds. No OpenCL call. */
void clpin__pool_report_unreleased(clpin_pool *pool);
/* Free the structs of a retired pool (process exit). */
void clpin__pool_free_retired(clpin_pool *pool);
/* Reuse a destroyed pool's slot for a later pool: its generation moves on,
 * so every handle to the released pool (its final counters too) answers
 * CLPIN_ERR_POOL_RELEASED from now on. The registry calls it once the
 * released pool has aged (registry.c). */
void clpin__pool_recycle(clpin_pool *pool);
/* The caller's handle to a pool (tagged with its generation). */
clpin_pool *clpin__pool_handle(clpin_pool *pool);

/* clpin_host_free, which names no pool (the registry finds it): the block
 * of pool that starts exactly at ptr, handed out by clpin_host_alloc, as a
 * handle (the registry lock held, so its pool is live and the generation
 * current: should the pool be released before clpin_release runs, the
 * handle answers CLPIN_ERR_POOL_RELEASED, whoever reuses the struct); NULL
 * if none. */
clpin_block *clpin__host_alloc_at(clpin_pool *pool, void *ptr);
/* Whether ptr came from clpin_host_alloc on a pool released since (once:
 * the answer is given once, then forgotten). */
bool clpin__host_orphan_take(void *ptr);

/* The registry's link between pools (its lists of live and retired pools). */
clpin_pool **clpin__pool_link(clpin_pool *pool);

#endif /* CLPIN_POOL_H */
